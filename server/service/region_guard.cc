#include "server/service/region_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace sgemm {

namespace {

// Twice RegionRegistryOptions::max_regions: every registration has a slot.
constexpr int kSlots = 8192;

// A guarded range. `end` is written before `begin` (release) and `begin`
// cleared first, so a handler that sees a non-zero `begin` sees its `end`.
struct Slot {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<bool> lost{false};
};

Slot g_slots[kSlots];
std::atomic<int> g_used{0};  // slots [0, g_used) may be guarded: the handler scans no further
struct sigaction g_previous {};

std::mutex& table_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<int>& free_slots() {  // guarded by table_mu()
  static std::vector<int> slots;
  return slots;
}

void pass_on(int sig, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: a fault re-runs its instruction and meets it; a
  // signal sent by kill() is raised again, delivered once this handler returns.
  signal(sig, SIG_DFL);
  if (info && info->si_code <= 0) raise(sig);
}

// Async-signal-safe: atomics and mmap only.
void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<std::uintptr_t>(info ? info->si_addr : nullptr);
  const int used = g_used.load(std::memory_order_acquire);
  for (int i = 0; addr && i < used; ++i) {
    const std::uintptr_t b = g_slots[i].begin.load(std::memory_order_acquire);
    if (b == 0 || addr < b) continue;
    const std::uintptr_t e = g_slots[i].end.load(std::memory_order_acquire);
    if (addr >= e) continue;
    // Zero pages over the whole range: the access that faulted, and every
    // later one, reads zeros and writes into memory nobody else sees.
    void* p = mmap(reinterpret_cast<void*>(b), e - b, PROT_READ | PROT_WRITE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) break;  // cannot repair: the fault stands
    g_slots[i].lost.store(true, std::memory_order_release);
    return;
  }
  pass_on(sig, info, context);
}

void install_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &g_previous);
}

}  // namespace

int guard_caller_memory(void* base, std::size_t bytes) {
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  std::lock_guard lock(table_mu());
  int slot;
  if (!free_slots().empty()) {
    slot = free_slots().back();
    free_slots().pop_back();
  } else {
    slot = g_used.load(std::memory_order_relaxed);
    if (slot >= kSlots) return -1;
  }
  Slot& s = g_slots[slot];
  const auto b = reinterpret_cast<std::uintptr_t>(base);
  s.lost.store(false, std::memory_order_relaxed);
  s.end.store(b + bytes, std::memory_order_release);
  s.begin.store(b, std::memory_order_release);
  if (slot >= g_used.load(std::memory_order_relaxed)) g_used.store(slot + 1, std::memory_order_release);
  return slot;
}

void unguard_caller_memory(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  std::lock_guard lock(table_mu());
  g_slots[slot].begin.store(0, std::memory_order_release);
  g_slots[slot].end.store(0, std::memory_order_release);
  free_slots().push_back(slot);
}

bool caller_memory_lost(int slot) {
  return slot >= 0 && slot < kSlots && g_slots[slot].lost.load(std::memory_order_acquire);
}

int caller_memory_slots() { return kSlots; }

}  // namespace sgemm
