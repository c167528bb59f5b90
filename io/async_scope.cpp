// AsyncScope: each child runs in a self-destroying wrapper frame that reports back to the scope.
#include "io/async_scope.hpp"

#include <cstdlib>
#include <utility>

#include "io/event_loop.hpp"

namespace pgtide::io {

struct AsyncScope::Detached {
    struct promise_type {
        Detached get_return_object() noexcept {
            return Detached{std::coroutine_handle<promise_type>::from_promise(*this)};
        }
        std::suspend_always initial_suspend() const noexcept { return {}; }
        std::suspend_never final_suspend() const noexcept { return {}; }
        void return_void() const noexcept {}
        void unhandled_exception() const noexcept { std::terminate(); }
    };
    std::coroutine_handle<promise_type> handle;
};

AsyncScope::~AsyncScope() {
    if (active_ != 0) {
        std::terminate(); // children would report into a dead scope
    }
}

AsyncScope::Detached AsyncScope::run_child(AsyncScope* scope, Task<void> t) {
    std::exception_ptr error;
    try {
        co_await std::move(t);
    } catch (...) {
        error = std::current_exception();
    }
    scope->child_done(error);
}

void AsyncScope::spawn(Task<void> t) {
    Detached child = run_child(this, std::move(t));
    ++active_;
    try {
        EventLoop::current().post(child.handle);
    } catch (...) {
        --active_;
        child.handle.destroy();
        throw;
    }
}

void AsyncScope::child_done(std::exception_ptr error) noexcept {
    if (error && !first_error_) {
        first_error_ = std::move(error);
    }
    if (--active_ == 0 && joiner_) {
        EventLoop::current().post(std::exchange(joiner_, {}));
    }
}

namespace {

struct JoinAwaiter {
    std::size_t active;
    std::coroutine_handle<>& joiner;
    bool await_ready() const noexcept { return active == 0; }
    void await_suspend(std::coroutine_handle<> h) noexcept { joiner = h; }
    void await_resume() const noexcept {}
};

} // namespace

Task<void> AsyncScope::join() {
    JoinAwaiter awaiter{active_, joiner_};
    co_await awaiter;
    if (first_error_) {
        std::rethrow_exception(std::exchange(first_error_, {}));
    }
}

} // namespace pgtide::io
