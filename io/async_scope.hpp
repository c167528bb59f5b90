// AsyncScope: owner of detached tasks; join() waits for all of them.
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>

#include "io/task.hpp"

namespace pgtide::io {

/// Runs spawned tasks concurrently on the current loop; join() waits until all have finished
/// and rethrows the first exception any of them threw (the others are dropped). Join before
/// destroying the scope: the destructor terminates if children are still running.
class AsyncScope {
public:
    AsyncScope() = default;
    AsyncScope(const AsyncScope&) = delete;
    AsyncScope& operator=(const AsyncScope&) = delete;
    ~AsyncScope();

    /// Starts t from the loop's ready queue (never inline).
    void spawn(Task<void> t);
    /// Suspends until every spawned task has finished; rethrows the first failure. May be
    /// awaited again after further spawns.
    Task<void> join();
    std::size_t active() const noexcept { return active_; }

private:
    struct Detached;
    static Detached run_child(AsyncScope* scope, Task<void> t);
    void child_done(std::exception_ptr error) noexcept;

    std::size_t active_ = 0;
    std::exception_ptr first_error_;
    std::coroutine_handle<> joiner_;
};

} // namespace pgtide::io
