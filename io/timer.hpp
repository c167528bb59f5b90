// Timers: sleep on the loop's user-space timer heap; cancellable.
#pragma once

#include <chrono>

#include "io/cancel.hpp"
#include "io/task.hpp"

namespace pgtide::io {

/// Suspends until `t` (steady clock). Returns at once if t has passed. Throws Cancelled if the
/// token is (or becomes) cancelled before the deadline.
Task<void> sleep_until(std::chrono::steady_clock::time_point t, CancelToken token = {});

/// Suspends for `d`; see sleep_until.
Task<void> sleep_for(std::chrono::nanoseconds d, CancelToken token = {});

} // namespace pgtide::io
