// gRPC's hand-off of a callback reactor to its OnDone, shown to
// ThreadSanitizer.
//
// gRPC's callback handlers (grpcpp/impl/codegen/server_callback_handlers.h,
// compiled into our code and so instrumented) call a reactor through its
// vtable on one of gRPC's threads (a reaction, or InternalInlineable()) and
// then, once the call's last operation is done, hand OnDone to an executor
// thread through gRPC's core, which is not instrumented. OnDone deletes the
// reactor, and the destructor writes the vtable pointer that call read: to
// TSan the two are unordered ("data race on vptr (ctor/dtor vs virtual
// call)"). scripts/tsan.supp hides such reports by the reading thread's gRPC
// frame (race_top:grpc::internal::), which matches only while that thread's
// stack can still be restored; a busy server loses it and then halts.
//
// Rule: a reactor deleted in OnDone (or later, through a reference count its
// OnDone drops) orders every virtual call gRPC makes on it before OnDone
// itself. A reaction whose body takes a lock that OnDone also takes is
// ordered by that lock. One that synchronises with nothing (an empty
// reaction, InternalInlineable()) calls reactor_handoff_release(this) as its
// last step, and OnDone calls reactor_handoff_acquire(this) first. These are
// annotations only: no memory is touched, and outside TSan they compile to
// nothing.
#pragma once

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace sgemm {

// The end of a virtual call gRPC made on `reactor` (before it hands OnDone on).
inline void reactor_handoff_release(void* reactor) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(reactor);
#else
  (void)reactor;
#endif
}

// The start of `reactor`'s OnDone: after every call released above.
inline void reactor_handoff_acquire(void* reactor) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(reactor);
#else
  (void)reactor;
#endif
}

}  // namespace sgemm
