// The one internal error type of sgemm-service.
//
// Every layer returns Status / StatusOr<T>; CUDA, cuBLAS and NCCL results are
// turned into a Status where the call is made (see cuda_status.h), and the
// gRPC peers (service, cluster, client) translate in exactly one place
// (proto/grpc_status.cc). Codes mirror gRPC's so that mapping is 1:1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace sgemm {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,  // a peer's error with no better code
  kNotFound = 5,
  kAlreadyExists = 6,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kPermissionDenied = 7,  // authenticated, but not allowed this (rights, per-client quotas)
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,       // retryable: the caller may try again later
  kResourceExhausted = 8,  // out of memory, queue full, over a limit
  kDataLoss = 15,
  kUnauthenticated = 16,  // no valid credentials (bearer token)
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status Unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) (void)(status_ = Internal("StatusOr constructed from an OK status without a value"));
  }
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace sgemm

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define SGEMM_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::sgemm::Status sgemm_status_ = (expr);        \
    if (!sgemm_status_.ok()) return sgemm_status_; \
  } while (0)

#define SGEMM_CONCAT_INNER_(a, b) a##b
#define SGEMM_CONCAT_(a, b) SGEMM_CONCAT_INNER_(a, b)
// `SGEMM_ASSIGN_OR_RETURN(auto x, f());` binds x to the value or returns the Status.
// lhs is not parenthesised: it may be a declaration.
#define SGEMM_ASSIGN_OR_RETURN(lhs, expr)                                                           \
  auto SGEMM_CONCAT_(sgemm_or_, __LINE__) = (expr);                                                 \
  if (!SGEMM_CONCAT_(sgemm_or_, __LINE__).ok()) return SGEMM_CONCAT_(sgemm_or_, __LINE__).status(); \
  lhs = std::move(SGEMM_CONCAT_(sgemm_or_, __LINE__)).value()  // NOLINT(bugprone-macro-parentheses): lhs declares
