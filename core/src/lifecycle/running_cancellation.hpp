// The Cancellation of the acquisition the calling thread runs, if its caller gave one (serve's
// request whose client may hang up, acquire_async's). A thread-local, as t_acquire_path is,
// because its one reader, the capacity wait (provider_capacity.cpp), is six calls and a test
// seam below where an acquisition starts: a parameter threaded through all of them would change
// every creation path for that one reader.
#pragma once

#include "sandboxd/core/cancellation.hpp"

namespace sandboxd::core {

Cancellation* running_cancellation();

// Makes `cancellation` (may be null) the running one for its scope.
class RunningCancellation {
 public:
  explicit RunningCancellation(Cancellation* cancellation);
  ~RunningCancellation();
  RunningCancellation(const RunningCancellation&) = delete;
  RunningCancellation& operator=(const RunningCancellation&) = delete;

 private:
  Cancellation* previous_;
};

}  // namespace sandboxd::core
