// Caller memory that cannot kill the server: a process-wide SIGBUS guard over
// every mapped shared-memory region (docs/security.md).
//
// A region's pages belong to its caller, who can shrink the object
// (ftruncate) at any moment; the next access to a page past the new end, by
// any thread (a copy in the service, an OpenBLAS worker, the CUDA driver's
// staging copy), raises SIGBUS, whose default action ends the process. A
// Unix socket caller could otherwise kill the server with one ftruncate.
//
// The guard keeps a fixed table of guarded address ranges. Its SIGBUS handler
// looks the faulting address up (lock-free); when a guarded range holds it,
// the handler maps private zero pages over the whole range (MAP_FIXED), marks
// the range lost and returns, so the faulting instruction runs again on zeros
// and the thread carries on. Whoever used the region then asks lost() and
// fails its request: no result computed from a lost region is ever reported
// as OK. A fault outside every guarded range goes to the handler that was
// installed before (or the default action), as if the guard were not there.
//
// Sealing (memfd with F_SEAL_SHRINK) would prevent the truncation instead,
// but regions are named by shm_open name, whose objects cannot be sealed;
// page-locking does not help either (a truncation unmaps locked pages too).
//
// Rules for users: a range is guarded right after it is mapped, before the
// first access, and unguarded just before it is unmapped, once no thread can
// touch it any more (the region's last reference went): a slot never names
// a range that another mapping may have taken.
//
// Threads: guard()/unguard() are thread-safe (one mutex); lost() and the
// handler read the table with atomics only.
#pragma once

#include <cstddef>

namespace sgemm {

// Guards [base, base + bytes), a MAP_SHARED mapping of caller memory. Returns
// the range's slot, or -1 when every slot is taken (the caller must then not
// map the memory). Installs the SIGBUS handler on first use.
int guard_caller_memory(void* base, std::size_t bytes);

// The range of `slot` is about to be unmapped and nothing touches it: the slot may be reused.
void unguard_caller_memory(int slot);

// Whether a SIGBUS hit the range of `slot` (its pages are zeros since).
bool caller_memory_lost(int slot);

// How many slots the table has.
int caller_memory_slots();

}  // namespace sgemm
