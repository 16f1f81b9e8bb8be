// Locking rules the compiler checks: clang's thread-safety analysis
// (-Wthread-safety; clang.llvm.org/docs/ThreadSafetyAnalysis.html). A member
// says which mutex guards it, a function which mutexes it needs held or must
// not hold, and clang proves every access and call at compile time, in the
// clang-tidy pass of CI (scripts/tidy.sh). Under GCC, which has no such
// analysis, the macros expand to nothing.
//
//   class Queue {
//    public:
//     void push(int v) SGEMM_EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       items_.push_back(v);
//       cv_.notify_one();
//     }
//     int pop() SGEMM_EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       lock.wait(cv_, [&] { mu_.assert_held(); return !items_.empty(); });
//       return take_locked();
//     }
//    private:
//     int take_locked() SGEMM_REQUIRES(mu_);
//     Mutex mu_;
//     std::condition_variable cv_;
//     std::deque<int> items_ SGEMM_GUARDED_BY(mu_);
//   };
//
// libstdc++'s std::mutex carries no annotation, so the analysis cannot see it
// being locked: guarded state uses Mutex and MutexLock below. A mutex that
// guards no data (it only orders work) may stay a std::mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#if defined(__clang__)
#define SGEMM_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define SGEMM_THREAD_ANNOTATION_(x)
#endif

// A type that is a lock (Mutex); `name` appears in the analysis' messages.
#define SGEMM_CAPABILITY(name) SGEMM_THREAD_ANNOTATION_(capability(name))
// An RAII type that holds a lock for its lifetime (MutexLock).
#define SGEMM_SCOPED_CAPABILITY SGEMM_THREAD_ANNOTATION_(scoped_lockable)
// Data read or written only with `mu` held.
#define SGEMM_GUARDED_BY(mu) SGEMM_THREAD_ANNOTATION_(guarded_by(mu))
// Data a pointer member points to, read or written only with `mu` held.
#define SGEMM_PT_GUARDED_BY(mu) SGEMM_THREAD_ANNOTATION_(pt_guarded_by(mu))
// Lock order: this mutex is taken before / after the ones named.
#define SGEMM_ACQUIRED_BEFORE(...) SGEMM_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define SGEMM_ACQUIRED_AFTER(...) SGEMM_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
// The caller must hold these mutexes (the `_locked` functions).
#define SGEMM_REQUIRES(...) SGEMM_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
// The caller must not hold these mutexes (the function takes them itself).
#define SGEMM_EXCLUDES(...) SGEMM_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
// The function takes / releases these mutexes (none named: the object itself).
#define SGEMM_ACQUIRE(...) SGEMM_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define SGEMM_RELEASE(...) SGEMM_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define SGEMM_TRY_ACQUIRE(...) SGEMM_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// From here on the analysis takes the mutex as held (the caller has it in a
// way the analysis cannot follow, e.g. inside a condition variable's predicate).
#define SGEMM_ASSERT_CAPABILITY(mu) SGEMM_THREAD_ANNOTATION_(assert_capability(mu))
// The function returns a reference to this mutex (an accessor).
#define SGEMM_RETURN_CAPABILITY(mu) SGEMM_THREAD_ANNOTATION_(lock_returned(mu))
// Leaves a function out of the analysis; give the reason beside it.
#define SGEMM_NO_THREAD_SAFETY_ANALYSIS SGEMM_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace sgemm {

// std::mutex with the annotation the analysis needs. Lock it with MutexLock;
// lock() and unlock() are there for std::lock_guard and friends, whose
// locking the analysis does not see.
class SGEMM_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() SGEMM_ACQUIRE() { mu_.lock(); }
  void unlock() SGEMM_RELEASE() { mu_.unlock(); }
  bool try_lock() SGEMM_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis this mutex is held here; checks nothing at run time.
  void assert_held() const SGEMM_ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction, like std::unique_lock, and
// waits on condition variables with it. unlock() and lock() release and take
// it again inside the scope (work that must not run under the lock); the
// destructor releases it only if held.
class SGEMM_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) SGEMM_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() SGEMM_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() SGEMM_RELEASE() { lock_.unlock(); }
  void lock() SGEMM_ACQUIRE() { lock_.lock(); }

  // The condition-variable waits of std::unique_lock. The mutex is released
  // while waiting and held again on return, which the analysis treats as held
  // throughout. A predicate reading guarded data starts with the mutex's
  // assert_held(): the analysis does not know the predicate runs locked.
  void wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <class Predicate>
  void wait(std::condition_variable& cv, Predicate done) {
    cv.wait(lock_, std::move(done));
  }
  template <class Clock, class Duration>
  std::cv_status wait_until(std::condition_variable& cv, const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv.wait_until(lock_, deadline);
  }
  template <class Clock, class Duration, class Predicate>
  bool wait_until(std::condition_variable& cv, const std::chrono::time_point<Clock, Duration>& deadline,
                  Predicate done) {
    return cv.wait_until(lock_, deadline, std::move(done));
  }
  template <class Rep, class Period, class Predicate>
  bool wait_for(std::condition_variable& cv, const std::chrono::duration<Rep, Period>& timeout, Predicate done) {
    return cv.wait_for(lock_, timeout, std::move(done));
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace sgemm
