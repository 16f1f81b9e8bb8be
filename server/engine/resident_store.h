// The store of resident matrices (docs/resident.md): matrices a client put
// once and names by handle in later requests. Backend-neutral: the store owns
// the names (random 128-bit handles, never reused), the owners, the pins of
// running requests, the least-recently-used order and the per-location byte
// budgets; each engine owns the memory (ResidentData: host memory on the CPU
// engine, pieces on GPUs on the CUDA engine) and charges it to the budget
// through reserve().
//
// Rules:
//   - a matrix is pinned while a request uses it (Lease): it is never evicted
//     then, and its memory stays until the last lease ends, even when
//     DeleteMatrix removed its name (remove() takes the name at once);
//   - reserve() makes room on a location by dropping unpinned evictable
//     matrices that hold bytes there, least recently used first; when that is
//     not enough it fails RESOURCE_EXHAUSTED naming --resident-bytes and the
//     numbers;
//   - with owners (client names, --auth-tokens), a handle is usable only by
//     its owner (PERMISSION_DENIED otherwise); "" is the owner without tokens;
//   - a handle never put, deleted or evicted is NOT_FOUND, naming the handle
//     (and saying when it was evicted, for the last 4096 evictions).
//
// Threads: every method is thread-safe. mu_ guards the entries; bytes_mu_ the
// budget counters. Data is destroyed (and its bytes released) with neither
// held, so a backend's destructor may take its own locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "server/planner/placement.h"

namespace sgemm {

class ResidentStore;

// Bytes of one location's budget (a GPU, or -1: host), held by a piece of a
// resident matrix and given back when it is destroyed. Move-only.
class ResidentBytes {
 public:
  ResidentBytes() = default;
  ResidentBytes(ResidentStore* store, int location, int64_t bytes)
      : store_(store), location_(location), bytes_(bytes) {}
  ResidentBytes(ResidentBytes&& o) noexcept { *this = std::move(o); }
  ResidentBytes& operator=(ResidentBytes&& o) noexcept;
  ResidentBytes(const ResidentBytes&) = delete;
  ResidentBytes& operator=(const ResidentBytes&) = delete;
  ~ResidentBytes() { reset(); }
  void reset();
  int64_t bytes() const { return bytes_; }
  int location() const { return location_; }

 private:
  ResidentStore* store_ = nullptr;
  int location_ = -1;
  int64_t bytes_ = 0;
};

// A backend's memory for one resident matrix.
class ResidentData {
 public:
  virtual ~ResidentData() = default;
  virtual Layout layout() const = 0;  // where its rows are
};

// One resident matrix (row-major, dense, rows x cols fp32).
struct ResidentMatrix {
  std::string handle;  // 32 hex digits
  std::string owner;   // client name (--auth-tokens); "" without tokens
  std::string label;   // the client's name for it (PutMatrix), shown by ListMatrices
  int64_t rows = 0, cols = 0;
  bool evictable = false;
  int64_t bytes() const { return rows * cols * int64_t(sizeof(float)); }

  // The backend's data. The CUDA engine replaces it when a plan needs
  // another layout (requests holding the old one keep it alive until done).
  std::shared_ptr<ResidentData> data() const SGEMM_EXCLUDES(data_mu_) {
    MutexLock lock(data_mu_);
    return data_;
  }
  void set_data(std::shared_ptr<ResidentData> d) const SGEMM_EXCLUDES(data_mu_) {
    std::shared_ptr<ResidentData> old;
    {
      MutexLock lock(data_mu_);
      old = std::move(data_);
      data_ = std::move(d);
    }
  }
  // Held by an engine while it changes the layout, so two requests do not
  // move the same matrix at once. It guards no member (the layout is data_).
  std::mutex& layout_mutex() const { return layout_mu_; }

 private:
  mutable Mutex data_mu_;
  mutable std::shared_ptr<ResidentData> data_ SGEMM_GUARDED_BY(data_mu_);
  mutable std::mutex layout_mu_;
};

// One line of ListMatrices.
struct ResidentRow {
  std::string handle, owner, label;
  int64_t rows = 0, cols = 0, bytes = 0;
  bool evictable = false;
  Layout layout;
  int in_use = 0;     // requests holding it now
  int64_t uses = 0;   // requests that named it
  double idle_s = 0;  // since its last use (or its put)
};

struct ResidentStoreOptions {
  // Budget of each location: per GPU on the CUDA engine, host memory on the
  // CPU engine (--resident-bytes).
  int64_t bytes_per_location = int64_t{1} << 30;
  std::vector<int> locations{-1};  // device ids (-1 = host)
};

class ResidentStore {
 public:
  explicit ResidentStore(ResidentStoreOptions options);
  ~ResidentStore();
  // Drops every name (a matrix in use goes when its last lease ends).
  void clear() SGEMM_EXCLUDES(mu_);

  // A running request's pin on one matrix. Move-only; unpins when destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(ResidentStore* store, std::shared_ptr<const ResidentMatrix> m) : store_(store), m_(std::move(m)) {}
    Lease(Lease&& o) noexcept { *this = std::move(o); }
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { reset(); }
    void reset();
    const ResidentMatrix* get() const { return m_.get(); }
    const ResidentMatrix* operator->() const { return m_.get(); }
    explicit operator bool() const { return m_ != nullptr; }

   private:
    ResidentStore* store_ = nullptr;
    std::shared_ptr<const ResidentMatrix> m_;
  };

  // Takes `bytes` of `location`'s budget, evicting unpinned evictable matrices
  // there (least recently used first) when needed. `what` names the request
  // in the RESOURCE_EXHAUSTED message.
  StatusOr<ResidentBytes> reserve(int location, int64_t bytes, std::string_view what) SGEMM_EXCLUDES(mu_, bytes_mu_);
  // The location with the most room (ties: the first), for a new matrix.
  int roomiest_location() const SGEMM_EXCLUDES(bytes_mu_);

  // Adds a matrix (its data already made and its bytes reserved); returns it
  // with its new handle set.
  std::shared_ptr<const ResidentMatrix> add(std::string owner, std::string label, int64_t rows, int64_t cols,
                                            bool evictable, std::shared_ptr<ResidentData> data) SGEMM_EXCLUDES(mu_);
  // Pins the matrix for a request by `caller`: NOT_FOUND naming the handle,
  // PERMISSION_DENIED for another client's matrix.
  StatusOr<Lease> acquire(std::string_view handle, std::string_view caller) SGEMM_EXCLUDES(mu_);
  // Removes the name now; the memory goes when the last lease ends. Returns
  // how many requests were using it.
  StatusOr<int> remove(std::string_view handle, std::string_view caller) SGEMM_EXCLUDES(mu_);
  std::vector<ResidentRow> list(std::string_view caller) const SGEMM_EXCLUDES(mu_);

  int64_t capacity() const { return options_.bytes_per_location; }
  // The matrix bytes (rows x cols x 4, once per matrix) `owner`'s names hold.
  int64_t owner_bytes(std::string_view owner) const SGEMM_EXCLUDES(mu_);
  int64_t in_use(int location) const SGEMM_EXCLUDES(bytes_mu_);
  int64_t in_use_total() const SGEMM_EXCLUDES(bytes_mu_);
  int count() const SGEMM_EXCLUDES(mu_);

  // A new handle: 128 bits from getrandom(2), as 32 hex digits.
  static std::string new_handle();

 private:
  friend class ResidentBytes;
  friend class Lease;
  struct Entry {
    std::shared_ptr<ResidentMatrix> m;
    int pins = 0;
    int64_t uses = 0;
    uint64_t last_tick = 0;  // LRU order
    std::chrono::steady_clock::time_point last_use;
  };
  void release(int location, int64_t bytes) SGEMM_EXCLUDES(bytes_mu_);
  void unpin(const ResidentMatrix* m) SGEMM_EXCLUDES(mu_);
  std::string not_found(std::string_view handle) const SGEMM_REQUIRES(mu_);

  const ResidentStoreOptions options_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ SGEMM_GUARDED_BY(mu_);
  std::unordered_set<std::string> evicted_ SGEMM_GUARDED_BY(mu_);  // recent evictions, for NOT_FOUND's message
  std::deque<std::string> evicted_order_ SGEMM_GUARDED_BY(mu_);
  uint64_t tick_ SGEMM_GUARDED_BY(mu_) = 0;
  // Taken inside mu_ (never the other way round), or alone.
  mutable Mutex bytes_mu_ SGEMM_ACQUIRED_AFTER(mu_);
  std::map<int, int64_t> used_ SGEMM_GUARDED_BY(bytes_mu_);  // per location
};

}  // namespace sgemm
