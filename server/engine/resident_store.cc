#include "server/engine/resident_store.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sgemm {

ResidentBytes& ResidentBytes::operator=(ResidentBytes&& o) noexcept {
  if (this != &o) {
    reset();
    store_ = o.store_;
    location_ = o.location_;
    bytes_ = o.bytes_;
    o.store_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void ResidentBytes::reset() {
  if (store_ && bytes_ > 0) store_->release(location_, bytes_);
  store_ = nullptr;
  bytes_ = 0;
}

ResidentStore::Lease& ResidentStore::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    reset();
    store_ = o.store_;
    m_ = std::move(o.m_);
    o.store_ = nullptr;
  }
  return *this;
}

void ResidentStore::Lease::reset() {
  if (store_ && m_) store_->unpin(m_.get());
  store_ = nullptr;
  m_.reset();  // the last holder of a deleted matrix frees its memory here
}

ResidentStore::ResidentStore(ResidentStoreOptions options) : options_(std::move(options)) {
  for (int loc : options_.locations) used_[loc] = 0;
}

ResidentStore::~ResidentStore() { clear(); }

void ResidentStore::clear() {
  // Entries' data release bytes into this store: drop them while it is whole.
  std::unordered_map<std::string, Entry> entries;
  {
    MutexLock lock(mu_);
    entries.swap(entries_);
  }
}

std::string ResidentStore::new_handle() {
  unsigned char bytes[16];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += std::size_t(n);
    // EINTR: try again. getrandom blocks only before the kernel's pool is
    // initialised, which is long over when a server serves.
  }
  static const char* hex = "0123456789abcdef";
  std::string out(32, '0');
  for (std::size_t i = 0; i < 16; ++i) {
    out[2 * i] = hex[bytes[i] >> 4];
    out[2 * i + 1] = hex[bytes[i] & 15];
  }
  return out;
}

void ResidentStore::release(int location, int64_t bytes) {
  MutexLock lock(bytes_mu_);
  used_[location] -= bytes;
}

int64_t ResidentStore::in_use(int location) const {
  MutexLock lock(bytes_mu_);
  const auto it = used_.find(location);
  return it == used_.end() ? 0 : it->second;
}

int64_t ResidentStore::in_use_total() const {
  MutexLock lock(bytes_mu_);
  int64_t t = 0;
  for (const auto& [loc, b] : used_) t += b;
  return t;
}

int64_t ResidentStore::owner_bytes(std::string_view owner) const {
  MutexLock lock(mu_);
  int64_t total = 0;
  for (const auto& [handle, e] : entries_)
    if (e.m->owner == owner) total += e.m->bytes();
  return total;
}

int ResidentStore::count() const {
  MutexLock lock(mu_);
  return int(entries_.size());
}

int ResidentStore::roomiest_location() const {
  MutexLock lock(bytes_mu_);
  int best = options_.locations.empty() ? -1 : options_.locations.front();
  int64_t least = INT64_MAX;
  for (int loc : options_.locations) {
    const auto it = used_.find(loc);
    const int64_t u = it == used_.end() ? 0 : it->second;
    if (u < least) {
      least = u;
      best = loc;
    }
  }
  return best;
}

StatusOr<ResidentBytes> ResidentStore::reserve(int location, int64_t bytes, std::string_view what) {
  const auto where = [&] { return location < 0 ? std::string("host memory") : "GPU " + std::to_string(location); };
  if (bytes > options_.bytes_per_location)
    return ResourceExhausted(std::string(what) + " needs " + std::to_string(bytes) + " bytes on " + where() +
                             ", more than the whole resident budget of " + std::to_string(options_.bytes_per_location) +
                             " bytes (--resident-bytes)");
  int evicted = 0;
  for (;;) {
    {
      MutexLock lock(bytes_mu_);
      int64_t& used = used_[location];
      if (used + bytes <= options_.bytes_per_location) {
        used += bytes;
        return ResidentBytes(this, location, bytes);
      }
    }
    // Not enough room: drop the least recently used evictable matrix that
    // holds bytes here and that no request uses.
    std::shared_ptr<ResidentMatrix> victim;
    {
      MutexLock lock(mu_);
      auto best = entries_.end();
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        const Entry& e = it->second;
        if (!e.m->evictable || e.pins > 0) continue;
        const auto data = e.m->data();
        if (!data) continue;
        const Layout layout = data->layout();
        if (std::none_of(layout.begin(), layout.end(), [&](const Piece& p) { return p.device == location; })) continue;
        if (best == entries_.end() || e.last_tick < best->second.last_tick) best = it;
      }
      if (best == entries_.end()) {
        int64_t used;
        {
          MutexLock bl(bytes_mu_);
          used = used_[location];
        }
        return ResourceExhausted(std::string(what) + " needs " + std::to_string(bytes) + " bytes on " + where() +
                                 "; the resident budget there is " + std::to_string(options_.bytes_per_location) +
                                 " bytes (--resident-bytes), " + std::to_string(used) + " in use" +
                                 (evicted ? " after evicting " + std::to_string(evicted) + " matrices" : "") +
                                 ", and nothing else there is evictable and unused: delete matrices "
                                 "(DeleteMatrix) or put them as evictable");
      }
      victim = std::move(best->second.m);
      evicted_.insert(best->first);
      evicted_order_.push_back(best->first);
      if (evicted_order_.size() > 4096) {
        evicted_.erase(evicted_order_.front());
        evicted_order_.pop_front();
      }
      entries_.erase(best);
    }
    ++evicted;
    victim.reset();  // its data goes here, releasing its bytes (no lock held)
  }
}

std::shared_ptr<const ResidentMatrix> ResidentStore::add(std::string owner, std::string label, int64_t rows,
                                                         int64_t cols, bool evictable,
                                                         std::shared_ptr<ResidentData> data) {
  auto m = std::make_shared<ResidentMatrix>();
  m->owner = std::move(owner);
  m->label = std::move(label);
  m->rows = rows;
  m->cols = cols;
  m->evictable = evictable;
  m->set_data(std::move(data));
  MutexLock lock(mu_);
  do {
    m->handle = new_handle();
  } while (entries_.count(m->handle) || evicted_.count(m->handle));  // 2^-128: never, but cheap to be sure
  Entry& e = entries_[m->handle];
  e.m = m;
  e.last_tick = ++tick_;
  e.last_use = std::chrono::steady_clock::now();
  return m;
}

std::string ResidentStore::not_found(std::string_view handle) const {
  const std::string h(handle);
  if (evicted_.count(h))
    return "resident matrix '" + h +
           "' was evicted (it was evictable and the resident budget, --resident-bytes, needed the room): put it again";
  return "no resident matrix '" + h + "' (never put, deleted, or lost when the server restarted: put it again)";
}

StatusOr<ResidentStore::Lease> ResidentStore::acquire(std::string_view handle, std::string_view caller) {
  MutexLock lock(mu_);
  const auto it = entries_.find(std::string(handle));
  if (it == entries_.end()) return NotFound(not_found(handle));
  Entry& e = it->second;
  if (e.m->owner != caller)
    return PermissionDenied("resident matrix '" + std::string(handle) + "' belongs to client '" + e.m->owner +
                            "'; this call is client '" + std::string(caller) + "' (--auth-tokens)");
  ++e.pins;
  ++e.uses;
  e.last_tick = ++tick_;
  e.last_use = std::chrono::steady_clock::now();
  return Lease(this, e.m);
}

void ResidentStore::unpin(const ResidentMatrix* m) {
  MutexLock lock(mu_);
  const auto it = entries_.find(m->handle);
  if (it != entries_.end() && it->second.m.get() == m) {
    --it->second.pins;
    it->second.last_use = std::chrono::steady_clock::now();
  }
}

StatusOr<int> ResidentStore::remove(std::string_view handle, std::string_view caller) {
  std::shared_ptr<ResidentMatrix> gone;
  int pins;
  {
    MutexLock lock(mu_);
    const auto it = entries_.find(std::string(handle));
    if (it == entries_.end()) return NotFound(not_found(handle));
    if (it->second.m->owner != caller)
      return PermissionDenied("resident matrix '" + std::string(handle) + "' belongs to client '" +
                              it->second.m->owner + "'; this call is client '" + std::string(caller) +
                              "' (--auth-tokens)");
    gone = std::move(it->second.m);
    pins = it->second.pins;
    entries_.erase(it);
  }
  gone.reset();  // freed now unless a request holds it (then when its lease ends)
  return pins;
}

std::vector<ResidentRow> ResidentStore::list(std::string_view caller) const {
  std::vector<std::pair<uint64_t, ResidentRow>> rows;
  const auto now = std::chrono::steady_clock::now();
  {
    MutexLock lock(mu_);
    for (const auto& [handle, e] : entries_) {
      if (e.m->owner != caller) continue;
      ResidentRow r;
      r.handle = handle;
      r.owner = e.m->owner;
      r.label = e.m->label;
      r.rows = e.m->rows;
      r.cols = e.m->cols;
      r.bytes = e.m->bytes();
      r.evictable = e.m->evictable;
      if (const auto d = e.m->data()) r.layout = d->layout();
      r.in_use = e.pins;
      r.uses = e.uses;
      r.idle_s = std::chrono::duration<double>(now - e.last_use).count();
      rows.emplace_back(e.last_tick, std::move(r));
    }
  }
  // Most recently used first.
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<ResidentRow> out;
  out.reserve(rows.size());
  for (auto& [t, r] : rows) out.push_back(std::move(r));
  return out;
}

}  // namespace sgemm
