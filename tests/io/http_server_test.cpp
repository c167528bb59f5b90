// HttpServer on a real loop: bodies, 404/405, oversize requests, slow clients, stop, busy ports.
#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/event_loop.hpp"
#include "io/http_server.hpp"
#include "io/sync_wait.hpp"
#include "io/task.hpp"
#include "io/timer.hpp"
#include "io/wait_fd.hpp"
#include "io/when_all.hpp"

namespace pgtide::io {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A blocking client socket connected to 127.0.0.1:port (used from a thread of its own).
int connect_to(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
    }
    return fd;
}

void send_all(int fd, const std::string& data) {
    std::size_t sent = 0;
    while (sent < data.size()) {
        const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) {
            throw std::runtime_error(std::string("send: ") + std::strerror(errno));
        }
        sent += std::size_t(n);
    }
}

std::string read_to_eof(int fd) {
    std::string out;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            return out;
        }
        out.append(buf, std::size_t(n));
    }
}

std::string round_trip(std::uint16_t port, const std::string& request) {
    const int fd = connect_to(port);
    send_all(fd, request);
    std::string out = read_to_eof(fd);
    ::close(fd);
    return out;
}

std::string get(std::uint16_t port, const std::string& path) {
    return round_trip(port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n");
}

struct Pipe {
    int rd = -1;
    int wr = -1;
    Pipe() {
        int fds[2];
        if (::pipe(fds) != 0) {
            throw std::runtime_error("pipe");
        }
        rd = fds[0];
        wr = fds[1];
    }
    ~Pipe() {
        ::close(rd);
        ::close(wr);
    }
};

Task<void> stop_when_readable(HttpServer* server, int fd) {
    co_await wait_fd(fd, POLLIN);
    server->stop();
}

// Serves on `loop` while `client` runs on a thread of its own; stops the server when it is done.
void serve_while(EventLoop& loop, HttpServer& server, const std::function<void()>& client) {
    Pipe done;
    std::thread t([&] {
        client();
        (void)!::write(done.wr, "x", 1);
    });
    try {
        sync_wait(loop, when_all(server.serve(), stop_when_readable(&server, done.rd)));
    } catch (...) {
        t.join();
        throw;
    }
    t.join();
}

TEST(HttpServer, ServesTheBodyOfItsPath) {
    EventLoop loop;
    HttpServer server("127.0.0.1:0");
    int calls = 0;
    server.route("/metrics", "text/plain; version=0.0.4", [&calls] {
        ++calls;
        return std::string("pgtide_up 1\n");
    });
    ASSERT_NE(server.port(), 0);
    std::string a;
    std::string b;
    serve_while(loop, server, [&] {
        a = get(server.port(), "/metrics");
        b = get(server.port(), "/metrics?x=1");
    });
    EXPECT_EQ(a, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                 "Content-Length: 12\r\nConnection: close\r\n\r\npgtide_up 1\n");
    EXPECT_EQ(b, a);
    EXPECT_EQ(calls, 2);
}

TEST(HttpServer, OtherPathsAre404AndOtherMethods405) {
    EventLoop loop;
    HttpServer server("127.0.0.1:0");
    server.route("/metrics", "text/plain", [] { return std::string("x"); });
    std::string missing;
    std::string post;
    std::string garbage;
    serve_while(loop, server, [&] {
        missing = get(server.port(), "/");
        post = round_trip(server.port(), "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        garbage = round_trip(server.port(), "hello\r\n\r\n");
    });
    EXPECT_EQ(missing.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << missing;
    EXPECT_EQ(post.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << post;
    EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos) << post;
    EXPECT_EQ(garbage.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << garbage;
}

TEST(HttpServer, OversizeRequestIs431AndClosed) {
    EventLoop loop;
    HttpServer server("127.0.0.1:0");
    server.route("/metrics", "text/plain", [] { return std::string("x"); });
    std::string answer;
    serve_while(loop, server, [&] {
        answer =
            round_trip(server.port(),
                       "GET /metrics HTTP/1.1\r\nX-Filler: " + std::string(9000, 'a') + "\r\n\r\n");
    });
    EXPECT_EQ(answer.rfind("HTTP/1.1 431 Request Header Fields Too Large\r\n", 0), 0u) << answer;
}

Task<void> tick_until(int* ticks, const bool* done) {
    while (!*done) {
        co_await sleep_for(5ms);
        ++*ticks;
    }
}

Task<void> stop_and_flag(HttpServer* server, int fd, bool* done) {
    co_await wait_fd(fd, POLLIN);
    *done = true;
    server->stop();
}

TEST(HttpServer, SlowClientBlocksNeitherOtherClientsNorTheLoop) {
    EventLoop loop;
    HttpServerOptions options;
    options.timeout = 400ms;
    HttpServer server("127.0.0.1:0", options);
    server.route("/metrics", "text/plain", [] { return std::string("fast"); });
    int ticks = 0;
    bool done = false;
    std::string fast;
    std::string slow_answer;
    Clock::duration slow_lasted{};
    Pipe finished;
    std::thread client([&] {
        const auto start = Clock::now();
        const int slow = connect_to(server.port());
        send_all(slow, "GET /metr"); // and nothing more
        fast = get(server.port(), "/metrics");
        slow_answer = read_to_eof(slow); // ends when the server gives up on it
        slow_lasted = Clock::now() - start;
        ::close(slow);
        (void)!::write(finished.wr, "x", 1);
    });
    sync_wait(loop, when_all(server.serve(), tick_until(&ticks, &done),
                             stop_and_flag(&server, finished.rd, &done)));
    client.join();
    EXPECT_NE(fast.find("\r\n\r\nfast"), std::string::npos) << fast;
    EXPECT_EQ(slow_answer, "");
    EXPECT_GE(slow_lasted, 400ms);
    EXPECT_LT(slow_lasted, 5s);
    EXPECT_GE(ticks, 20); // the loop kept running other coroutines while the slow client stalled
}

TEST(HttpServer, StopEndsOpenConnectionsAtOnce) {
    EventLoop loop;
    HttpServerOptions options;
    options.timeout = 60s;
    HttpServer server("127.0.0.1:0", options);
    server.route("/metrics", "text/plain", [] { return std::string("x"); });
    std::string idle_answer;
    const auto start = Clock::now();
    Pipe connected;
    std::thread client([&] {
        const int idle = connect_to(server.port());
        send_all(idle, "GET");
        // The server has the connection once it answers another request after it.
        (void)get(server.port(), "/metrics");
        (void)!::write(connected.wr, "x", 1);
        idle_answer = read_to_eof(idle);
        ::close(idle);
    });
    sync_wait(loop, when_all(server.serve(), stop_when_readable(&server, connected.rd)));
    client.join();
    EXPECT_EQ(idle_answer, "");
    EXPECT_LT(Clock::now() - start, 10s);
}

TEST(HttpServer, BusyPortIsAnErrorNamingTheAddress) {
    HttpServer first("127.0.0.1:0");
    const std::string address = "127.0.0.1:" + std::to_string(first.port());
    try {
        HttpServer second(address);
        FAIL() << "bound twice";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), EADDRINUSE);
        EXPECT_EQ(std::string(e.what()), "cannot listen on " + address + ": " +
                                             std::generic_category().message(EADDRINUSE));
    }
}

} // namespace
} // namespace pgtide::io
