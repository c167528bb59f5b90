// EventLoop: one io_uring per thread, a ready queue of coroutines, a timer heap and the eventfd
// bridge through which other threads hand work back to the loop.
#pragma once

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <functional>
#include <memory>

struct io_uring_sqe;

namespace pgtide::io {

/// The state of one io_uring operation. It lives in the frame (or object) that waits for it,
/// and its address is the SQE's user_data: it must stay alive until its CQE has arrived.
struct IoOp {
    /// Posted to the ready queue when the CQE arrives, unless on_complete is set.
    std::coroutine_handle<> handle;
    /// Called instead (on the loop thread, after the CQ has been advanced, never inside it).
    void (*on_complete)(IoOp& op) = nullptr;
    int res = 0;
    unsigned flags = 0;
};

/// A deadline registered with EventLoop::add_timer; lives in the waiting frame.
struct TimerNode {
    std::chrono::steady_clock::time_point deadline;
    std::coroutine_handle<> handle; ///< posted when the deadline passes
    std::uint64_t id = 0;           ///< set by add_timer; 0 when not registered
};

/// The event loop of one thread. Owns the io_uring; every coroutine of the thread runs from
/// run_until (through sync_wait). Not thread-safe except post_remote.
class EventLoop {
public:
    explicit EventLoop(unsigned entries = 256);
    ~EventLoop();
    EventLoop(const EventLoop&) = delete;
    EventLoop& operator=(const EventLoop&) = delete;

    /// The loop of this thread; throws std::logic_error if there is none.
    static EventLoop& current();
    /// The loop of this thread, or nullptr.
    static EventLoop* current_or_null() noexcept;

    /// Resumes h later, from the loop (never inline).
    void post(std::coroutine_handle<> h);

    /// Runs ready coroutines, timers and completions until done() is true after a step.
    /// Throws std::logic_error when nothing can ever make progress (deadlock), and
    /// std::system_error when the ring fails.
    void run_until(const std::function<bool()>& done);

    /// A free SQE (submits pending ones to make room); throws std::system_error if none.
    io_uring_sqe* get_sqe();
    /// Makes sure `n` SQEs can be taken without an intervening submit (linked requests).
    void reserve_sqes(unsigned n);
    /// Sets op as the SQE's user_data and counts it in flight until its CQE.
    void track(io_uring_sqe* sqe, IoOp& op) noexcept;
    /// Marks an SQE whose completion nobody waits for (cancel requests, link timeouts).
    static void ignore(io_uring_sqe* sqe) noexcept;
    /// Queues an IORING_OP_ASYNC_CANCEL for op (its own CQE still arrives, -ECANCELED or normal).
    void cancel(IoOp& op);
    /// Submits prepared SQEs now (e.g. before closing a file whose polls were just cancelled).
    void submit();

    void add_timer(TimerNode& node);
    /// False if node was not registered (already fired or never added).
    bool remove_timer(TimerNode& node) noexcept;

    /// Thread-safe: resume h on this loop. Each call must be announced on the loop thread first
    /// by expect_remote(), which keeps the eventfd read armed until it arrives.
    void post_remote(std::coroutine_handle<> h);
    void expect_remote();

    /// Ring setup actually used ("single_issuer+defer_taskrun", "coop_taskrun" or "plain").
    const char* setup_mode() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Awaitable that suspends the caller and resumes it from the loop's ready queue.
struct Yield {
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) const { EventLoop::current().post(h); }
    void await_resume() const noexcept {}
};

/// `co_await io::yield();` lets every other ready coroutine run first.
inline Yield yield() noexcept {
    return {};
}

} // namespace pgtide::io
