// Shared-memory regions for callers on the same host (docs/transport.md).
//
// A region is a POSIX shared-memory object (shm_open name) that a caller on
// the Unix socket registers under a name: the registry maps it once, has the
// engine page-lock it (Engine::register_host_memory: cudaHostRegister on the
// CUDA engine), and counts its bytes against --region-bytes. A Multiply whose
// header names regions reads A, B (and C) from them and may write C into one,
// so no matrix byte crosses gRPC.
//
// Lifetime: the registry holds one reference to each MappedRegion; every request
// using it holds another (acquire()). unregister() and drop_connection()
// remove the name at once; the mapping, the page lock and the budget go when
// the last reference does (the request that finishes last), and then the
// unregister's callback runs: UnregisterRegion answers only once no request
// uses the region. A registration belongs to the Unix connection it was made
// on; the connection table (unix_connections.h) calls drop_connection() when
// that connection closes, so a client that dies leaves nothing behind.
//
// Rights: the peer's credentials (SO_PEERCRED of its Unix connection) must
// let it read and write the object by its owner, group or other bits
// (check_region_access); root gets no exemption, so the server, which often
// runs as root, never lends a caller bytes the caller could not open itself.
// And a region is its registering owner's (check_region_owner): its client
// with tokens, its Unix user without.
//
// Truncation: the caller keeps its object and may shrink it (ftruncate) while
// the server uses it. Every mapping is guarded (region_guard.h): a truncation
// costs the requests that read the lost pages (check_intact() fails them),
// never the process; acquire() refuses a region that shrank or lost pages.
//
// Threads: every method is thread-safe (one mutex). A MappedRegion's release (unmap,
// unlock, callbacks) runs on the thread that drops the last reference, with
// no registry lock held.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/engine/engine.h"

namespace sgemm {

// Who is at the other end of a Unix connection (SO_PEERCRED).
struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

// The caller of an RPC as the region code sees it: its Unix connection, or
// none (TCP).
struct RegionCaller {
  bool unix_socket = false;  // false: regions are refused
  uint64_t connection = 0;   // the Unix connection's id (unix_connections.h)
  PeerCredentials cred;
  std::string client;  // the bearer token's client (--auth-tokens); "" without tokens
  // The client's quota of registered bytes (ClientQuota::max_region_bytes); 0 = none.
  int64_t max_region_bytes = 0;
  // A region exists to be multiplied: a client without the right to
  // (multiply: false) may not pin memory with one.
  bool may_register = true;
};

// Whose a region is. With tokens (--auth-tokens), the client that registered
// it; without, the Unix user that did (its connection's SO_PEERCRED uid).
// Another owner may not use, list or unregister it, on top of the object's
// file rights: without tokens, a second local user who may open the object
// (mode 0666, say) still cannot name a region the first one registered, nor
// learn its name.
struct RegionOwner {
  std::string client;  // the token's client; "" without tokens
  uid_t uid = 0;       // the registering peer's uid (compared only without tokens)
};
RegionOwner region_owner(const RegionCaller& caller);

// OK when `caller` is `owner` by the rule above; PERMISSION_DENIED naming
// both (the clients, or the uids) otherwise.
Status check_region_owner(const RegionCaller& caller, const std::string& region, const RegionOwner& owner);

// OK when `cred` may read and write an object with `st`'s owner and mode, by
// the usual owner / group / other rule, with no exemption for root.
// PERMISSION_DENIED naming the uid, the owner and the mode otherwise.
Status check_region_access(const PeerCredentials& cred, const struct stat& st);

// Valid shm_open names: "/" then 1-250 characters, none of them '/'.
Status check_shm_name(const std::string& shm_name);

// One mapped, page-locked region. Immutable once made; shared by the registry
// and the requests using it.
class MappedRegion {
 public:
  ~MappedRegion();  // unregisters the memory from the engine, unmaps, returns the bytes, runs the release callbacks
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  const std::string& name() const { return name_; }
  const std::string& shm_name() const { return shm_name_; }
  char* data() const { return static_cast<char*>(data_); }
  int64_t bytes() const { return bytes_; }
  uint64_t connection() const { return connection_; }
  const struct stat& stat_at_registration() const { return st_; }
  // OK while every registered byte is still there: FAILED_PRECONDITION naming
  // the region when its owner shrank the object below them (fstat now), or
  // when a truncation already hit a use of it (its pages are zeros since).
  // A request that read or wrote the region checks it after its last access.
  Status check_intact() const;

 private:
  friend class RegionRegistry;
  MappedRegion() = default;

  std::string name_, shm_name_;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  int fd_ = -1;          // the object, kept open for check_intact()'s fstat
  int guard_slot_ = -1;  // region_guard.h
  uint64_t connection_ = 0;
  RegionOwner owner_;
  struct stat st_ {};
  Engine* engine_ = nullptr;
  bool engine_registered_ = false;
  std::function<void(int64_t)> give_back_;  // returns bytes_ to the registry's budget
  std::mutex mu_;
  std::vector<std::function<void()>> on_release_;  // guarded by mu_; run by the destructor
};

struct RegionRow {
  std::string name, shm_name;
  int64_t bytes = 0;
  int requests_using = 0;
  bool this_connection = false;
};

struct RegionRegistryOptions {
  int64_t capacity_bytes = 0;  // --region-bytes: registered regions together; must be > 0
  // Registrations at once, all connections together. Each keeps a descriptor
  // open (check_intact()'s fstat), so the registry takes at most a quarter of
  // the process's open-files limit, whichever is smaller: regions can never
  // exhaust the descriptors the listeners and connections need.
  int max_regions = 4096;
  // Without tokens, one Unix user's registered bytes, all its connections
  // together (with tokens the client's max_region_bytes bounds them instead),
  // so that one local user cannot take the whole budget from the others;
  // 0 = no bound of its own (capacity_bytes only).
  int64_t max_bytes_per_user = 0;
};

class RegionRegistry {
 public:
  RegionRegistry(Engine& engine, RegionRegistryOptions options);
  ~RegionRegistry();  // drops every registration (requests still holding one keep it until they end)

  // Maps `shm_name`'s first `byte_size` bytes (0 = all of it) under `name`.
  // Errors: FAILED_PRECONDITION off the Unix socket; INVALID_ARGUMENT (name,
  // size); NOT_FOUND (no such object); PERMISSION_DENIED; ALREADY_EXISTS;
  // RESOURCE_EXHAUSTED (budget, count, page-locking); PERMISSION_DENIED over
  // the client's max_region_bytes (its registrations on every connection
  // counted); RESOURCE_EXHAUSTED, without tokens, over the Unix user's
  // max_bytes_per_user (its registrations on every connection counted).
  // Returns the bytes mapped.
  StatusOr<int64_t> register_region(const RegionCaller& caller, const std::string& name, const std::string& shm_name,
                                    int64_t byte_size);

  // Removes `name`; `released(waited)` runs once no request holds it (inline
  // when none does), `waited` being the requests that held it at the call.
  Status unregister_region(const RegionCaller& caller, const std::string& name,
                           std::function<void(int waited)> released);

  // A reference for a request: the region stays mapped until it is dropped.
  StatusOr<std::shared_ptr<const MappedRegion>> acquire(const RegionCaller& caller, const std::string& name) const;

  std::vector<RegionRow> list(const RegionCaller& caller) const;

  // The Unix connection `connection` closed: its registrations go.
  void drop_connection(uint64_t connection);

  int64_t capacity() const { return options_.capacity_bytes; }
  int64_t bytes_in_use() const;
  int count() const;
  int max_regions() const { return max_regions_; }

 private:
  Engine& engine_;
  const RegionRegistryOptions options_;
  const int max_regions_;  // options_.max_regions within a quarter of RLIMIT_NOFILE
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<MappedRegion>> regions_;  // guarded by mu_
  std::shared_ptr<int64_t> in_use_;                               // guarded by *in_use_mu_; outlives the registry
  std::shared_ptr<std::map<std::string, int64_t>> client_bytes_;  // per client (tokens); likewise
  std::shared_ptr<std::map<uid_t, int64_t>> user_bytes_;          // per Unix user (no tokens); likewise
  std::shared_ptr<std::mutex> in_use_mu_;
};

// The error for region use off the Unix socket.
Status regions_need_unix_socket(const std::string& what);

}  // namespace sgemm
