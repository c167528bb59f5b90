// A full disk for one file family, injected into pgtide with LD_PRELOAD by the fault tests
// (tests/integration/faults_test.cpp): a write that would grow a regular file whose path starts
// with $PGTIDE_FAULT_ENOSPC_PATH beyond $PGTIDE_FAULT_ENOSPC_BYTES fails with ENOSPC, as the
// kernel fails it on a full file system; every other write goes through untouched. SQLite's
// own limit (PRAGMA max_page_count) is per connection and cannot be set on pgtide's, and a
// small file system needs privileges tests do not have: this is the kernel's error itself.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace {

using write_fn = ssize_t (*)(int, const void*, size_t);
using pwrite_fn = ssize_t (*)(int, const void*, size_t, off_t);

struct Limit {
    std::string prefix;
    off_t bytes = -1;
};

const Limit& limit() {
    static const Limit l = [] {
        Limit r;
        const char* path = std::getenv("PGTIDE_FAULT_ENOSPC_PATH");
        const char* bytes = std::getenv("PGTIDE_FAULT_ENOSPC_BYTES");
        if (path != nullptr && *path != '\0' && bytes != nullptr) {
            r.prefix = path;
            r.bytes = off_t(std::strtoll(bytes, nullptr, 10));
        }
        return r;
    }();
    return l;
}

// True when writing `count` bytes at `offset` (-1: the file offset) to fd would grow a file of
// the family past the limit.
bool would_overflow(int fd, size_t count, off_t offset) {
    const Limit& l = limit();
    if (l.bytes < 0 || fd <= 2) {
        return false;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        return false;
    }
    char link[64];
    char target[4096];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0 || std::size_t(n) < l.prefix.size() ||
        std::memcmp(target, l.prefix.data(), l.prefix.size()) != 0) {
        return false;
    }
    if (offset < 0) {
        offset = lseek(fd, 0, SEEK_CUR);
    }
    const off_t end = offset + off_t(count);
    return end > st.st_size && end > l.bytes;
}

template <typename F> F next(const char* name) {
    return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

} // namespace

extern "C" {

ssize_t write(int fd, const void* buf, size_t count) {
    static const auto real = next<write_fn>("write");
    if (would_overflow(fd, count, -1)) {
        errno = ENOSPC;
        return -1;
    }
    return real(fd, buf, count);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) {
    static const auto real = next<pwrite_fn>("pwrite");
    if (would_overflow(fd, count, offset)) {
        errno = ENOSPC;
        return -1;
    }
    return real(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off_t offset) {
    static const auto real = next<pwrite_fn>("pwrite64");
    if (would_overflow(fd, count, offset)) {
        errno = ENOSPC;
        return -1;
    }
    return real(fd, buf, count, offset);
}

} // extern "C"
