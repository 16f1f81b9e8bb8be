#include "server/service/region_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "server/service/region_guard.h"

namespace sgemm {

namespace {

std::string mode_text(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(m & 07777));
  return buf;
}

}  // namespace

Status MappedRegion::check_intact() const {
  if (caller_memory_lost(guard_slot_))
    return FailedPrecondition("region '" + name_ + "' (shared-memory object '" + shm_name_ +
                              "') lost its pages while the server used them: its owner shrank the object below the " +
                              std::to_string(bytes_) +
                              " bytes registered (ftruncate), so what was read or written there is void; "
                              "unregister the region and register it again");
  struct stat st {};
  if (fd_ >= 0 && fstat(fd_, &st) == 0 && int64_t(st.st_size) < bytes_)
    return FailedPrecondition("region '" + name_ + "' (shared-memory object '" + shm_name_ + "') was registered with " +
                              std::to_string(bytes_) + " bytes but the object now has " + std::to_string(st.st_size) +
                              " (shrunk by ftruncate); unregister the region and register it again");
  return Status::Ok();
}

Status regions_need_unix_socket(const std::string& what) {
  return FailedPrecondition(what +
                            " needs the server's Unix-domain socket (--listen unix:PATH): shared-memory regions are "
                            "offered only to callers on the same host, whose credentials the socket proves; "
                            "this call came over TCP");
}

Status check_region_access(const PeerCredentials& cred, const struct stat& st) {
  const mode_t rw_owner = S_IRUSR | S_IWUSR, rw_group = S_IRGRP | S_IWGRP, rw_other = S_IROTH | S_IWOTH;
  bool ok;
  if (cred.uid == st.st_uid)
    ok = (st.st_mode & rw_owner) == rw_owner;
  else if (cred.gid == st.st_gid)
    ok = (st.st_mode & rw_group) == rw_group;
  else
    ok = (st.st_mode & rw_other) == rw_other;
  if (ok) return Status::Ok();
  return PermissionDenied("peer uid " + std::to_string(cred.uid) + " gid " + std::to_string(cred.gid) +
                          " may not read and write a shared-memory object owned by uid " + std::to_string(st.st_uid) +
                          " gid " + std::to_string(st.st_gid) + " with mode " + mode_text(st.st_mode) +
                          " (the server checks the owner/group/other bits against the Unix socket's peer "
                          "credentials; root gets no exemption)");
}

Status check_shm_name(const std::string& n) {
  if (n.size() < 2 || n.size() > 251 || n[0] != '/' || n.find('/', 1) != std::string::npos || n == "/." || n == "/..")
    return InvalidArgument("shm_name '" + n +
                           "' is not a POSIX shared-memory name: '/' then 1-250 characters without '/'");
  return Status::Ok();
}

MappedRegion::~MappedRegion() {
  if (engine_registered_) (void)engine_->unregister_host_memory(data_);
  // Unguarded before the unmap (nothing touches the region now: its last
  // reference is gone), so the slot never names an address range that another
  // mapping may take over.
  unguard_caller_memory(guard_slot_);
  if (data_) munmap(data_, std::size_t(bytes_));
  if (fd_ >= 0) close(fd_);
  if (give_back_) give_back_(bytes_);
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mu_);
    callbacks.swap(on_release_);
  }
  for (auto& f : callbacks) f();
}

namespace {

int regions_within_descriptors(int wanted) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return wanted;
  return int(std::min<rlim_t>(rlim_t(wanted), std::max<rlim_t>(1, r.rlim_cur / 4)));
}

}  // namespace

RegionRegistry::RegionRegistry(Engine& engine, RegionRegistryOptions options)
    : engine_(engine),
      options_(options),
      max_regions_(regions_within_descriptors(options.max_regions)),
      in_use_(std::make_shared<int64_t>(0)),
      client_bytes_(std::make_shared<std::map<std::string, int64_t>>()),
      user_bytes_(std::make_shared<std::map<uid_t, int64_t>>()),
      in_use_mu_(std::make_shared<std::mutex>()) {}

RegionRegistry::~RegionRegistry() {
  std::map<std::string, std::shared_ptr<MappedRegion>> gone;
  {
    std::lock_guard lock(mu_);
    gone.swap(regions_);
  }
}

RegionOwner region_owner(const RegionCaller& caller) { return {caller.client, caller.cred.uid}; }

Status check_region_owner(const RegionCaller& caller, const std::string& region, const RegionOwner& owner) {
  if (!owner.client.empty() || !caller.client.empty()) {
    if (owner.client == caller.client) return Status::Ok();
    return PermissionDenied("region '" + region + "' belongs to client '" + owner.client + "'; this call is client '" +
                            caller.client + "' (--auth-tokens)");
  }
  if (owner.uid == caller.cred.uid) return Status::Ok();
  return PermissionDenied("region '" + region + "' belongs to Unix user " + std::to_string(owner.uid) +
                          "; this call comes from Unix user " + std::to_string(caller.cred.uid) +
                          " (without --auth-tokens a region belongs to the uid that registered it)");
}

StatusOr<int64_t> RegionRegistry::register_region(const RegionCaller& caller, const std::string& name,
                                                  const std::string& shm_name, int64_t byte_size) {
  if (!caller.unix_socket) return regions_need_unix_socket("RegisterRegion");
  if (!caller.may_register)
    return PermissionDenied("client '" + caller.client + "' may not register regions (its token has multiply: false)");
  if (name.empty() || name.size() > 128) return InvalidArgument("region name must have 1-128 characters");
  SGEMM_RETURN_IF_ERROR(check_shm_name(shm_name));
  if (byte_size < 0) return InvalidArgument("byte_size must be >= 0 (0 = the whole object)");
  {
    std::lock_guard lock(mu_);
    if (regions_.count(name)) return AlreadyExists("a region named '" + name + "' is already registered");
    if (int(regions_.size()) >= max_regions_)
      return ResourceExhausted(std::to_string(regions_.size()) +
                               " regions are registered, the server's limit (at most a quarter of its open-files "
                               "limit: each holds a descriptor)");
  }
  // The server opens the object itself; what the caller may do is decided on
  // this descriptor's owner and mode (fstat), so nothing can be swapped in between.
  const int fd = shm_open(shm_name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return NotFound("no shared-memory object '" + shm_name + "' (shm_open: " + strerror(e) + ")");
    if (e == EACCES) return PermissionDenied("the server cannot open '" + shm_name + "': " + strerror(e));
    if (e == EMFILE || e == ENFILE)
      return ResourceExhausted("the server has no descriptor left to open '" + shm_name + "': " + strerror(e));
    return InvalidArgument("cannot open shared-memory object '" + shm_name + "': " + strerror(e));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return Internal("fstat of '" + shm_name + "': " + strerror(e));
  }
  if (Status access = check_region_access(caller.cred, st); !access.ok()) {
    close(fd);
    return access;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return InvalidArgument("'" + shm_name + "' is not a regular shared-memory object");
  }
  const int64_t size = byte_size == 0 ? int64_t(st.st_size) : byte_size;
  if (size <= 0 || size > int64_t(st.st_size)) {
    close(fd);
    return InvalidArgument("byte_size " + std::to_string(byte_size) + " does not fit '" + shm_name + "' of " +
                           std::to_string(st.st_size) + " bytes (0 = all of it; an empty object cannot be a region)");
  }
  // The budget, before mapping and page-locking.
  {
    std::lock_guard lock(*in_use_mu_);
    if (*in_use_ + size > options_.capacity_bytes) {
      close(fd);
      return ResourceExhausted("registering " + std::to_string(size) + " bytes would exceed the region budget (" +
                               std::to_string(*in_use_) + " of " + std::to_string(options_.capacity_bytes) +
                               " bytes registered, --region-bytes); unregister regions or raise it");
    }
    const int64_t client_held = client_bytes_->count(caller.client) ? client_bytes_->at(caller.client) : 0;
    if (caller.max_region_bytes > 0 && client_held + size > caller.max_region_bytes) {
      close(fd);
      return PermissionDenied("client '" + caller.client + "' has " + std::to_string(client_held) +
                              " bytes of regions registered; " + std::to_string(size) +
                              " more would exceed its quota of " + std::to_string(caller.max_region_bytes) +
                              " (max_region_bytes); unregister regions first");
    }
    // Without tokens the Unix user is the account: its regions on every
    // connection count together against its share of the budget.
    const bool per_user = caller.client.empty();
    const int64_t user_held = per_user && user_bytes_->count(caller.cred.uid) ? user_bytes_->at(caller.cred.uid) : 0;
    if (per_user && options_.max_bytes_per_user > 0 && user_held + size > options_.max_bytes_per_user) {
      close(fd);
      return ResourceExhausted("Unix user " + std::to_string(caller.cred.uid) + " has " + std::to_string(user_held) +
                               " bytes of regions registered; " + std::to_string(size) +
                               " more would exceed its share of " + std::to_string(options_.max_bytes_per_user) +
                               " (--region-bytes-per-user: without --auth-tokens each Unix user's regions count "
                               "together, all its connections); unregister regions first");
    }
    *in_use_ += size;
    if (per_user)
      (*user_bytes_)[caller.cred.uid] += size;
    else
      (*client_bytes_)[caller.client] += size;
  }
  auto in_use = in_use_;
  auto in_use_mu = in_use_mu_;
  auto client_bytes = client_bytes_;
  auto user_bytes = user_bytes_;
  std::shared_ptr<MappedRegion> r(new MappedRegion());
  r->give_back_ = [in_use, in_use_mu, client_bytes, user_bytes, client = caller.client,
                   uid = caller.cred.uid](int64_t bytes) {
    std::lock_guard lock(*in_use_mu);
    *in_use -= bytes;
    if (client.empty()) {
      if (((*user_bytes)[uid] -= bytes) <= 0) user_bytes->erase(uid);
    } else if (((*client_bytes)[client] -= bytes) <= 0) {
      client_bytes->erase(client);
    }
  };
  r->bytes_ = size;
  r->name_ = name;
  r->shm_name_ = shm_name;
  r->connection_ = caller.connection;
  r->owner_ = region_owner(caller);
  r->st_ = st;
  r->engine_ = &engine_;
  r->fd_ = fd;  // closed by the region's destructor
  void* p = mmap(nullptr, std::size_t(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  if (p == MAP_FAILED) return ResourceExhausted("cannot map '" + shm_name + "': " + strerror(map_errno));
  // Guarded before anything touches a page (the engine's page-locking included).
  const int slot = guard_caller_memory(p, std::size_t(size));
  if (slot < 0) {
    munmap(p, std::size_t(size));
    return ResourceExhausted("every one of the server's " + std::to_string(caller_memory_slots()) +
                             " guarded mappings is in use; unregister regions first");
  }
  r->data_ = p;
  r->guard_slot_ = slot;
  SGEMM_RETURN_IF_ERROR(engine_.register_host_memory(p, std::size_t(size)));
  r->engine_registered_ = true;
  {
    std::lock_guard lock(mu_);
    if (regions_.count(name)) return AlreadyExists("a region named '" + name + "' is already registered");
    regions_.emplace(name, std::move(r));
  }
  return size;
}

Status RegionRegistry::unregister_region(const RegionCaller& caller, const std::string& name,
                                         std::function<void(int waited)> released) {
  if (!caller.unix_socket) return regions_need_unix_socket("UnregisterRegion");
  std::shared_ptr<MappedRegion> r;
  {
    std::lock_guard lock(mu_);
    auto it = regions_.find(name);
    if (it == regions_.end()) return NotFound("no region named '" + name + "' is registered");
    SGEMM_RETURN_IF_ERROR(check_region_access(caller.cred, it->second->st_));
    SGEMM_RETURN_IF_ERROR(check_region_owner(caller, name, it->second->owner_));
    r = std::move(it->second);
    regions_.erase(it);
  }
  // Requests hold the other references; this one goes last of ours.
  const int waited = int(r.use_count()) - 1;
  {
    std::lock_guard lock(r->mu_);
    r->on_release_.push_back([released = std::move(released), waited] { released(waited); });
  }
  r.reset();  // the release (and the callback) run here when no request holds it
  return Status::Ok();
}

StatusOr<std::shared_ptr<const MappedRegion>> RegionRegistry::acquire(const RegionCaller& caller,
                                                                      const std::string& name) const {
  if (!caller.unix_socket) return regions_need_unix_socket("a Multiply naming shared-memory regions");
  std::lock_guard lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end())
    return NotFound("no region named '" + name +
                    "' is registered (it was never registered, was unregistered, or its connection closed)");
  SGEMM_RETURN_IF_ERROR(check_region_access(caller.cred, it->second->st_));
  SGEMM_RETURN_IF_ERROR(check_region_owner(caller, name, it->second->owner_));
  SGEMM_RETURN_IF_ERROR(it->second->check_intact());
  return std::shared_ptr<const MappedRegion>(it->second);
}

std::vector<RegionRow> RegionRegistry::list(const RegionCaller& caller) const {
  std::vector<RegionRow> rows;
  if (!caller.unix_socket) return rows;
  std::lock_guard lock(mu_);
  for (const auto& [name, r] : regions_) {
    if (!check_region_access(caller.cred, r->st_).ok()) continue;
    if (!check_region_owner(caller, name, r->owner_).ok()) continue;
    rows.push_back({name, r->shm_name(), r->bytes(), int(r.use_count()) - 1, r->connection() == caller.connection});
  }
  return rows;
}

void RegionRegistry::drop_connection(uint64_t connection) {
  std::vector<std::shared_ptr<MappedRegion>> gone;
  {
    std::lock_guard lock(mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->second->connection() == connection) {
        gone.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Released here (no lock held), or by the last request still using one.
}

int64_t RegionRegistry::bytes_in_use() const {
  std::lock_guard lock(*in_use_mu_);
  return *in_use_;
}

int RegionRegistry::count() const {
  std::lock_guard lock(mu_);
  return int(regions_.size());
}

}  // namespace sgemm
