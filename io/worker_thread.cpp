// WorkerThread: a mutex+condition queue feeding the thread; completions via EventLoop::post_remote.
#include "io/worker_thread.hpp"

#include <stdexcept>

#include <pthread.h>

namespace pgtide::io {

WorkerThread::WorkerThread(std::string name, std::size_t queue_capacity)
    : name_(std::move(name)), capacity_(queue_capacity) {
    if (capacity_ == 0) {
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
        job->execute();
        // The job lives in the waiting frame, which may be gone as soon as this returns.
        EventLoop* loop = job->loop;
        loop->post_remote(job->waiter);
    }
}

} // namespace pgtide::io
