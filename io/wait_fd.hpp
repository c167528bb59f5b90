// wait_fd: readiness of a file descriptor through a one-shot IORING_OP_POLL_ADD.
#pragma once

#include <chrono>
#include <optional>

#include "io/cancel.hpp"
#include "io/task.hpp"

namespace pgtide::io {

/// Waits until fd reports one of the poll(2) events in poll_mask (POLLIN, POLLOUT, ...) and
/// returns the revents (POLLERR/POLLHUP may appear unasked). Level-triggered: completes at once
/// if the fd is ready. Returns 0 when `deadline` passes first. On cancellation the poll is
/// removed with IORING_OP_ASYNC_CANCEL, its completion awaited, then Cancelled is thrown.
/// Throws std::system_error if the poll fails (bad fd).
Task<unsigned> wait_fd(int fd, unsigned poll_mask,
                       std::optional<std::chrono::steady_clock::time_point> deadline = {},
                       CancelToken token = {});

} // namespace pgtide::io
