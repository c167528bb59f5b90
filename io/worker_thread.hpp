// WorkerThread: one OS thread for blocking calls (SQLite); results come back through the loop.
#pragma once

#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "io/event_loop.hpp"
#include "io/task.hpp"

namespace pgtide::io {

/// A dedicated thread running jobs in submission order. At most queue_capacity jobs are
/// outstanding (queued or running); run() suspends while that many are. Completions return to
/// the submitting loop through its eventfd bridge; the worker never touches the ring.
class WorkerThread {
public:
    explicit WorkerThread(std::string name, std::size_t queue_capacity = 64);
    /// Finishes every queued job, then joins. No run() may still be awaiting.
    ~WorkerThread();
    WorkerThread(const WorkerThread&) = delete;
    WorkerThread& operator=(const WorkerThread&) = delete;

    /// Runs f() on the worker; suspends the caller (never blocks the loop) until it returns.
    /// Returns f's result or rethrows its exception on the loop thread.
    template <class F> Task<std::invoke_result_t<F>> run(F f);

    const std::string& name() const noexcept { return name_; }

private:
    struct Job {
        virtual void execute() noexcept = 0;
        EventLoop* loop = nullptr;
        std::coroutine_handle<> waiter;

    protected:
        ~Job() = default;
    };

    template <class F> struct JobFor final : Job {
        using R = std::invoke_result_t<F>;
        using Stored = std::conditional_t<std::is_void_v<R>, bool, R>;
        explicit JobFor(F fn) : f(std::move(fn)) {}
        void execute() noexcept override {
            try {
                if constexpr (std::is_void_v<R>) {
                    f();
                    result.emplace(true);
                } else {
                    result.emplace(f());
                }
            } catch (...) {
                error = std::current_exception();
            }
        }
        R take() {
            if (error) {
                std::rethrow_exception(error);
            }
            if constexpr (!std::is_void_v<R>) {
                return std::move(*result);
            }
        }
        F f;
        std::optional<Stored> result;
        std::exception_ptr error;
    };

    struct SlotAwaiter {
        WorkerThread& worker;
        bool await_ready() const noexcept { return worker.outstanding_ < worker.capacity_; }
        void await_suspend(std::coroutine_handle<> h) { worker.slot_waiters_.push_back(h); }
        void await_resume() const noexcept {}
    };

    struct SubmitAwaiter {
        WorkerThread& worker;
        Job& job;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) {
            job.loop = &EventLoop::current();
            job.waiter = h;
            job.loop->expect_remote(); // may throw: nothing is queued yet
            worker.push(job);
        }
        void await_resume() const noexcept {}
    };

    /// Gives the slot back when the job's coroutine resumes (or its submission failed).
    struct SlotGuard {
        WorkerThread& worker;
        ~SlotGuard() { worker.release_slot(); }
    };

    void push(Job& job);
    void release_slot() noexcept;
    void thread_main();

    std::string name_;
    std::size_t capacity_;
    // Loop side.
    std::size_t outstanding_ = 0;
    std::deque<std::coroutine_handle<>> slot_waiters_;
    // Shared with the worker.
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<Job*> queue_;
    bool stopping_ = false;
    std::thread thread_;
};

template <class F> Task<std::invoke_result_t<F>> WorkerThread::run(F f) {
    while (outstanding_ >= capacity_) {
        SlotAwaiter slot{*this};
        co_await slot;
    }
    ++outstanding_;
    SlotGuard guard{*this};
    JobFor<F> job{std::move(f)};
    SubmitAwaiter submit{*this, job};
    co_await submit;
    co_return job.take();
}

} // namespace pgtide::io
