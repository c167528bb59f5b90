// when_all: run several tasks concurrently and wait for every one of them.
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "io/task.hpp"

namespace pgtide::io {

namespace detail {

/// N children + 1 for the parent's own suspension; whoever brings it to zero resumes the
/// parent (cppcoro's when_all_counter; a plain integer on a single thread).
struct WhenAllCounter {
    std::size_t remaining;
    std::coroutine_handle<> parent;
};

template <class T> using WhenAllValue = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

template <class T> class WhenAllChild {
public:
    class promise_type {
    public:
        WhenAllChild get_return_object() noexcept {
            return WhenAllChild{std::coroutine_handle<promise_type>::from_promise(*this)};
        }
        std::suspend_always initial_suspend() const noexcept { return {}; }
        struct Final {
            bool await_ready() const noexcept { return false; }
            std::coroutine_handle<>
            await_suspend(std::coroutine_handle<promise_type> h) const noexcept {
                WhenAllCounter& c = *h.promise().counter_;
                if (--c.remaining == 0) {
                    return c.parent;
                }
                return std::noop_coroutine();
            }
            void await_resume() const noexcept {}
        };
        Final final_suspend() const noexcept { return {}; }
        void unhandled_exception() noexcept { error_ = std::current_exception(); }
        void return_value(WhenAllValue<T> v) { value_.emplace(std::move(v)); }

        WhenAllCounter* counter_ = nullptr;
        std::optional<WhenAllValue<T>> value_;
        std::exception_ptr error_;
    };

    explicit WhenAllChild(std::coroutine_handle<promise_type> h) noexcept : handle_(h) {}
    WhenAllChild(WhenAllChild&& o) noexcept : handle_(std::exchange(o.handle_, {})) {}
    WhenAllChild& operator=(WhenAllChild&&) = delete;
    ~WhenAllChild() {
        if (handle_) {
            handle_.destroy();
        }
    }

    void start(WhenAllCounter& counter) {
        handle_.promise().counter_ = &counter;
        handle_.resume();
    }
    std::exception_ptr error() const noexcept { return handle_.promise().error_; }
    WhenAllValue<T> take() { return std::move(*handle_.promise().value_); }

private:
    std::coroutine_handle<promise_type> handle_;
};

template <class T> WhenAllChild<T> make_when_all_child(Task<T> task) {
    if constexpr (std::is_void_v<T>) {
        co_await std::move(task);
        co_return std::monostate{};
    } else {
        co_return co_await std::move(task);
    }
}

/// Starts every child, then suspends the parent unless they all finished synchronously.
template <class Starter> struct WhenAllAwaiter {
    WhenAllCounter& counter;
    Starter start_all;
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> parent) {
        counter.parent = parent;
        start_all();
        return --counter.remaining != 0;
    }
    void await_resume() const noexcept {}
};

template <class... T, std::size_t... I>
Task<std::tuple<WhenAllValue<T>...>> when_all_impl(std::index_sequence<I...>, Task<T>... tasks) {
    WhenAllCounter counter{sizeof...(T) + 1, {}};
    std::tuple<WhenAllChild<T>...> children{make_when_all_child(std::move(tasks))...};
    auto start_all = [&children, &counter] { (std::get<I>(children).start(counter), ...); };
    WhenAllAwaiter<decltype(start_all)> awaiter{counter, start_all};
    co_await awaiter;
    std::exception_ptr first;
    ((first = first ? first : std::get<I>(children).error()), ...);
    if (first) {
        std::rethrow_exception(first);
    }
    co_return std::tuple<WhenAllValue<T>...>{std::get<I>(children).take()...};
}

inline Task<void> when_all_vector(std::vector<Task<void>> tasks) {
    WhenAllCounter counter{tasks.size() + 1, {}};
    std::vector<WhenAllChild<void>> children;
    children.reserve(tasks.size());
    for (auto& t : tasks) {
        children.push_back(make_when_all_child(std::move(t)));
    }
    auto start_all = [&children, &counter] {
        for (auto& c : children) {
            c.start(counter);
        }
    };
    WhenAllAwaiter<decltype(start_all)> awaiter{counter, start_all};
    co_await awaiter;
    for (auto& c : children) {
        if (auto e = c.error()) {
            std::rethrow_exception(e);
        }
    }
}

} // namespace detail

/// Runs the tasks concurrently (started in order, each up to its first suspension) and waits
/// for ALL of them. Results in argument order, void as std::monostate. If any threw, the first
/// exception in argument order is rethrown, but only after every task has finished.
template <class... T> Task<std::tuple<detail::WhenAllValue<T>...>> when_all(Task<T>... tasks) {
    return detail::when_all_impl(std::index_sequence_for<T...>{}, std::move(tasks)...);
}

/// Same for a homogeneous vector of void tasks.
inline Task<void> when_all(std::vector<Task<void>> tasks) {
    return detail::when_all_vector(std::move(tasks));
}

} // namespace pgtide::io
