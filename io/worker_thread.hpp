// WorkerThread: one OS thread for blocking calls (SQLite); results come back through the loop.
#pragma once

#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
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
///
/// post() queues a job without waiting for it, so that the worker can write one batch while the
/// loop prepares the next (at most posted_limit posted jobs outstanding). A posted job that
/// throws poisons the worker: every job after it fails with that exception without running,
/// until the loop has been told — by the next run() (whose job is not run), post() or
/// wait_posted(), which rethrow it once. Jobs still queued when the loop is told then run; the
/// caller's recovery (a rollback) queues behind them.
class WorkerThread {
public:
    explicit WorkerThread(std::string name, std::size_t queue_capacity = 64,
                          std::size_t posted_limit = 2);
    /// Finishes every queued job, then joins. No run() may still be awaiting.
    ~WorkerThread();
    WorkerThread(const WorkerThread&) = delete;
    WorkerThread& operator=(const WorkerThread&) = delete;

    /// Runs f() on the worker; suspends the caller (never blocks the loop) until it returns.
    /// Returns f's result or rethrows its exception on the loop thread.
    template <class F> Task<std::invoke_result_t<F>> run(F f);

    /// Queues f() (returning void) and returns once it is queued; suspends while posted_limit
    /// posted jobs are outstanding. Rethrows the failure of an earlier posted job instead of
    /// queueing.
    template <class F> Task<void> post(F f);

    /// Suspends until every posted job has finished; rethrows the first failure among them.
    Task<void> wait_posted();

    const std::string& name() const noexcept { return name_; }

private:
    struct Job {
        virtual ~Job() = default;
        virtual void execute() noexcept = 0;
        /// Fails the job with `e` instead of running it (the worker is poisoned).
        virtual void fail(std::exception_ptr e) noexcept = 0;
        /// The failure of a posted job, which nobody awaits.
        virtual std::exception_ptr failure() const noexcept = 0;
        EventLoop* loop = nullptr;
        std::coroutine_handle<> waiter;
        bool posted = false; ///< heap-owned by the worker, deleted once run
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
        void fail(std::exception_ptr e) noexcept override { error = std::move(e); }
        std::exception_ptr failure() const noexcept override { return error; }
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

    /// Resumes a waiter once at most `target` posted jobs are outstanding.
    struct PostedAwaiter {
        WorkerThread& worker;
        std::size_t target;
        bool await_ready();
        void await_suspend(std::coroutine_handle<> h);
        void await_resume() const noexcept {}
    };
    struct PostedWaiter {
        std::coroutine_handle<> handle;
        EventLoop* loop;
        std::size_t target;
    };

    void push(Job& job);
    void push_posted(std::unique_ptr<Job> job);
    /// Rethrows (once) the failure that poisoned the worker, if any. Loop side.
    void rethrow_poison();
    void release_slot() noexcept;
    void thread_main();

    std::string name_;
    std::size_t capacity_;
    std::size_t posted_limit_;
    // Loop side.
    std::size_t outstanding_ = 0;
    std::deque<std::coroutine_handle<>> slot_waiters_;
    // Shared with the worker.
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<Job*> queue_;
    std::size_t posted_ = 0;    ///< posted jobs queued or running
    std::exception_ptr poison_; ///< a posted job's failure, not yet rethrown
    std::deque<PostedWaiter> posted_waiters_;
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

template <class F> Task<void> WorkerThread::post(F f) {
    rethrow_poison();
    while (true) {
        PostedAwaiter room{*this, posted_limit_ - 1};
        co_await room;
        rethrow_poison();
        {
            std::lock_guard lock(mutex_);
            if (posted_ < posted_limit_) {
                break;
            }
        }
    }
    auto job = std::make_unique<JobFor<F>>(std::move(f));
    job->posted = true;
    push_posted(std::move(job));
}

} // namespace pgtide::io
