// Spool: streamed transactions in files, written and read on a worker thread.
#include "replicate/spool.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <iterator>
#include <sys/file.h>
#include <unistd.h>

#include "io/log.hpp"
#include "replicate/errors.hpp"
#include "replicate/metrics.hpp"
#include "replicate/walsender_messages.hpp"

namespace pgtide::replicate {

namespace {

constexpr std::size_t kLengthBytes = 4;
constexpr const char* kSuffix = ".spool";

DefiniteError spool_error(const std::string& what, const std::string& path, int error) {
    std::string message = what + " " + path + ": " + std::strerror(error);
    if (error == ENOSPC || error == EDQUOT) {
        message += "; free space there or set stream.spool_dir to a larger file system (the "
                   "transaction was not applied and the checkpoint did not move: pgtide "
                   "resumes from it)";
    }
    return DefiniteError(ExitCode::Other, message);
}

std::uint32_t load_be32(std::string_view bytes) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) {
        v = (v << 8) | static_cast<unsigned char>(bytes[i]);
    }
    return v;
}

void write_all(int fd, const char* data, std::size_t n, std::uint64_t offset,
               const std::string& path) {
    while (n > 0) {
        const ssize_t w = ::pwrite(fd, data, n, off_t(offset));
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw spool_error("cannot write the spool file", path, errno);
        }
        data += w;
        n -= std::size_t(w);
        offset += std::uint64_t(w);
    }
}

// Reads up to n bytes at offset; fewer only at the end of the file.
std::size_t read_some(int fd, char* data, std::size_t n, std::uint64_t offset,
                      const std::string& path) {
    std::size_t got = 0;
    while (got < n) {
        const ssize_t r = ::pread(fd, data + got, n - got, off_t(offset + got));
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw spool_error("cannot read the spool file", path, errno);
        }
        if (r == 0) {
            break;
        }
        got += std::size_t(r);
    }
    return got;
}

void close_and_unlink(int fd, const std::string& path) noexcept {
    if (fd >= 0) {
        ::close(fd);
    }
    if (!path.empty()) {
        ::unlink(path.c_str());
    }
}

} // namespace

std::filesystem::path Spool::directory_for(const std::string& parent, const std::string& slot) {
    std::filesystem::path base;
    if (!parent.empty()) {
        base = parent;
    } else if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') {
        base = tmp;
    } else {
        base = "/tmp";
    }
    return base / ("pgtide-spool-" + slot);
}

Spool::Spool(std::filesystem::path directory, Metrics* metrics, std::size_t buffer_bytes)
    : directory_(std::move(directory)), metrics_(metrics),
      buffer_bytes_(std::max<std::size_t>(buffer_bytes, 64)), worker_("pgtide-spool") {}

Spool::~Spool() {
    for (auto& [xid, f] : files_) {
        close_and_unlink(f->fd, f->path);
    }
}

io::Task<void> Spool::open() {
    const std::string dir = directory_.string();
    auto job = [dir]() {
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        if (ec) {
            throw spool_error("cannot create the spool directory", dir, ec.value());
        }
        std::filesystem::directory_iterator it(dir, ec);
        if (ec) {
            throw spool_error("cannot read the spool directory", dir, ec.value());
        }
        int stale = 0;
        for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
            const std::filesystem::path path = it->path();
            if (path.extension() != kSuffix) {
                continue;
            }
            // A file whose lock nobody holds belongs to a process that is gone.
            const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
            if (fd < 0) {
                continue;
            }
            if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
                ::unlink(path.c_str());
                ++stale;
            }
            ::close(fd);
        }
        return stale;
    };
    const int stale = co_await worker_.run(std::move(job));
    if (stale > 0) {
        io::log_info("deleted spool files of an earlier run",
                     {{"directory", dir}, {"files", std::to_string(stale)}});
    }
}

Spool::File& Spool::file(std::uint32_t xid) {
    const auto it = files_.find(xid);
    if (it == files_.end()) {
        throw InternalError("no spool file for streamed transaction " + std::to_string(xid));
    }
    return *it->second;
}

const Spool::File* Spool::find(std::uint32_t xid) const {
    const auto it = files_.find(xid);
    return it == files_.end() ? nullptr : it->second.get();
}

bool Spool::holds(std::uint32_t xid) const {
    return find(xid) != nullptr;
}

std::string Spool::path_of(std::uint32_t xid) const {
    const File* f = find(xid);
    return f != nullptr ? f->path : std::string();
}

std::uint64_t Spool::size_of(std::uint32_t xid) const {
    const File* f = find(xid);
    return f != nullptr ? f->size : 0;
}

std::vector<std::string> Spool::relations(std::uint32_t xid) const {
    std::vector<std::string> out;
    if (const File* f = find(xid)) {
        for (const auto& r : f->relations) {
            out.push_back(r.bytes);
        }
    }
    return out;
}

io::Task<void> Spool::start_block(std::uint32_t xid, bool first_segment) {
    if (open_block_ != nullptr) {
        throw InternalError("Stream Start of xid " + std::to_string(xid) +
                            " while the block of xid " + std::to_string(open_block_->xid) +
                            " is open");
    }
    if (!first_segment) {
        open_block_ = &file(xid);
        rewind(*open_block_);
        co_return;
    }
    if (holds(xid)) {
        co_await remove(xid);
    }
    auto f = std::make_unique<File>();
    f->xid = xid;
    f->path = (directory_ / (std::to_string(::getpid()) + "-" + std::to_string(xid) + "-" +
                             std::to_string(++sequence_) + kSuffix))
                  .string();
    const std::string path = f->path;
    const std::string dir = directory_.string();
    auto job = [path, dir]() {
        int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno == ENOENT) {
            // Someone removed the directory (a cleaner of old files in /tmp): make it again.
            std::error_code ec;
            std::filesystem::create_directories(dir, ec);
            fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        }
        if (fd < 0) {
            throw spool_error("cannot create the spool file", path, errno);
        }
        // Held until the file is closed: open() of another process leaves it alone.
        if (::flock(fd, LOCK_EX) != 0) {
            const int error = errno;
            close_and_unlink(fd, path);
            throw spool_error("cannot lock the spool file", path, error);
        }
        return fd;
    };
    f->fd = co_await worker_.run(std::move(job));
    File* raw = f.get();
    files_[xid] = std::move(f);
    open_block_ = raw;
}

void Spool::rewind(File& f) {
    f.read_offset = 0;
    f.read_pos = 0;
    f.read_buffer.clear();
    if (f.read_buffer.capacity() > 2 * buffer_bytes_) {
        std::string().swap(f.read_buffer); // one huge message made it grow: give that back
    }
}

void Spool::buffer_record(File& f, std::string_view message) {
    const auto length = static_cast<std::uint32_t>(message.size());
    char header[kLengthBytes];
    std::memcpy(header, &length, kLengthBytes);
    write_buffer_.append(header, kLengthBytes);
    write_buffer_.append(message);
    f.size += kLengthBytes + message.size();
    if (metrics_ != nullptr) {
        metrics_->spooled_bytes += kLengthBytes + message.size();
    }
}

io::Task<void> Spool::append(std::string_view message) {
    if (open_block_ == nullptr) {
        throw InternalError("pgoutput message of a streamed transaction outside a stream block");
    }
    File& f = *open_block_;
    const char type = message.empty() ? '\0' : message[0];
    const std::size_t needed = type == 'R' ? 9 : 5; // type, xid[, relation OID]
    if (message.size() < needed) {
        throw ProtocolError("pgoutput message in a stream block", type, message.size(),
                            "truncated: " + std::to_string(message.size()) +
                                " bytes cannot hold its xid");
    }
    const std::uint64_t offset = f.size;
    const std::uint32_t xid = load_be32(message.substr(1, 4));
    if (xid != f.xid && xid != f.last_subxid && f.subxids.insert(xid).second) {
        // A subtransaction's first change: remember where it starts.
        f.subtransactions.push_back(Subtransaction{xid, offset});
    }
    f.last_subxid = xid;
    if (type == 'R') {
        f.relations.push_back(
            RelationRecord{offset, load_be32(message.substr(5, 4)), std::string(message)});
    }
    buffer_record(f, message);
    if (write_buffer_.size() >= buffer_bytes_) {
        co_await flush(&f);
    }
}

io::Task<void> Spool::flush(File* f) {
    if (write_buffer_.empty()) {
        co_return;
    }
    const int fd = f->fd;
    const char* data = write_buffer_.data();
    const std::size_t n = write_buffer_.size();
    const std::uint64_t offset = f->flushed;
    const std::string path = f->path;
    auto job = [fd, data, n, offset, path]() { write_all(fd, data, n, offset, path); };
    co_await worker_.run(std::move(job));
    f->flushed += n;
    write_buffer_.clear();
    if (write_buffer_.capacity() > 2 * buffer_bytes_) {
        std::string().swap(write_buffer_); // one huge message made it grow: give that back
    }
}

io::Task<void> Spool::stop_block() {
    if (open_block_ == nullptr) {
        co_return;
    }
    File* f = open_block_;
    open_block_ = nullptr;
    co_await flush(f);
}

io::Task<void> Spool::abort(std::uint32_t xid, std::uint32_t subxid) {
    if (!holds(xid)) {
        co_return;
    }
    if (xid == subxid) {
        co_await remove(xid);
        co_return;
    }
    File& f = file(xid);
    if (open_block_ == &f) {
        throw InternalError("Stream Abort inside the stream block of xid " + std::to_string(xid));
    }
    if (!f.subxids.contains(subxid)) {
        co_return; // it spooled no change
    }
    // From the end: the subtransaction aborted is most often a recent one.
    auto found = std::find_if(f.subtransactions.rbegin(), f.subtransactions.rend(),
                              [subxid](const Subtransaction& s) { return s.xid == subxid; });
    const std::uint64_t cut = found->offset;
    // Those that began later are its descendants, aborted with it.
    const auto first_gone = std::prev(found.base());
    for (auto it = first_gone; it != f.subtransactions.end(); ++it) {
        f.subxids.erase(it->xid);
    }
    f.subtransactions.erase(first_gone, f.subtransactions.end());
    f.last_subxid = 0;

    // Relations only the discarded part described stay: later changes may rely on them.
    std::set<std::uint32_t> described;
    std::vector<std::string> kept;
    for (const auto& r : f.relations) {
        if (r.offset < cut) {
            described.insert(r.oid);
        } else if (described.insert(r.oid).second) {
            kept.push_back(r.bytes);
        }
    }
    std::erase_if(f.relations, [cut](const RelationRecord& r) { return r.offset >= cut; });
    const int fd = f.fd;
    const std::string path = f.path;
    auto job = [fd, cut, path]() {
        if (::ftruncate(fd, off_t(cut)) != 0) {
            throw spool_error("cannot truncate the spool file", path, errno);
        }
    };
    co_await worker_.run(std::move(job));
    f.size = cut;
    f.flushed = cut;
    rewind(f);
    for (const std::string& bytes : kept) {
        f.relations.push_back(RelationRecord{f.size, load_be32(bytes.substr(5, 4)), bytes});
        buffer_record(f, bytes);
    }
    co_await flush(&f);
}

io::Task<std::optional<std::string_view>> Spool::next(std::uint32_t xid) {
    File& f = file(xid);
    if (open_block_ == &f) {
        throw InternalError("reading the spool of xid " + std::to_string(xid) +
                            " while its stream block is open");
    }
    if (f.read_pos > 0) {
        f.read_buffer.erase(0, f.read_pos);
        f.read_pos = 0;
    }
    for (;;) {
        if (f.read_buffer.size() >= kLengthBytes) {
            std::uint32_t length = 0;
            std::memcpy(&length, f.read_buffer.data(), kLengthBytes);
            if (f.read_buffer.size() >= kLengthBytes + length) {
                f.read_pos = kLengthBytes + length;
                co_return std::string_view(f.read_buffer).substr(kLengthBytes, length);
            }
        }
        if (f.read_offset >= f.flushed) {
            if (!f.read_buffer.empty()) {
                throw InternalError("the spool file " + f.path + " ends inside a message");
            }
            rewind(f); // the next call starts over
            co_return std::nullopt;
        }
        // At least the rest of the message at hand, and a whole chunk.
        std::size_t want = buffer_bytes_;
        if (f.read_buffer.size() >= kLengthBytes) {
            std::uint32_t length = 0;
            std::memcpy(&length, f.read_buffer.data(), kLengthBytes);
            want = std::max<std::size_t>(want, kLengthBytes + length - f.read_buffer.size());
        }
        want = std::size_t(std::min<std::uint64_t>(want, f.flushed - f.read_offset));
        const std::size_t had = f.read_buffer.size();
        f.read_buffer.resize(had + want);
        const int fd = f.fd;
        char* data = f.read_buffer.data() + had;
        const std::uint64_t offset = f.read_offset;
        const std::string path = f.path;
        auto job = [fd, data, want, offset, path]() {
            return read_some(fd, data, want, offset, path);
        };
        const std::size_t got = co_await worker_.run(std::move(job));
        f.read_buffer.resize(had + got);
        f.read_offset += got;
        if (got < want) {
            throw InternalError("the spool file " + f.path + " is shorter than written (" +
                                std::to_string(f.read_offset) + " of " + std::to_string(f.flushed) +
                                " bytes)");
        }
    }
}

io::Task<void> Spool::remove(std::uint32_t xid) {
    const auto it = files_.find(xid);
    if (it == files_.end()) {
        co_return;
    }
    std::unique_ptr<File> f = std::move(it->second);
    files_.erase(it);
    if (open_block_ == f.get()) {
        open_block_ = nullptr;
        write_buffer_.clear();
    }
    const int fd = f->fd;
    const std::string path = f->path;
    auto job = [fd, path]() { close_and_unlink(fd, path); };
    co_await worker_.run(std::move(job));
}

io::Task<void> Spool::discard(std::uint32_t xid) {
    co_await remove(xid);
}

io::Task<void> Spool::discard_all() {
    while (!files_.empty()) {
        co_await remove(files_.begin()->first);
    }
}

io::Task<void> Spool::close() {
    co_await discard_all();
    const std::string dir = directory_.string();
    auto job = [dir]() {
        ::rmdir(dir.c_str()); // fails while another process has files there: fine
    };
    co_await worker_.run(std::move(job));
}

} // namespace pgtide::replicate
