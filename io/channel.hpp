// Channel<T>: a bounded queue between coroutines of one loop, with backpressure.
#pragma once

#include <coroutine>
#include <cstddef>
#include <deque>
#include <optional>
#include <stdexcept>
#include <utility>

#include "io/event_loop.hpp"
#include "io/task.hpp"

namespace pgtide::io {

/// Bounded FIFO for one loop thread. send suspends while the channel is full, recv while it is
/// empty; peers are woken through EventLoop::post, never resumed inline. close() wakes everyone:
/// later sends return false, receivers drain what is left and then get nullopt.
template <class T> class Channel {
public:
    /// capacity >= 1; throws std::invalid_argument otherwise.
    explicit Channel(std::size_t capacity) : capacity_(capacity) {
        if (capacity == 0) {
            throw std::invalid_argument("Channel capacity must be at least 1");
        }
    }
    Channel(const Channel&) = delete;
    Channel& operator=(const Channel&) = delete;

    /// Queues value; suspends while full. False (value dropped) if the channel is closed.
    Task<bool> send(T value) {
        while (items_.size() >= capacity_ && !closed_) {
            WaitAwaiter awaiter{senders_};
            co_await awaiter;
        }
        if (closed_) {
            co_return false;
        }
        items_.push_back(std::move(value));
        wake_one(receivers_);
        co_return true;
    }

    /// The oldest value; suspends while empty. nullopt once closed and drained.
    Task<std::optional<T>> recv() {
        while (items_.empty() && !closed_) {
            WaitAwaiter awaiter{receivers_};
            co_await awaiter;
        }
        if (items_.empty()) {
            co_return std::nullopt;
        }
        std::optional<T> value{std::move(items_.front())};
        items_.pop_front();
        wake_one(senders_);
        co_return value;
    }

    /// Non-suspending send: false if full or closed.
    bool try_send(T& value) {
        if (closed_ || items_.size() >= capacity_) {
            return false;
        }
        items_.push_back(std::move(value));
        wake_one(receivers_);
        return true;
    }

    void close() {
        if (closed_) {
            return;
        }
        closed_ = true;
        wake_all(senders_);
        wake_all(receivers_);
    }

    bool closed() const noexcept { return closed_; }
    std::size_t size() const noexcept { return items_.size(); }
    std::size_t capacity() const noexcept { return capacity_; }

private:
    struct WaitAwaiter {
        std::deque<std::coroutine_handle<>>& waiters;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) { waiters.push_back(h); }
        void await_resume() const noexcept {}
    };

    static void wake_one(std::deque<std::coroutine_handle<>>& waiters) {
        if (!waiters.empty()) {
            const auto h = waiters.front();
            waiters.pop_front();
            EventLoop::current().post(h);
        }
    }
    static void wake_all(std::deque<std::coroutine_handle<>>& waiters) {
        while (!waiters.empty()) {
            wake_one(waiters);
        }
    }

    std::size_t capacity_;
    std::deque<T> items_;
    std::deque<std::coroutine_handle<>> senders_;
    std::deque<std::coroutine_handle<>> receivers_;
    bool closed_ = false;
};

} // namespace pgtide::io
