#include "async_acquisitions.hpp"

namespace sandboxd::core {

std::string AsyncAcquisition::get() {
  std::unique_lock lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
  return state_->result;
}

bool AsyncAcquisition::wait_for(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(state_->mutex);
  return state_->done_cv.wait_for(lock, timeout, [&] { return state_->done; });
}

void AsyncAcquisition::cancel() {
  {
    std::lock_guard lock(state_->mutex);
    state_->cancelled = true;
  }
  state_->finish("", std::make_exception_ptr(AsyncAcquisitionCancelled("acquire_async cancelled")));
}

std::exception_ptr shut_down_error() {
  return std::make_exception_ptr(
      std::runtime_error("the provider is shut down; acquire_async refused"));
}

}  // namespace sandboxd::core
