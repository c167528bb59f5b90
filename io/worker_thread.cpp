// WorkerThread: a mutex+condition queue feeding the thread; completions via EventLoop::post_remote.
#include "io/worker_thread.hpp"

#include <stdexcept>
#include <vector>

#include <pthread.h>

namespace pgtide::io {

WorkerThread::WorkerThread(std::string name, std::size_t queue_capacity, std::size_t posted_limit)
    : name_(std::move(name)), capacity_(queue_capacity), posted_limit_(posted_limit) {
    if (capacity_ == 0 || posted_limit_ == 0) {
        throw std::invalid_argument("WorkerThread queue capacity must be at least 1");
    }
    thread_ = std::thread([this] { thread_main(); });
    const std::string short_name = name_.substr(0, 15); // the kernel's limit
    pthread_setname_np(thread_.native_handle(), short_name.c_str());
}

WorkerThread::~WorkerThread() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
}

void WorkerThread::push(Job& job) {
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(&job);
    }
    cv_.notify_one();
}

void WorkerThread::push_posted(std::unique_ptr<Job> job) {
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(job.release());
        ++posted_;
    }
    cv_.notify_one();
}

void WorkerThread::rethrow_poison() {
    std::exception_ptr e;
    {
        std::lock_guard lock(mutex_);
        e = std::exchange(poison_, nullptr);
    }
    if (e) {
        std::rethrow_exception(e);
    }
}

bool WorkerThread::PostedAwaiter::await_ready() {
    std::lock_guard lock(worker.mutex_);
    return worker.posted_ <= target;
}

void WorkerThread::PostedAwaiter::await_suspend(std::coroutine_handle<> h) {
    EventLoop& loop = EventLoop::current();
    loop.expect_remote();
    bool ready = false;
    {
        std::lock_guard lock(worker.mutex_);
        ready = worker.posted_ <= target;
        if (!ready) {
            worker.posted_waiters_.push_back(PostedWaiter{h, &loop, target});
        }
    }
    if (ready) {
        loop.post_remote(h); // the announced completion, from here
    }
}

Task<void> WorkerThread::wait_posted() {
    PostedAwaiter idle{*this, 0};
    co_await idle;
    rethrow_poison();
}

void WorkerThread::release_slot() noexcept {
    --outstanding_;
    if (!slot_waiters_.empty()) {
        const auto h = slot_waiters_.front();
        slot_waiters_.pop_front();
        try {
            EventLoop::current().post(h);
        } catch (...) {
            std::terminate();
        }
    }
}

void WorkerThread::thread_main() {
    for (;;) {
        Job* job = nullptr;
        {
            std::unique_lock lock(mutex_);
            cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) {
                return; // stopping, and every queued job has run
            }
            job = queue_.front();
            queue_.pop_front();
        }
        std::exception_ptr poison;
        bool stopping = false;
        {
            std::lock_guard lock(mutex_);
            poison = job->posted ? poison_ : std::exchange(poison_, nullptr);
            stopping = stopping_;
        }
        if (job->posted) {
            // Nobody awaits a posted job: its failure poisons the worker. Once the worker stops,
            // nothing will commit what posted jobs write, so they are dropped.
            const std::unique_ptr<Job> owned(job);
            if (!poison && !stopping) {
                job->execute();
            }
            std::vector<PostedWaiter> woken;
            {
                std::lock_guard lock(mutex_);
                --posted_;
                if (job->failure() && !poison_) {
                    poison_ = job->failure();
                }
                for (auto it = posted_waiters_.begin(); it != posted_waiters_.end();) {
                    if (posted_ <= it->target) {
                        woken.push_back(*it);
                        it = posted_waiters_.erase(it);
                    } else {
                        ++it;
                    }
                }
            }
            for (const auto& w : woken) {
                w.loop->post_remote(w.handle);
            }
            continue;
        }
        if (poison) {
            job->fail(poison); // this job's caller rethrows it on the loop
        } else {
            job->execute();
        }
        // The job lives in the waiting frame, which may be gone as soon as this returns.
        EventLoop* loop = job->loop;
        loop->post_remote(job->waiter);
    }
}

} // namespace pgtide::io
