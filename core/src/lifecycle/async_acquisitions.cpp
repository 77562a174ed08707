#include "async_acquisitions.hpp"

namespace sandboxd::core {

std::string AsyncAcquisition::get() {
  State& state = *state_;
  MutexLock lock(state.mutex);
  lock.wait(state.done_cv, [&]() REQUIRES(state.mutex) { return state.done; });
  if (state.error) std::rethrow_exception(state.error);
  return state.result;
}

bool AsyncAcquisition::wait_for(std::chrono::milliseconds timeout) const {
  State& state = *state_;
  MutexLock lock(state.mutex);
  return lock.wait_for(state.done_cv, timeout, [&]() REQUIRES(state.mutex) { return state.done; });
}

void AsyncAcquisition::cancel() {
  state_->cancellation.cancel();
  state_->finish("", std::make_exception_ptr(AsyncAcquisitionCancelled("acquire_async cancelled")));
}

std::exception_ptr shut_down_error() {
  return std::make_exception_ptr(
      std::runtime_error("the provider is shut down; acquire_async refused"));
}

}  // namespace sandboxd::core
