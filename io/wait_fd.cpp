// wait_fd: POLL_ADD (+ linked absolute timeout for a deadline) whose state lives in the frame.
#include "io/wait_fd.hpp"

#include <cerrno>
#include <system_error>

#include <liburing.h>

#include "io/event_loop.hpp"

namespace pgtide::io {

namespace {

struct PollAwaiter {
    EventLoop& loop;
    int fd;
    unsigned mask;
    std::optional<std::chrono::steady_clock::time_point> deadline;
    CancelToken token;
    IoOp op{};
    __kernel_timespec ts{}; // read by the kernel at submission; lives until the poll's CQE
    std::optional<CancelRegistration> registration;
    bool cancel_requested = false;

    bool await_ready() const noexcept { return false; }

    void await_suspend(std::coroutine_handle<> h) {
        // Everything that can throw happens before an SQE is prepared.
        if (token.can_be_cancelled()) {
            registration.emplace(token, [this] {
                cancel_requested = true;
                loop.cancel(op);
            });
        }
        loop.reserve_sqes(deadline ? 2 : 1);
        io_uring_sqe* sqe = loop.get_sqe();
        op.handle = h;
        io_uring_prep_poll_add(sqe, fd, mask);
        loop.track(sqe, op);
        if (deadline) {
            const auto ns =
                std::chrono::duration_cast<std::chrono::nanoseconds>(deadline->time_since_epoch())
                    .count();
            ts.tv_sec = ns / 1'000'000'000;
            ts.tv_nsec = ns % 1'000'000'000;
            sqe->flags |= IOSQE_IO_LINK;
            io_uring_sqe* timeout = loop.get_sqe();
            io_uring_prep_link_timeout(timeout, &ts, IORING_TIMEOUT_ABS);
            EventLoop::ignore(timeout);
        }
    }

    unsigned await_resume() {
        registration.reset();
        if (cancel_requested) {
            throw Cancelled();
        }
        if (op.res == -ECANCELED && deadline && std::chrono::steady_clock::now() >= *deadline) {
            return 0; // the linked timeout fired
        }
        if (op.res == -ECANCELED) {
            // Cancelled by no one we know of, before any deadline: seen in CI under load, with
            // and without a deadline (root cause not found; a stale ASYNC_CANCEL matching a
            // reused frame address is the suspect). Taken for the timeout, it closed a healthy
            // connection 144 ms into a 30 s command timeout. Readiness is only a hint to
            // callers that retry nonblocking calls, so a spurious wake-up is safe where an
            // error would stop replication.
            return mask;
        }
        if (op.res < 0) {
            throw std::system_error(-op.res, std::generic_category(), "poll");
        }
        return static_cast<unsigned>(op.res);
    }
};

} // namespace

Task<unsigned> wait_fd(int fd, unsigned poll_mask,
                       std::optional<std::chrono::steady_clock::time_point> deadline,
                       CancelToken token) {
    token.throw_if_cancelled();
    PollAwaiter awaiter{EventLoop::current(), fd,   poll_mask, deadline, token, {}, {},
                        std::nullopt,         false};
    co_return co_await awaiter;
}

} // namespace pgtide::io
