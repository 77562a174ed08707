// Where the provider runs blocking work for async callers.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd::core {

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs `task` later on some thread other than the caller's. Never blocks on the task.
  virtual void submit(std::function<void()> task) = 0;
};

// A fixed pool of worker threads draining one queue. The destructor finishes queued tasks and
// joins the workers.
class ThreadPoolExecutor final : public Executor {
 public:
  explicit ThreadPoolExecutor(std::size_t workers);
  ~ThreadPoolExecutor() override;
  ThreadPoolExecutor(const ThreadPoolExecutor&) = delete;
  ThreadPoolExecutor& operator=(const ThreadPoolExecutor&) = delete;

  void submit(std::function<void()> task) override;

 private:
  void run();

  std::mutex mutex_;  // guards queue_ and stopping_
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // written only by the constructor and destructor
};

}  // namespace sandboxd::core
