// Signals as awaitable events (signalfd read on the loop).
#pragma once

#include <vector>

#include "io/cancel.hpp"
#include "io/task.hpp"

namespace pgtide::io {

/// Blocks the signals in this thread (pthread_sigmask), so that threads started afterwards
/// inherit the mask and wait_signal can receive them. Throws std::system_error.
void block_signals(std::vector<int> signals);

/// Suspends until one of `signals` (blocked beforehand with block_signals) is delivered and
/// returns its number. Throws Cancelled when the token is cancelled, std::system_error if the
/// signalfd cannot be created.
Task<int> wait_signal(std::vector<int> signals, CancelToken token = {});

} // namespace pgtide::io
