// Backend calls with a deadline. A plugin call can block (an engine that stops answering); the
// HTTP request waiting on it must not. Each call runs on its own thread; the request waits at
// most the deadline and then answers 504, while the call goes on to its end in the background
// (a create that finishes late leaves a sandbox that the gateway's retry of the same idempotent
// request finds). drain() waits for every call still running, so nothing outlives the backend.
//
// Lock story: `mutex_` guards `running_`; a call's result travels through its own promise.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>

namespace sandboxd::provisioner {

class BackendTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class BoundedCalls {
 public:
  BoundedCalls() = default;
  BoundedCalls(const BoundedCalls&) = delete;
  BoundedCalls& operator=(const BoundedCalls&) = delete;
  ~BoundedCalls() { drain(); }

  // Runs `call()` and returns its result, or rethrows what it threw; throws BackendTimeout
  // naming `what` when it has not finished within `seconds`.
  template <class Call>
  std::invoke_result_t<Call> run(Call call, double seconds, const std::string& what) {
    using Result = std::invoke_result_t<Call>;
    auto promise = std::make_shared<std::promise<Result>>();
    std::future<Result> future = promise->get_future();
    {
      std::lock_guard lock(mutex_);
      ++running_;
    }
    std::thread([this, promise, call = std::move(call)]() mutable {
      try {
        if constexpr (std::is_void_v<Result>) {
          call();
          promise->set_value();
        } else {
          promise->set_value(call());
        }
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
      std::lock_guard lock(mutex_);
      if (--running_ == 0) idle_.notify_all();
    }).detach();
    if (future.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
      throw BackendTimeout(what + " did not finish within " + std::to_string(int(seconds)) +
                           " s; it goes on in the background");
    }
    return future.get();
  }

  // Blocks until no call is running.
  void drain() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return running_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable idle_;
  int running_ = 0;
};

}  // namespace sandboxd::provisioner
