// sleep_until/sleep_for: a TimerNode in the sleeping frame, registered with the loop's heap.
#include "io/timer.hpp"

#include <optional>

#include "io/event_loop.hpp"

namespace pgtide::io {

namespace {

struct SleepAwaiter {
    EventLoop& loop;
    TimerNode node;
    CancelToken token;
    std::optional<CancelRegistration> registration;
    bool cancelled = false;

    bool await_ready() const noexcept { return node.deadline <= std::chrono::steady_clock::now(); }
    void await_suspend(std::coroutine_handle<> h) {
        node.handle = h;
        if (token.can_be_cancelled()) {
            registration.emplace(token, [this] {
                if (loop.remove_timer(node)) {
                    cancelled = true;
                    loop.post(node.handle);
                }
            });
        }
        loop.add_timer(node);
    }
    void await_resume() {
        registration.reset();
        if (cancelled) {
            throw Cancelled();
        }
    }
};

} // namespace

Task<void> sleep_until(std::chrono::steady_clock::time_point t, CancelToken token) {
    token.throw_if_cancelled();
    SleepAwaiter awaiter{EventLoop::current(), TimerNode{t, {}, 0}, token, std::nullopt, false};
    co_await awaiter;
}

Task<void> sleep_for(std::chrono::nanoseconds d, CancelToken token) {
    return sleep_until(std::chrono::steady_clock::now() + d, std::move(token));
}

} // namespace pgtide::io
