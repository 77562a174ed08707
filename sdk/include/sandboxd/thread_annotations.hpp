// Lock rules as facts the compiler checks (clang's -Wthread-safety; abseil's
// thread_annotations.h is the model). On other compilers the macros expand to nothing.
//
// libstdc++'s std::mutex and std::lock_guard carry no annotations, so guarded state is locked
// through Mutex and MutexLock below, which do. Part of the SDK (header-only: no ABI of its
// own), so the core, its public classes with a lock (EgressHost, BackendRelayTargets) and every
// plugin state their lock stories in annotations; a macro an including program already
// defines (abseil's older names) is left as it is.
#pragma once

#include <condition_variable>
#include <mutex>
#include <utility>

#if defined(__clang__)
#define SANDBOXD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SANDBOXD_THREAD_ANNOTATION(x)
#endif

#ifndef CAPABILITY
#define CAPABILITY(x) SANDBOXD_THREAD_ANNOTATION(capability(x))
#endif
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY SANDBOXD_THREAD_ANNOTATION(scoped_lockable)
#endif
#ifndef GUARDED_BY
#define GUARDED_BY(x) SANDBOXD_THREAD_ANNOTATION(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) SANDBOXD_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
#ifndef REQUIRES
#define REQUIRES(...) SANDBOXD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
#ifndef EXCLUDES
#define EXCLUDES(...) SANDBOXD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) SANDBOXD_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#endif
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) SANDBOXD_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#endif
#ifndef ACQUIRE
#define ACQUIRE(...) SANDBOXD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) SANDBOXD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif
#ifndef TRY_ACQUIRE
#define TRY_ACQUIRE(...) SANDBOXD_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#endif
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) SANDBOXD_THREAD_ANNOTATION(lock_returned(x))
#endif
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS SANDBOXD_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif

namespace sandboxd {

// A std::mutex the analysis knows about.
class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mutex_.lock(); }
  void unlock() RELEASE() { mutex_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mutex_.try_lock(); }
  std::mutex& native() { return mutex_; }

 private:
  std::mutex mutex_;
};

// Holds a Mutex for a scope; wait() hands it to a condition variable like a unique_lock.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) ACQUIRE(mutex) : lock_(mutex.native()) {}
  ~MutexLock() RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  template <class Predicate>
  void wait(std::condition_variable& cv, Predicate ready) {
    cv.wait(lock_, std::move(ready));
  }
  template <class Duration, class Predicate>
  bool wait_for(std::condition_variable& cv, const Duration& timeout, Predicate ready) {
    return cv.wait_for(lock_, timeout, std::move(ready));
  }
  template <class Duration>
  void wait_for(std::condition_variable& cv, const Duration& timeout) {
    cv.wait_for(lock_, timeout);
  }
  void wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <class TimePoint>
  void wait_until(std::condition_variable& cv, const TimePoint& deadline) {
    cv.wait_until(lock_, deadline);
  }
  template <class TimePoint, class Predicate>
  bool wait_until(std::condition_variable& cv, const TimePoint& deadline, Predicate ready) {
    return cv.wait_until(lock_, deadline, std::move(ready));
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace sandboxd
