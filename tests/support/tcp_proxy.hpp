// TcpProxy: a loopback TCP proxy on its own thread inside the test process, between a client
// (pgtide) and a server (PostgreSQL), that can add latency, stall, cut, half-close and refuse.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pgtide::testing {

/// Listens on 127.0.0.1 on a free port and forwards every accepted connection to
/// target_host:target_port (an IPv4 address or a name resolved once, at construction). One
/// thread polls every socket; the commands below are carried out by that thread and return once
/// they have taken effect. Throws std::runtime_error when it cannot listen or resolve.
class TcpProxy {
public:
    TcpProxy(std::string target_host, int target_port);
    ~TcpProxy();
    TcpProxy(const TcpProxy&) = delete;
    TcpProxy& operator=(const TcpProxy&) = delete;

    /// The port it listens on (127.0.0.1).
    int port() const { return port_; }

    /// Holds every byte read from now on for `ms` before passing it on (both directions);
    /// 0 ends the added latency (bytes already held keep their deadline).
    void delay(std::chrono::milliseconds ms);
    /// Stops reading and writing on every connection, old and new, in both directions; the
    /// sockets stay open, so the peers only see silence (and TCP backpressure).
    void stall();
    /// Ends stall(): held bytes flow again.
    void resume();
    /// Resets (RST, SO_LINGER 0) both sides of every live connection; returns how many there were.
    int cut_all();
    /// shutdown(SHUT_WR) toward the client of every live connection: the client reads EOF; bytes
    /// from the server are dropped from then on, bytes from the client still reach the server
    /// until the client closes. Returns how many connections it half-closed.
    int half_close_all();
    /// While true, connections are accepted and closed at once, without reaching the target.
    void refuse(bool on);
    /// Live connections (a client and its server socket both open).
    int connections() const;
    /// Connections accepted and forwarded since construction (refused ones not counted).
    int accepted() const;

private:
    struct Conn;
    struct Command {
        std::uint64_t seq;
        std::function<void()> run;
    };

    void loop();
    // Runs `fn` on the proxy thread and waits until it has run.
    void command(std::function<void()> fn);
    void wake();
    void accept_one();
    void pump(Conn& c, bool client_side, short revents);
    void flush(Conn& c, bool to_server);
    void close_conn(Conn& c, bool reset);

    std::string target_host_;
    int target_port_;
    std::uint32_t target_addr_ = 0; // network order
    int listen_fd_ = -1;
    int wake_fd_ = -1; // eventfd
    int port_ = 0;

    // Owned by the proxy thread.
    std::vector<std::unique_ptr<Conn>> conns_;
    std::chrono::milliseconds delay_{0};
    bool stalled_ = false;
    bool refusing_ = false;

    mutable std::mutex mu_;
    std::condition_variable done_cv_;
    std::vector<Command> pending_;
    std::uint64_t next_seq_ = 0;
    std::uint64_t done_seq_ = 0;
    int live_ = 0; // mirrors conns_.size(), readable from any thread
    int accepted_ = 0;
    bool stop_ = false;

    std::thread thread_;
};

} // namespace pgtide::testing
