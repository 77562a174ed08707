#include "worker_pool.hpp"

#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace sandboxd::door {

struct WorkerPool::State {
  std::mutex mutex;
  std::condition_variable work;  // a job was queued, or stopping
  std::condition_variable idle;  // a job finished
  std::deque<Job> queue;
  std::size_t max_threads = 0;
  std::size_t max_queued = 0;
  std::size_t threads = 0;  // started and not yet ended
  std::size_t waiting = 0;  // threads waiting for a job
  std::size_t running = 0;  // jobs being run
  bool stopping = false;
  std::vector<std::thread> started;  // joined or detached by the destructor
};

namespace {

void work_loop(const std::shared_ptr<WorkerPool::State>& state);

}  // namespace

WorkerPool::WorkerPool(std::size_t max_threads, std::size_t max_queued)
    : state_(std::make_shared<State>()) {
  state_->max_threads = max_threads == 0 ? 1 : max_threads;
  state_->max_queued = max_queued;
}

WorkerPool::~WorkerPool() {
  std::vector<std::thread> threads;
  bool busy = false;
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    state_->queue.clear();  // never run after the pool's owner is gone
    threads.swap(state_->started);
    busy = state_->running > 0;
  }
  state_->work.notify_all();
  // Idle threads end at once and are joined. A thread that is running a job cannot be waited
  // for (it may be stuck in a backend): then every thread is detached, holds the shared state
  // and ends after its job.
  for (std::thread& thread : threads) {
    // The last owner may be a job on one of these threads (it held the server): never join
    // oneself.
    if (busy || thread.get_id() == std::this_thread::get_id()) {
      thread.detach();
    } else {
      thread.join();
    }
  }
}

bool WorkerPool::submit(Job job, std::string* refusal) {
  std::unique_lock lock(state_->mutex);
  if (state_->stopping) {
    if (refusal) *refusal = "the server is stopping";
    return false;
  }
  if (state_->queue.size() >= state_->max_queued + state_->waiting) {
    if (refusal) {
      *refusal = std::to_string(state_->running) + " requests are being served and " +
                 std::to_string(state_->queue.size()) + " wait; try again shortly";
    }
    return false;
  }
  state_->queue.push_back(std::move(job));
  if (state_->waiting <= state_->queue.size() - 1 && state_->threads < state_->max_threads) {
    try {
      state_->started.emplace_back([state = state_] { work_loop(state); });
      ++state_->threads;
    } catch (const std::system_error& error) {
      // No thread to be had (a process or pids limit). With a thread running, the job waits
      // for it; with none, nobody would ever run it.
      if (state_->threads == 0) {
        state_->queue.pop_back();
        if (refusal) *refusal = std::string("no worker thread could be started: ") + error.what();
        return false;
      }
    }
  }
  lock.unlock();
  state_->work.notify_one();
  return true;
}

bool WorkerPool::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(state_->mutex);
  return state_->idle.wait_until(lock, deadline,
                                 [&] { return state_->running == 0 && state_->queue.empty(); });
}

WorkerPool::Counts WorkerPool::counts() const {
  std::lock_guard lock(state_->mutex);
  return {state_->threads, state_->running, state_->queue.size()};
}

namespace {

void work_loop(const std::shared_ptr<WorkerPool::State>& state) {
  std::unique_lock lock(state->mutex);
  while (true) {
    ++state->waiting;
    state->work.wait(lock, [&] { return state->stopping || !state->queue.empty(); });
    --state->waiting;
    if (state->stopping) break;
    WorkerPool::Job job = std::move(state->queue.front());
    state->queue.pop_front();
    ++state->running;
    lock.unlock();
    try {
      job();
    } catch (...) {
      // A job reports its own failures; nothing may escape a worker thread.
    }
    job = nullptr;  // what it captured goes before the pool hears it is done
    lock.lock();
    --state->running;
    state->idle.notify_all();
  }
  --state->threads;
}

}  // namespace

}  // namespace sandboxd::door
