// TcpProxy: one poll() thread forwarding loopback TCP connections, with faults on command.
#include "tests/support/tcp_proxy.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <stdexcept>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace pgtide::testing {

namespace {

using Clock = std::chrono::steady_clock;

// Bytes held per direction before the proxy stops reading from the sender (backpressure).
constexpr std::size_t kMaxQueueBytes = 4 << 20;
constexpr std::size_t kReadSize = 64 << 10;

std::runtime_error sys_error(const std::string& what) {
    return std::runtime_error("TcpProxy: " + what + ": " + std::strerror(errno));
}

void set_nonblocking(int fd) {
    const int flags = ::fcntl(fd, F_GETFL, 0);
    ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void close_fd(int& fd, bool reset) {
    if (fd < 0) {
        return;
    }
    if (reset) {
        linger l{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    ::close(fd);
    fd = -1;
}

} // namespace

struct TcpProxy::Conn {
    struct Chunk {
        Clock::time_point due;
        std::string data;
        std::size_t off = 0;
    };
    // Bytes read from one side, on their way to the other.
    struct Direction {
        std::deque<Chunk> chunks;
        std::size_t bytes = 0;
        bool eof = false;     // the sender closed its side
        bool shut = false;    // we shut down writing toward the receiver
        bool dropped = false; // half-closed: what the sender sends is discarded

        bool due_now(Clock::time_point now) const {
            return !chunks.empty() && chunks.front().due <= now;
        }
    };

    int client = -1;
    int server = -1;
    Direction to_server; // read from client
    Direction to_client; // read from server
    bool closed = false;
};

TcpProxy::TcpProxy(std::string target_host, int target_port)
    : target_host_(std::move(target_host)), target_port_(target_port) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(target_host_.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
        throw std::runtime_error("TcpProxy: cannot resolve " + target_host_);
    }
    target_addr_ = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr;
    ::freeaddrinfo(res);

    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) {
        throw sys_error("socket");
    }
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 64) != 0) {
        const auto e = sys_error("bind/listen on 127.0.0.1");
        ::close(listen_fd_);
        throw e;
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    set_nonblocking(listen_fd_);
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) {
        const auto e = sys_error("eventfd");
        ::close(listen_fd_);
        throw e;
    }
    thread_ = std::thread([this] { loop(); });
}

TcpProxy::~TcpProxy() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    wake();
    thread_.join();
    for (auto& c : conns_) {
        close_conn(*c, true);
    }
    ::close(listen_fd_);
    ::close(wake_fd_);
}

void TcpProxy::wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
}

void TcpProxy::command(std::function<void()> fn) {
    std::unique_lock lock(mu_);
    const std::uint64_t seq = ++next_seq_;
    pending_.push_back(Command{seq, std::move(fn)});
    lock.unlock();
    wake();
    lock.lock();
    done_cv_.wait(lock, [&] { return done_seq_ >= seq || stop_; });
}

void TcpProxy::delay(std::chrono::milliseconds ms) {
    command([this, ms] { delay_ = ms; });
}

void TcpProxy::stall() {
    command([this] { stalled_ = true; });
}

void TcpProxy::resume() {
    command([this] { stalled_ = false; });
}

int TcpProxy::cut_all() {
    int n = 0;
    command([this, &n] {
        for (auto& c : conns_) {
            if (!c->closed) {
                close_conn(*c, true);
                ++n;
            }
        }
    });
    return n;
}

int TcpProxy::half_close_all() {
    int n = 0;
    command([this, &n] {
        for (auto& c : conns_) {
            if (c->closed || c->to_client.dropped) {
                continue;
            }
            ::shutdown(c->client, SHUT_WR);
            c->to_client.shut = true;
            c->to_client.dropped = true;
            c->to_client.chunks.clear();
            c->to_client.bytes = 0;
            ++n;
        }
    });
    return n;
}

void TcpProxy::refuse(bool on) {
    command([this, on] { refusing_ = on; });
}

int TcpProxy::connections() const {
    std::lock_guard lock(mu_);
    return live_;
}

int TcpProxy::accepted() const {
    std::lock_guard lock(mu_);
    return accepted_;
}

void TcpProxy::close_conn(Conn& c, bool reset) {
    close_fd(c.client, reset);
    close_fd(c.server, reset);
    c.closed = true;
}

void TcpProxy::accept_one() {
    for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            return; // EAGAIN, or a client that gave up before we accepted it
        }
        if (refusing_) {
            ::close(fd);
            continue;
        }
        const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = target_addr_;
        addr.sin_port = htons(static_cast<std::uint16_t>(target_port_));
        // Blocking connect on loopback: the target answers at once or refuses at once.
        if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
            if (server >= 0) {
                ::close(server);
            }
            ::close(fd);
            continue;
        }
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        set_nonblocking(fd);
        set_nonblocking(server);
        auto c = std::make_unique<Conn>();
        c->client = fd;
        c->server = server;
        conns_.push_back(std::move(c));
        std::lock_guard lock(mu_);
        ++accepted_;
    }
}

// Writes the due bytes of one direction; shuts the receiver's write side once the sender has
// closed and everything is delivered.
void TcpProxy::flush(Conn& c, bool to_server) {
    if (c.closed) {
        return;
    }
    Conn::Direction& d = to_server ? c.to_server : c.to_client;
    const int fd = to_server ? c.server : c.client;
    const auto now = Clock::now();
    while (!d.shut && d.due_now(now)) {
        Conn::Chunk& chunk = d.chunks.front();
        const ssize_t n =
            ::send(fd, chunk.data.data() + chunk.off, chunk.data.size() - chunk.off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                return;
            }
            close_conn(c, true); // the receiver is gone: tear both sides down
            return;
        }
        chunk.off += static_cast<std::size_t>(n);
        d.bytes -= static_cast<std::size_t>(n);
        if (chunk.off == chunk.data.size()) {
            d.chunks.pop_front();
        }
    }
    if (d.eof && d.chunks.empty() && !d.shut) {
        ::shutdown(fd, SHUT_WR);
        d.shut = true;
    }
}

// Reads what one side has for the other.
void TcpProxy::pump(Conn& c, bool client_side, short revents) {
    if (c.closed) {
        return;
    }
    Conn::Direction& d = client_side ? c.to_server : c.to_client;
    const int fd = client_side ? c.client : c.server;
    if ((revents & (POLLIN | POLLHUP | POLLERR)) && !d.eof) {
        std::string buf(kReadSize, '\0');
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
        if (n > 0) {
            if (!d.dropped) {
                buf.resize(static_cast<std::size_t>(n));
                d.bytes += buf.size();
                d.chunks.push_back(Conn::Chunk{Clock::now() + delay_, std::move(buf), 0});
            }
        } else if (n == 0) {
            d.eof = true;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            close_conn(c, true); // reset by the peer: pass the reset on
            return;
        }
    } else if ((revents & (POLLHUP | POLLERR)) && d.eof) {
        // The peer can neither send nor receive: deliver what we can the other way, then close.
        flush(c, client_side);
        close_conn(c, false);
    }
}

void TcpProxy::loop() {
    std::vector<pollfd> fds;
    std::vector<Conn*> polled;
    for (;;) {
        std::vector<Command> todo;
        {
            std::lock_guard lock(mu_);
            if (stop_) {
                break;
            }
            todo.swap(pending_);
        }
        std::uint64_t last = 0;
        for (auto& cmd : todo) {
            cmd.run();
            last = cmd.seq;
        }
        // Forget connections that are over.
        conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                                    [](const std::unique_ptr<Conn>& c) {
                                        if (!c->closed && c->to_server.shut && c->to_client.shut &&
                                            c->to_client.eof) {
                                            close_fd(c->client, false);
                                            close_fd(c->server, false);
                                            c->closed = true;
                                        }
                                        return c->closed;
                                    }),
                     conns_.end());
        {
            std::lock_guard lock(mu_);
            live_ = static_cast<int>(conns_.size());
            if (last != 0) {
                done_seq_ = last;
                done_cv_.notify_all();
            }
        }

        const auto now = Clock::now();
        int timeout_ms = -1;
        auto consider = [&](const Conn::Direction& d) {
            if (!d.chunks.empty() && !d.shut && d.chunks.front().due > now) {
                const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
                                      d.chunks.front().due - now)
                                      .count() +
                                  1;
                timeout_ms = timeout_ms < 0 ? int(wait) : std::min(timeout_ms, int(wait));
            }
        };
        fds.clear();
        polled.clear();
        fds.push_back(pollfd{wake_fd_, POLLIN, 0});
        fds.push_back(pollfd{listen_fd_, POLLIN, 0});
        for (auto& c : conns_) {
            pollfd client{-1, 0, 0};
            pollfd server{-1, 0, 0};
            if (!stalled_) {
                client.fd = c->client;
                server.fd = c->server;
                if (!c->to_server.eof && c->to_server.bytes < kMaxQueueBytes) {
                    client.events |= POLLIN;
                }
                if (!c->to_client.eof && c->to_client.bytes < kMaxQueueBytes) {
                    server.events |= POLLIN;
                }
                if (!c->to_client.shut && c->to_client.due_now(now)) {
                    client.events |= POLLOUT;
                }
                if (!c->to_server.shut && c->to_server.due_now(now)) {
                    server.events |= POLLOUT;
                }
                consider(c->to_server);
                consider(c->to_client);
            }
            fds.push_back(client);
            fds.push_back(server);
            polled.push_back(c.get());
        }
        const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
        if (ready < 0 && errno != EINTR) {
            break;
        }
        if (fds[0].revents & POLLIN) {
            std::uint64_t v = 0;
            [[maybe_unused]] const auto n = ::read(wake_fd_, &v, sizeof v);
        }
        if (fds[1].revents & POLLIN) {
            accept_one();
        }
        if (stalled_) {
            continue;
        }
        for (std::size_t i = 0; i < polled.size(); ++i) {
            Conn& c = *polled[i];
            pump(c, true, fds[2 + 2 * i].revents);
            pump(c, false, fds[3 + 2 * i].revents);
            flush(c, true);
            flush(c, false);
            // A half-closed connection's server side: once the server has closed too, done.
            if (!c.closed && c.to_client.dropped && c.to_client.eof && c.to_server.shut) {
                close_conn(c, false);
            }
        }
    }
    std::lock_guard lock(mu_);
    done_seq_ = next_seq_;
    done_cv_.notify_all();
}

} // namespace pgtide::testing
