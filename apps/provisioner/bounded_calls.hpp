// Backend calls with a deadline. A plugin call can block (an engine that stops answering); the
// HTTP request waiting on it must not. Each call runs on its own thread; the request waits at
// most the deadline and then answers 504, while the call goes on to its end in the background
// (a create that finishes late leaves a sandbox that the gateway's retry of the same idempotent
// request finds). At most `max_running` calls run at once (calls stuck in a hung backend would
// otherwise pile up a thread each): past that, and when no thread can be started, run() throws
// NoCallSlot, which the service answers 503. drain() waits for every call still running, so
// nothing outlives the backend; drain_until() gives up at a deadline.
//
// Lock story: `mutex_` guards `running_`; a call's outcome travels through its own Outcome,
// guarded by that Outcome's mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>

namespace sandboxd::provisioner {

class BackendTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// No thread for a backend call: too many still run, or none could be started.
class NoCallSlot : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class BoundedCalls {
 public:
  explicit BoundedCalls(int max_running = 256) : max_running_(max_running) {}
  BoundedCalls(const BoundedCalls&) = delete;
  BoundedCalls& operator=(const BoundedCalls&) = delete;
  ~BoundedCalls() { drain(); }

  // Runs `call()` and returns its result, or rethrows what it threw; throws BackendTimeout
  // naming `what` when it has not finished within `seconds`.
  //
  // The outcome travels through a mutex-guarded slot rather than a std::promise: the waiting
  // thread moves the exception out of the slot before rethrowing it, so it holds the last
  // reference and frees it itself. With a promise the worker could drop the last reference
  // while the request thread still reads what(), ordered only by libstdc++'s internal
  // refcount, which ThreadSanitizer cannot see.
  template <class Call>
  std::invoke_result_t<Call> run(Call call, double seconds, const std::string& what) {
    using Result = std::invoke_result_t<Call>;
    auto outcome = std::make_shared<Outcome<Result>>();
    std::unique_lock slot(mutex_);
    if (running_ >= max_running_) {
      throw NoCallSlot(std::to_string(running_) +
                       " backend calls are still running (the backend is slow or stuck); try "
                       "again shortly");
    }
    // Counted only once its thread exists (under the lock, so drain() never sees a call that
    // will not run): a start that fails must not leave drain() waiting forever.
    std::thread worker;
    try {
      worker = std::thread([this, outcome, call = std::move(call)]() mutable {
        Value<Result> value;
        std::exception_ptr error;
        try {
          if constexpr (std::is_void_v<Result>) {
            call();
            value.emplace();
          } else {
            value.emplace(call());
          }
        } catch (...) {
          error = std::current_exception();
        }
        {
          std::lock_guard lock(outcome->mutex);
          outcome->value = std::move(value);
          outcome->error = std::move(error);
          outcome->done = true;
        }
        outcome->finished.notify_all();
        std::lock_guard lock(mutex_);
        if (--running_ == 0) idle_.notify_all();
      });
    } catch (const std::system_error& error) {
      throw NoCallSlot(std::string("no thread for the backend call could be started: ") +
                       error.what());
    }
    ++running_;
    slot.unlock();
    worker.detach();

    Value<Result> value;
    std::exception_ptr error;
    {
      std::unique_lock lock(outcome->mutex);
      if (!outcome->finished.wait_for(lock, std::chrono::duration<double>(seconds),
                                      [&] { return outcome->done; })) {
        throw BackendTimeout(what + " did not finish within " + std::to_string(int(seconds)) +
                             " s; it goes on in the background");
      }
      value = std::move(outcome->value);
      error = std::move(outcome->error);
      outcome->error = nullptr;
    }
    if (error) std::rethrow_exception(std::move(error));
    if constexpr (!std::is_void_v<Result>) return std::move(*value);
  }

  // Blocks until no call is running.
  void drain() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return running_ == 0; });
  }
  // Waits until no call is running or `deadline`; the calls still running.
  int drain_until(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    idle_.wait_until(lock, deadline, [this] { return running_ == 0; });
    return running_;
  }

 private:
  // What a call produced: its value (an empty marker for void), or nothing when it threw.
  template <class Result>
  using Value = std::optional<std::conditional_t<std::is_void_v<Result>, bool, Result>>;

  // One call's outcome; `mutex` guards every field; shared by the waiting thread and the worker.
  template <class Result>
  struct Outcome {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    Value<Result> value;
    std::exception_ptr error;
  };

  const int max_running_;
  std::mutex mutex_;
  std::condition_variable idle_;
  int running_ = 0;
};

}  // namespace sandboxd::provisioner
