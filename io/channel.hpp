// Channel<T>: a bounded queue between coroutines of one loop, with backpressure.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
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
///
/// Values are numbered from 1 in the order they are queued (sent()), and taken in that order
/// (taken()): right after recv(), taken() is the number of the value it returned. A channel
/// with a single receiver that handles one value at a time knows when that receiver is done
/// with a value: when it calls recv() again (send_and_wait).
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
        ++sent_;
        wake_one(receivers_);
        co_return true;
    }

    /// Queues value like send(), then suspends until the receiver is done with it: it has come
    /// back to recv() for the value after it. True then; false if the channel closed first
    /// (value dropped, or queued and perhaps never handled). For one receiver only.
    Task<bool> send_and_wait(T value) {
        if (!co_await send(std::move(value))) {
            co_return false;
        }
        const std::uint64_t number = sent_;
        while (recv_calls_ <= number && !closed_) {
            DoneAwaiter awaiter{done_waiters_, number};
            co_await awaiter;
        }
        co_return recv_calls_ > number;
    }

    /// The oldest value; suspends while empty. nullopt once closed and drained.
    Task<std::optional<T>> recv() {
        ++recv_calls_;
        wake_done();
        while (items_.empty() && !closed_) {
            WaitAwaiter awaiter{receivers_};
            co_await awaiter;
        }
        if (items_.empty()) {
            co_return std::nullopt;
        }
        std::optional<T> value{std::move(items_.front())};
        items_.pop_front();
        ++taken_;
        wake_one(senders_);
        co_return value;
    }

    /// Non-suspending send: false if full or closed.
    bool try_send(T& value) {
        if (closed_ || items_.size() >= capacity_) {
            return false;
        }
        items_.push_back(std::move(value));
        ++sent_;
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
        for (const auto& [number, h] : done_waiters_) {
            EventLoop::current().post(h);
        }
        done_waiters_.clear();
    }

    bool closed() const noexcept { return closed_; }
    std::size_t size() const noexcept { return items_.size(); }
    std::size_t capacity() const noexcept { return capacity_; }
    /// How many values have been queued, and taken, since the channel was made.
    std::uint64_t sent() const noexcept { return sent_; }
    std::uint64_t taken() const noexcept { return taken_; }

private:
    struct WaitAwaiter {
        std::deque<std::coroutine_handle<>>& waiters;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) { waiters.push_back(h); }
        void await_resume() const noexcept {}
    };

    using DoneWaiters = std::deque<std::pair<std::uint64_t, std::coroutine_handle<>>>;
    struct DoneAwaiter {
        DoneWaiters& waiters;
        std::uint64_t number;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) { waiters.emplace_back(number, h); }
        void await_resume() const noexcept {}
    };

    /// Wakes the senders waiting for the receiver to be done with a value it has now left.
    void wake_done() {
        for (auto it = done_waiters_.begin(); it != done_waiters_.end();) {
            if (it->first < recv_calls_) {
                EventLoop::current().post(it->second);
                it = done_waiters_.erase(it);
            } else {
                ++it;
            }
        }
    }

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
    DoneWaiters done_waiters_;
    std::uint64_t sent_ = 0;
    std::uint64_t taken_ = 0;
    std::uint64_t recv_calls_ =
        0; ///< recv() calls begun: the receiver is done with the ones before
    bool closed_ = false;
};

} // namespace pgtide::io
