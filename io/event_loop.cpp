// EventLoop: ring setup with fallbacks, the run loop (resume, submit+wait, reap, timers) and the
// eventfd bridge for completions coming from other threads.
#include "io/event_loop.hpp"

#include <cerrno>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace pgtide::io {

namespace {

thread_local EventLoop* tls_current = nullptr;

constexpr std::uint64_t kIgnoreTag = 0;

[[noreturn]] void throw_errno(int err, const char* what) {
    throw std::system_error(err, std::generic_category(), what);
}

__kernel_timespec to_timespec(std::chrono::nanoseconds d) {
    if (d.count() < 0) {
        d = std::chrono::nanoseconds{0};
    }
    __kernel_timespec ts{};
    ts.tv_sec = static_cast<long long>(d.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long long>(d.count() % 1'000'000'000);
    return ts;
}

} // namespace

struct EventLoop::Impl {
    struct BridgeOp : IoOp {
        Impl* impl = nullptr;
    };

    io_uring ring{};
    const char* mode = "plain";
    std::deque<std::coroutine_handle<>> ready;
    std::map<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>, TimerNode*> timers;
    std::uint64_t next_timer_id = 1;
    std::size_t inflight = 0;
    std::vector<IoOp*> completed;
    bool running = false;

    // Bridge: other threads push handles here and write the eventfd; the loop keeps one 8-byte
    // read armed on it while remote completions are expected.
    int efd = -1;
    std::mutex remote_mutex;
    std::vector<std::coroutine_handle<>> remote;
    std::size_t remote_expected = 0;
    bool bridge_armed = false;
    std::uint64_t efd_value = 0;
    BridgeOp bridge_op;

    io_uring_sqe* get_sqe() {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        if (sqe == nullptr) {
            const int r = io_uring_submit(&ring);
            if (r < 0 && r != -EBUSY && r != -EAGAIN) {
                throw_errno(-r, "io_uring_submit");
            }
            sqe = io_uring_get_sqe(&ring);
        }
        if (sqe == nullptr) {
            throw std::system_error(EBUSY, std::generic_category(), "io_uring: no free SQE");
        }
        return sqe;
    }

    void track(io_uring_sqe* sqe, IoOp& op) noexcept {
        io_uring_sqe_set_data(sqe, &op);
        ++inflight;
    }

    void arm_bridge() {
        if (bridge_armed || remote_expected == 0) {
            return;
        }
        io_uring_sqe* sqe = get_sqe();
        io_uring_prep_read(sqe, efd, &efd_value, sizeof efd_value, 0);
        track(sqe, bridge_op);
        bridge_armed = true;
    }

    void arm_bridge_for_one_more() {
        ++remote_expected;
        try {
            arm_bridge();
        } catch (...) {
            --remote_expected;
            throw;
        }
    }

    static void on_bridge(IoOp& op) {
        Impl& self = *static_cast<BridgeOp&>(op).impl;
        self.bridge_armed = false;
        std::vector<std::coroutine_handle<>> arrived;
        {
            std::lock_guard lock(self.remote_mutex);
            arrived.swap(self.remote);
        }
        for (auto h : arrived) {
            self.ready.push_back(h);
            --self.remote_expected;
        }
        if (op.res < 0 && op.res != -EINTR && op.res != -EAGAIN && op.res != -ECANCELED) {
            throw_errno(-op.res, "read(eventfd)");
        }
        self.arm_bridge();
    }

    // One wait on the ring: submit, wait (unless `block` is false), reap, fire timers.
    void step(bool block) {
        int r = 0;
        if (!block) {
            r = io_uring_submit_and_get_events(&ring);
        } else if (!timers.empty()) {
            const auto now = std::chrono::steady_clock::now();
            __kernel_timespec ts = to_timespec(timers.begin()->first.first - now);
            io_uring_cqe* cqe = nullptr;
            r = io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &ts, nullptr);
        } else if (inflight > 0) {
            r = io_uring_submit_and_wait(&ring, 1);
        } else {
            throw std::logic_error(
                "EventLoop: deadlock: nothing ready, no timer and no I/O in flight");
        }
        if (r < 0 && r != -ETIME && r != -EINTR && r != -EBUSY && r != -EAGAIN) {
            throw_errno(-r, "io_uring_submit_and_wait");
        }
        reap();
        fire_timers();
    }

    void reap() {
        unsigned head = 0;
        unsigned seen = 0;
        io_uring_cqe* cqe = nullptr;
        io_uring_for_each_cqe(&ring, head, cqe) {
            ++seen;
            const std::uint64_t tag = cqe->user_data;
            if (tag == kIgnoreTag || tag == LIBURING_UDATA_TIMEOUT) {
                continue;
            }
            auto* op = reinterpret_cast<IoOp*>(static_cast<std::uintptr_t>(tag));
            op->res = cqe->res;
            op->flags = cqe->flags;
            completed.push_back(op);
            --inflight;
        }
        io_uring_cq_advance(&ring, seen);
        // Resume nothing inside the CQ iteration: hand completions on only now.
        std::vector<IoOp*> done;
        done.swap(completed);
        for (IoOp* op : done) {
            if (op->on_complete != nullptr) {
                op->on_complete(*op);
            } else {
                ready.push_back(op->handle);
            }
        }
    }

    void fire_timers() {
        const auto now = std::chrono::steady_clock::now();
        while (!timers.empty() && timers.begin()->first.first <= now) {
            TimerNode* node = timers.begin()->second;
            timers.erase(timers.begin());
            node->id = 0;
            ready.push_back(node->handle);
        }
    }
};

EventLoop::EventLoop(unsigned entries) : impl_(std::make_unique<Impl>()) {
    if (tls_current != nullptr) {
        throw std::logic_error("EventLoop: this thread already has a loop");
    }
    struct Setup {
        unsigned flags;
        const char* mode;
    };
    const Setup setups[] = {
        {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE |
             IORING_SETUP_SUBMIT_ALL,
         "single_issuer+defer_taskrun"},
        {IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_CQSIZE |
             IORING_SETUP_SUBMIT_ALL,
         "coop_taskrun"},
        {IORING_SETUP_CQSIZE, "plain"},
        {0, "plain"},
    };
    int r = -EINVAL;
    for (const Setup& s : setups) {
        io_uring_params p{};
        p.flags = s.flags;
        if ((s.flags & IORING_SETUP_CQSIZE) != 0) {
            p.cq_entries = 4 * entries;
        }
        r = io_uring_queue_init_params(entries, &impl_->ring, &p);
        if (r == 0) {
            impl_->mode = s.mode;
            break;
        }
        if (r != -EINVAL) {
            break;
        }
    }
    if (r < 0) {
        throw_errno(-r, "io_uring_queue_init_params");
    }
    impl_->efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (impl_->efd < 0) {
        const int err = errno;
        io_uring_queue_exit(&impl_->ring);
        throw_errno(err, "eventfd");
    }
    impl_->bridge_op.impl = impl_.get();
    impl_->bridge_op.on_complete = &Impl::on_bridge;
    tls_current = this;
}

EventLoop::~EventLoop() {
    Impl& s = *impl_;
    if (s.inflight > 0) {
        // Operations still in flight would complete into frames nobody will resume: cancel
        // them all and reap their CQEs before the ring goes away.
        if (io_uring_sqe* sqe = io_uring_get_sqe(&s.ring)) {
            io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
            io_uring_sqe_set_data64(sqe, kIgnoreTag);
        }
        for (int i = 0; i < 50 && s.inflight > 0; ++i) {
            __kernel_timespec ts = to_timespec(std::chrono::milliseconds(20));
            io_uring_cqe* cqe = nullptr;
            io_uring_submit_and_wait_timeout(&s.ring, &cqe, 1, &ts, nullptr);
            unsigned head = 0;
            unsigned seen = 0;
            io_uring_for_each_cqe(&s.ring, head, cqe) {
                ++seen;
                if (cqe->user_data != kIgnoreTag && cqe->user_data != LIBURING_UDATA_TIMEOUT) {
                    --s.inflight;
                }
            }
            io_uring_cq_advance(&s.ring, seen);
        }
    }
    ::close(s.efd);
    io_uring_queue_exit(&s.ring);
    if (tls_current == this) {
        tls_current = nullptr;
    }
}

EventLoop& EventLoop::current() {
    if (tls_current == nullptr) {
        throw std::logic_error("no EventLoop on this thread");
    }
    return *tls_current;
}

EventLoop* EventLoop::current_or_null() noexcept {
    return tls_current;
}

void EventLoop::post(std::coroutine_handle<> h) {
    impl_->ready.push_back(h);
}

void EventLoop::run_until(const std::function<bool()>& done) {
    Impl& s = *impl_;
    if (s.running) {
        throw std::logic_error("EventLoop::run_until is not re-entrant (nested sync_wait?)");
    }
    s.running = true;
    struct Reset {
        bool& flag;
        ~Reset() { flag = false; }
    } reset{s.running};
    std::deque<std::coroutine_handle<>> batch;
    for (;;) {
        batch.swap(s.ready);
        while (!batch.empty()) {
            const auto h = batch.front();
            batch.pop_front();
            try {
                h.resume();
            } catch (...) {
                s.ready.insert(s.ready.begin(), batch.begin(), batch.end());
                throw;
            }
        }
        if (done()) {
            return;
        }
        s.step(/*block=*/s.ready.empty());
    }
}

io_uring_sqe* EventLoop::get_sqe() {
    return impl_->get_sqe();
}

void EventLoop::reserve_sqes(unsigned n) {
    if (io_uring_sq_space_left(&impl_->ring) < n) {
        const int r = io_uring_submit(&impl_->ring);
        if (r < 0 && r != -EBUSY && r != -EAGAIN) {
            throw_errno(-r, "io_uring_submit");
        }
        if (io_uring_sq_space_left(&impl_->ring) < n) {
            throw std::system_error(EBUSY, std::generic_category(), "io_uring: no free SQE");
        }
    }
}

void EventLoop::track(io_uring_sqe* sqe, IoOp& op) noexcept {
    impl_->track(sqe, op);
}

void EventLoop::ignore(io_uring_sqe* sqe) noexcept {
    io_uring_sqe_set_data64(sqe, kIgnoreTag);
}

void EventLoop::cancel(IoOp& op) {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_cancel64(sqe, reinterpret_cast<std::uintptr_t>(&op), 0);
    ignore(sqe);
}

void EventLoop::submit() {
    const int r = io_uring_submit(&impl_->ring);
    if (r < 0 && r != -EBUSY && r != -EAGAIN && r != -EINTR) {
        throw_errno(-r, "io_uring_submit");
    }
}

void EventLoop::add_timer(TimerNode& node) {
    node.id = impl_->next_timer_id++;
    impl_->timers.emplace(std::make_pair(node.deadline, node.id), &node);
}

bool EventLoop::remove_timer(TimerNode& node) noexcept {
    if (node.id == 0) {
        return false;
    }
    const bool erased = impl_->timers.erase(std::make_pair(node.deadline, node.id)) > 0;
    node.id = 0;
    return erased;
}

void EventLoop::post_remote(std::coroutine_handle<> h) {
    {
        std::lock_guard lock(impl_->remote_mutex);
        impl_->remote.push_back(h);
    }
    const std::uint64_t one = 1;
    // The counter only saturates after 2^64-2 unread writes; EAGAIN cannot happen in practice.
    [[maybe_unused]] const ssize_t n = ::write(impl_->efd, &one, sizeof one);
}

void EventLoop::expect_remote() {
    impl_->arm_bridge_for_one_more();
}

const char* EventLoop::setup_mode() const noexcept {
    return impl_->mode;
}

} // namespace pgtide::io
