// HttpServer: a tiny HTTP/1.x server on the event loop that answers GET requests for fixed paths.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "io/cancel.hpp"
#include "io/task.hpp"

namespace pgtide::io {

struct HttpServerOptions {
    /// Request line and headers together; a longer request is answered 431 and closed.
    std::size_t max_request_bytes = 8192;
    /// From accept to the last byte of the response; a slower client is dropped.
    std::chrono::milliseconds timeout{5000};
    /// Connections served at once; further ones are closed as soon as they are accepted.
    std::size_t max_connections = 16;
};

/// Serves `GET <path>` with the body its route produces (200), any other path with 404, any
/// other method with 405; one request per connection (`Connection: close`). Every socket is
/// nonblocking and waited for with wait_fd: a slow client never blocks the loop, and each
/// connection runs in its own coroutine with a deadline. Loop thread only.
class HttpServer {
public:
    /// Binds and listens on "HOST:PORT" (HOST may be a name, an IPv4 address, or an IPv6
    /// address in brackets; port 0 picks a free port). Resolving a name may block briefly: do
    /// it at startup. Throws std::system_error (bind, listen) or std::runtime_error (the
    /// address does not resolve); the message names the address.
    explicit HttpServer(const std::string& address, HttpServerOptions options = {});
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    /// Answers GET `path` (the query string is ignored) with `content_type` and body().
    /// body runs on the loop thread for each request.
    void route(std::string path, std::string content_type, std::function<std::string()> body);

    /// Accepts and serves connections until stop(); then cancels the open connections and
    /// waits for them to end, so no frame outlives the call. Suspends. An unexpected failure of
    /// the listening socket is logged and ends serving; it does not throw.
    Task<void> serve();
    /// Makes serve() return (idempotent; safe before serve()).
    void stop() { stop_.cancel(); }

    /// The bound port (useful after port 0).
    std::uint16_t port() const noexcept { return port_; }
    const std::string& address() const noexcept { return address_; }

private:
    struct Route {
        std::string content_type;
        std::function<std::string()> body;
    };
    struct Socket;
    static Task<void> serve_connection(HttpServer* server, Socket socket, CancelToken token);
    std::string respond(const std::string& request) const;

    std::string address_;
    HttpServerOptions options_;
    int fd_ = -1;
    std::uint16_t port_ = 0;
    std::map<std::string, Route, std::less<>> routes_;
    CancelSource stop_;
};

} // namespace pgtide::io
