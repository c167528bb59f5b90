// sync_wait: run the loop until one task finishes (main and tests only).
#pragma once

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "io/event_loop.hpp"
#include "io/task.hpp"

namespace pgtide::io {

namespace detail {

template <class T>
Task<void> sync_wait_body(Task<T> task, std::optional<T>* result, std::exception_ptr* error,
                          bool* done) {
    try {
        result->emplace(co_await std::move(task));
    } catch (...) {
        *error = std::current_exception();
    }
    *done = true;
}

inline Task<void> sync_wait_body_void(Task<void> task, std::exception_ptr* error, bool* done) {
    try {
        co_await std::move(task);
    } catch (...) {
        *error = std::current_exception();
    }
    *done = true;
}

} // namespace detail

/// Runs `loop` until `task` finishes; returns its value or rethrows its exception. Never call
/// it from a coroutine. Throws std::logic_error if the loop deadlocks (the task waits for
/// something nothing will ever deliver).
template <class T> T sync_wait(EventLoop& loop, Task<T> task) {
    bool done = false;
    std::exception_ptr error;
    if constexpr (std::is_void_v<T>) {
        Task<void> body = detail::sync_wait_body_void(std::move(task), &error, &done);
        loop.post(body.handle());
        loop.run_until([&done] { return done; });
        if (error) {
            std::rethrow_exception(error);
        }
    } else {
        std::optional<T> result;
        Task<void> body = detail::sync_wait_body(std::move(task), &result, &error, &done);
        loop.post(body.handle());
        loop.run_until([&done] { return done; });
        if (error) {
            std::rethrow_exception(error);
        }
        return std::move(*result);
    }
}

} // namespace pgtide::io
