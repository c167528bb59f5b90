// block_signals / wait_signal: a signalfd per wait, polled through wait_fd.
#include "io/signals.hpp"

#include <cerrno>
#include <system_error>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "io/wait_fd.hpp"

namespace pgtide::io {

namespace {

sigset_t make_set(const std::vector<int>& signals) {
    sigset_t set;
    sigemptyset(&set);
    for (int s : signals) {
        sigaddset(&set, s);
    }
    return set;
}

struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
};

} // namespace

void block_signals(std::vector<int> signals) {
    const sigset_t set = make_set(signals);
    if (const int r = pthread_sigmask(SIG_BLOCK, &set, nullptr); r != 0) {
        throw std::system_error(r, std::generic_category(), "pthread_sigmask");
    }
}

Task<int> wait_signal(std::vector<int> signals, CancelToken token) {
    const sigset_t set = make_set(signals);
    const int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0) {
        throw std::system_error(errno, std::generic_category(), "signalfd");
    }
    FdCloser closer{fd};
    for (;;) {
        signalfd_siginfo info{};
        const ssize_t n = ::read(fd, &info, sizeof info);
        if (n == static_cast<ssize_t>(sizeof info)) {
            co_return static_cast<int>(info.ssi_signo);
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            throw std::system_error(errno, std::generic_category(), "read(signalfd)");
        }
        co_await wait_fd(fd, POLLIN, std::nullopt, token);
    }
}

} // namespace pgtide::io
