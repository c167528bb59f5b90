// HttpServer: nonblocking accept/recv/send after wait_fd readiness, one coroutine per connection.
#include "io/http_server.hpp"

#include <algorithm>
#include <cerrno>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/async_scope.hpp"
#include "io/log.hpp"
#include "io/timer.hpp"
#include "io/wait_fd.hpp"

namespace pgtide::io {

/// An accepted connection's fd, closed with its owner (also when the task never starts).
struct HttpServer::Socket {
    int fd = -1;
    explicit Socket(int f) noexcept : fd(f) {}
    Socket(Socket&& other) noexcept : fd(std::exchange(other.fd, -1)) {}
    Socket& operator=(Socket&&) = delete;
    ~Socket() {
        if (fd >= 0) {
            ::close(fd);
        }
    }
};

namespace {

using Clock = std::chrono::steady_clock;

const char* reason(int status) {
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 431:
        return "Request Header Fields Too Large";
    default:
        return "Error";
    }
}

std::string response(int status, const std::string& content_type, const std::string& body,
                     bool head = false, const char* extra_header = nullptr) {
    std::string r = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n";
    r += "Content-Type: " + content_type + "\r\n";
    r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    if (extra_header != nullptr) {
        r += extra_header;
        r += "\r\n";
    }
    r += "Connection: close\r\n\r\n";
    if (!head) {
        r += body;
    }
    return r;
}

std::string plain(int status, const std::string& text, bool head = false,
                  const char* extra_header = nullptr) {
    return response(status, "text/plain; charset=utf-8", text + "\n", head, extra_header);
}

// The end of the header block ("\r\n\r\n", or "\n\n" from lenient clients), or npos.
std::size_t header_end(const std::string& request) {
    const std::size_t crlf = request.find("\r\n\r\n");
    const std::size_t lf = request.find("\n\n");
    return std::min(crlf, lf);
}

} // namespace

HttpServer::HttpServer(const std::string& address, HttpServerOptions options)
    : address_(address), options_(options) {
    const std::size_t colon = address.rfind(':');
    if (colon == std::string::npos) {
        throw std::runtime_error("cannot listen on " + address + ": expected HOST:PORT");
    }
    std::string host = address.substr(0, colon);
    const std::string port = address.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.empty() || host == "*" ? nullptr : host.c_str(), port.c_str(),
                                 &hints, &found);
    if (rc != 0) {
        throw std::runtime_error("cannot listen on " + address + ": " + ::gai_strerror(rc));
    }
    int error = EADDRNOTAVAIL;
    for (addrinfo* ai = found; ai != nullptr && fd_ < 0; ai = ai->ai_next) {
        const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            error = errno;
            continue;
        }
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
            error = errno;
            ::close(fd);
            continue;
        }
        fd_ = fd;
    }
    ::freeaddrinfo(found);
    if (fd_ < 0) {
        throw std::system_error(error, std::generic_category(), "cannot listen on " + address);
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
        if (bound.ss_family == AF_INET) {
            port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
        } else if (bound.ss_family == AF_INET6) {
            port_ = ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
        }
    }
}

HttpServer::~HttpServer() {
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

void HttpServer::route(std::string path, std::string content_type,
                       std::function<std::string()> body) {
    routes_.insert_or_assign(std::move(path), Route{std::move(content_type), std::move(body)});
}

std::string HttpServer::respond(const std::string& request) const {
    const std::string line = request.substr(0, request.find_first_of("\r\n"));
    const std::size_t sp1 = line.find(' ');
    const std::size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
        return plain(400, "bad request");
    }
    const std::string method = line.substr(0, sp1);
    const std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const bool head = method == "HEAD";
    if (method != "GET" && !head) {
        return plain(405, "only GET is served", false, "Allow: GET, HEAD");
    }
    const auto it = routes_.find(std::string_view(target).substr(0, target.find('?')));
    if (it == routes_.end()) {
        return plain(404, "not found", head);
    }
    return response(200, it->second.content_type, it->second.body(), head);
}

Task<void> HttpServer::serve_connection(HttpServer* server, Socket socket, CancelToken token) {
    const auto deadline = Clock::now() + server->options_.timeout;
    const std::size_t limit = server->options_.max_request_bytes;
    const int fd = socket.fd;
    try {
        // Read the request line and headers, within the size limit and the deadline.
        std::string request;
        std::string answer;
        char buf[2048];
        while (answer.empty()) {
            const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
                request.append(buf, std::size_t(n));
                const std::size_t end = header_end(request);
                if (request.size() > limit && (end == std::string::npos || end + 2 > limit)) {
                    answer = plain(431, "request larger than " + std::to_string(limit) + " bytes");
                } else if (end != std::string::npos) {
                    answer = server->respond(request);
                }
                continue;
            }
            if (n == 0) {
                co_return; // the client left before a whole request
            }
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                co_return;
            }
            if (co_await wait_fd(fd, POLLIN, deadline, token) == 0) {
                co_return; // too slow
            }
        }
        std::size_t sent = 0;
        while (sent < answer.size()) {
            const ssize_t n =
                ::send(fd, answer.data() + sent, answer.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n >= 0) {
                sent += std::size_t(n);
                continue;
            }
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                co_return;
            }
            if (co_await wait_fd(fd, POLLOUT, deadline, token) == 0) {
                co_return;
            }
        }
        // Closing with unread input would reset the connection and could discard the answer
        // at the client: end our side, then drain what the client still sends (bounded).
        ::shutdown(fd, SHUT_WR);
        const auto drain_until = std::min(deadline, Clock::now() + std::chrono::seconds(1));
        for (std::size_t drained = 0; drained < 65536;) {
            const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
                drained += std::size_t(n);
                continue;
            }
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                break;
            }
            if (errno == EINTR) {
                continue;
            }
            if (co_await wait_fd(fd, POLLIN, drain_until, token) == 0) {
                break;
            }
        }
    } catch (const Cancelled&) {
    } catch (const std::exception& e) {
        log_debug("http connection failed", {{"error", e.what()}});
    }
}

Task<void> HttpServer::serve() {
    AsyncScope connections;
    const CancelToken token = stop_.token();
    std::optional<std::string> failure;
    bool out_of_resources = false;
    try {
        for (;;) {
            if (out_of_resources) {
                out_of_resources = false;
                co_await sleep_for(std::chrono::milliseconds(100), token);
            }
            co_await wait_fd(fd_, POLLIN, std::nullopt, token);
            for (;;) {
                const int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (c < 0) {
                    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) {
                        continue;
                    }
                    if (errno == EAGAIN || errno == EWOULDBLOCK) {
                        break;
                    }
                    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                        out_of_resources = true; // retry later rather than spin
                        break;
                    }
                    throw std::system_error(errno, std::generic_category(), "accept");
                }
                Socket socket(c);
                if (connections.active() >= options_.max_connections) {
                    continue; // busy: the socket closes here
                }
                connections.spawn(serve_connection(this, std::move(socket), token));
            }
        }
    } catch (const Cancelled&) {
    } catch (const std::exception& e) {
        failure = e.what();
    }
    if (failure) {
        log_warn("stopped serving HTTP", {{"address", address_}, {"error", *failure}});
    }
    stop_.cancel(); // ends the open connections' waits
    co_await connections.join();
}

} // namespace pgtide::io
