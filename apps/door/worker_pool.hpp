// Blocking request handlers (a provider acquire, a backend create) run here, never on the I/O
// thread, so a slow create holds one worker and nothing else. Bounded twice: at most
// `max_threads` handlers run at once and at most `max_queued` wait; past either, submit()
// answers false and the caller answers 503 at once. Threads are started on demand, so a
// process or pids limit met while starting one is a refused submit (503), not a crash.
//
// Lock story: `state_->mutex` guards every field of State. Jobs run outside it. The state is
// shared with the threads, so a thread still running a job when the pool is destroyed (a
// handler stuck in a backend) finishes on its own; the pool's owner decides whether to wait
// for it (wait_idle) or to leave the process with it running.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace sandboxd::door {

class WorkerPool {
 public:
  using Job = std::function<void()>;

  WorkerPool(std::size_t max_threads, std::size_t max_queued);
  // Stops the idle threads and joins them; threads still running a job are detached and end
  // after it.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `job`; false when the queue is full, or when no thread could be started and none
  // is running (the reason in `refusal` when given). Never throws for lack of threads.
  bool submit(Job job, std::string* refusal = nullptr);

  // Waits until no job runs or waits, or until `deadline`; true when idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);

  struct Counts {
    std::size_t threads = 0;
    std::size_t running = 0;
    std::size_t queued = 0;
  };
  Counts counts() const;

  struct State;  // defined in worker_pool.cpp, shared with the threads

 private:
  std::shared_ptr<State> state_;
};

}  // namespace sandboxd::door
