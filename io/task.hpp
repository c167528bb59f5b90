// Task<T>: the lazy, move-only coroutine type every asynchronous function of pgtide returns.
#pragma once

#include <coroutine>
#include <exception>
#include <type_traits>
#include <utility>
#include <variant>

namespace pgtide::io {

template <class T = void> class Task;

namespace detail {

/// Resumes the awaiting coroutine when a task finishes asynchronously (symmetric transfer).
/// A task that finishes while its awaiter is still starting it returns there instead.
struct FinalAwaiter {
    bool await_ready() const noexcept { return false; }
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> h) const noexcept {
        auto& promise = h.promise();
        if (!promise.starting_inline_ && promise.continuation_) {
            return promise.continuation_;
        }
        return std::noop_coroutine();
    }
    void await_resume() const noexcept {}
};

class PromiseBase {
public:
    std::suspend_always initial_suspend() const noexcept { return {}; }
    FinalAwaiter final_suspend() const noexcept { return {}; }
    void set_continuation(std::coroutine_handle<> h) noexcept { continuation_ = h; }

    /// Starts the coroutine from its awaiter; true if it suspended (the awaiter must suspend
    /// too and is resumed from final_suspend), false if it already finished.
    template <class Promise> static bool start(std::coroutine_handle<Promise> h) noexcept {
        auto& promise = h.promise();
        promise.starting_inline_ = true;
        h.resume();
        promise.starting_inline_ = false;
        return !h.done();
    }

private:
    friend struct FinalAwaiter;
    std::coroutine_handle<> continuation_;
    bool starting_inline_ = false;
};

template <class T> class Promise final : public PromiseBase {
public:
    Task<T> get_return_object() noexcept;
    void unhandled_exception() noexcept { result_.template emplace<2>(std::current_exception()); }
    template <class U>
    requires std::is_convertible_v<U&&, T>
    void return_value(U&& value) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
        result_.template emplace<1>(std::forward<U>(value));
    }
    T take() {
        if (result_.index() == 2) {
            std::rethrow_exception(std::get<2>(result_));
        }
        return std::move(std::get<1>(result_));
    }

private:
    std::variant<std::monostate, T, std::exception_ptr> result_;
};

template <> class Promise<void> final : public PromiseBase {
public:
    Task<void> get_return_object() noexcept;
    void unhandled_exception() noexcept { error_ = std::current_exception(); }
    void return_void() noexcept {}
    void take() {
        if (error_) {
            std::rethrow_exception(error_);
        }
    }

private:
    std::exception_ptr error_;
};

} // namespace detail

/// A lazily started coroutine producing a T (or throwing). It starts when awaited; the awaiter
/// continues at once if it finished synchronously, else is resumed from the task's
/// final_suspend by symmetric transfer; the task's exception is rethrown in the awaiter.
/// Move-only; owns its frame and destroys it with the Task. Destroying a Task whose coroutine
/// is suspended mid-way (not unstarted, not finished) is a bug unless nothing of it is in flight.
template <class T> class [[nodiscard]] Task {
public:
    using promise_type = detail::Promise<T>;
    using value_type = T;

    Task() noexcept = default;
    explicit Task(std::coroutine_handle<promise_type> h) noexcept : handle_(h) {}
    Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
    Task& operator=(Task&& other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, {});
        }
        return *this;
    }
    Task(const Task&) = delete;
    Task& operator=(const Task&) = delete;
    ~Task() { reset(); }

    bool valid() const noexcept { return bool(handle_); }
    bool done() const noexcept { return !handle_ || handle_.done(); }
    /// The coroutine frame; for the runtime's own drivers (sync_wait, when_all, AsyncScope).
    std::coroutine_handle<promise_type> handle() const noexcept { return handle_; }

    struct Awaiter {
        std::coroutine_handle<promise_type> handle;
        bool await_ready() const noexcept { return !handle || handle.done(); }
        // Starting the task inline and not suspending when it finished synchronously keeps
        // the stack flat at every optimisation level (GCC emits the symmetric-transfer tail
        // call only when optimising); asynchronous completion comes back by symmetric transfer.
        bool await_suspend(std::coroutine_handle<> awaiting) noexcept {
            handle.promise().set_continuation(awaiting);
            return detail::PromiseBase::start(handle);
        }
        T await_resume() { return handle.promise().take(); }
    };

    /// Starts the task (symmetric transfer) and resumes the caller with its result.
    Awaiter operator co_await() && noexcept { return Awaiter{handle_}; }
    Awaiter operator co_await() & noexcept { return Awaiter{handle_}; }

private:
    void reset() noexcept {
        if (handle_) {
            handle_.destroy();
            handle_ = {};
        }
    }

    std::coroutine_handle<promise_type> handle_;
};

namespace detail {

template <class T> Task<T> Promise<T>::get_return_object() noexcept {
    return Task<T>{std::coroutine_handle<Promise<T>>::from_promise(*this)};
}

inline Task<void> Promise<void>::get_return_object() noexcept {
    return Task<void>{std::coroutine_handle<Promise<void>>::from_promise(*this)};
}

} // namespace detail

} // namespace pgtide::io
