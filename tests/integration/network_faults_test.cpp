// Network faults between pgtide and PostgreSQL, injected by a loopback TCP proxy in the test
// process (tests/support/tcp_proxy.*): cuts while streaming and during the snapshot, a stall, a
// half-close, and a source unreachable past source.reconnect_deadline. pgtide talks to the
// source through the proxy; the test's own SQL uses the direct socket. Each ends with the
// destination compared row by row with the source.
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/replication_test.hpp"
#include "tests/support/tcp_proxy.hpp"

namespace pgtide::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int occurrences(const std::string& text, const std::string& needle) {
    int n = 0;
    for (auto pos = text.find(needle); pos != std::string::npos;
         pos = text.find(needle, pos + needle.size())) {
        ++n;
    }
    return n;
}

class NetworkFaults : public ReplicationTest {
protected:
    void SetUp() override {
        ReplicationTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        proxy_ = std::make_unique<TcpProxy>("127.0.0.1", pg().port());
    }

    void TearDown() override {
        proxy_.reset();
        ReplicationTest::TearDown();
    }

    TcpProxy& proxy() { return *proxy_; }

    /// PgServer::tcp_dsn for this test's database, pointed at the proxy.
    std::string proxy_dsn() const {
        std::string d = pg().tcp_dsn(dbname());
        const std::string direct = "host=localhost port=" + std::to_string(pg().port());
        const auto at = d.find(direct);
        EXPECT_NE(at, std::string::npos) << d;
        if (at != std::string::npos) {
            d.replace(at, direct.size(), "host=127.0.0.1 port=" + std::to_string(proxy_->port()));
        }
        return d;
    }

    /// run_args with --source through the proxy.
    std::vector<std::string> proxied_args(bool once) const {
        auto a = run_args(once);
        for (std::size_t i = 0; i + 1 < a.size(); ++i) {
            if (a[i] == "--source") {
                a[i + 1] = proxy_dsn();
            }
        }
        return a;
    }

    /// A config file whose source goes through the proxy.
    std::string config(const std::string& extra_source, const std::string& extra = "") const {
        const auto path = (dir_ / "pgtide.toml").string();
        std::ofstream f(path);
        f << "[source]\ndsn = \"" << proxy_dsn() << "\"\npublications = [\"pub\"]\nslot = \""
          << slot() << "\"\n"
          << extra_source << "\n[destination]\nurl = \"sqlite:" << sqlite_path_ << "\"\n"
          << extra;
        return path;
    }

    /// Bounded wait (60 s) until the destination's count and sum of t.v equal the source's.
    bool wait_for_t() const {
        const std::string sql = "SELECT count(*) || ':' || coalesce(sum(v), 0) FROM t";
        return wait_for_dest(sql, query_value(sql));
    }

    void expect_t_equal() const {
        expect_equal("SELECT id::text, v::text, note FROM t ORDER BY t.id",
                     "SELECT id, v, note FROM t ORDER BY id");
    }

    /// Starts streaming t through the proxy and waits until pgtide is in phase streaming with
    /// the source's rows.
    void wait_streaming(PgtideProcess& pgtide) {
        ASSERT_TRUE(wait_for_dest("SELECT phase FROM _pgtide_checkpoint", "streaming"))
            << pgtide.stderr_text();
        ASSERT_TRUE(wait_for_t()) << pgtide.stderr_text();
        ASSERT_GE(proxy().connections(), 1);
    }

    /// Bounded wait until pgtide has logged `n` reconnects and holds at least two source
    /// sessions through the proxy again (replication and catalog); false at once if it exits.
    bool wait_reconnected(PgtideProcess& pgtide, int n) {
        bool exited = false;
        wait_for([&] {
            exited = !pgtide.running();
            return exited || (occurrences(pgtide.stderr_text(), "reconnecting") >= n &&
                              proxy().connections() >= 2);
        });
        return !exited && occurrences(pgtide.stderr_text(), "reconnecting") >= n &&
               proxy().connections() >= 2;
    }

    std::unique_ptr<TcpProxy> proxy_;
};

// The proxy itself: forwarding, added latency, refusal, and the connection count.
TEST_F(NetworkFaults, ProxyForwardsDelaysAndRefuses) {
    const std::string d = proxy_dsn();
    PGconn* conn = PQconnectdb(d.c_str());
    ASSERT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
    EXPECT_TRUE(wait_for([&] { return proxy().connections() == 1; }));
    auto round_trip = [&] {
        const auto t0 = Clock::now();
        PGresult* r = PQexec(conn, "SELECT 41 + 1");
        EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(conn);
        EXPECT_EQ(std::string(PQgetvalue(r, 0, 0)), "42");
        PQclear(r);
        return Clock::now() - t0;
    };
    round_trip();
    proxy().delay(150ms);
    EXPECT_GE(round_trip(), 300ms); // 150 ms each way
    proxy().delay(0ms);
    EXPECT_LT(round_trip(), 150ms);
    EXPECT_EQ(proxy().cut_all(), 1);
    EXPECT_EQ(proxy().connections(), 0);
    PGresult* r = PQexec(conn, "SELECT 1");
    EXPECT_NE(PQresultStatus(r), PGRES_TUPLES_OK);
    PQclear(r);
    PQfinish(conn);

    proxy().refuse(true);
    conn = PQconnectdb(d.c_str());
    EXPECT_EQ(PQstatus(conn), CONNECTION_BAD);
    PQfinish(conn);
    EXPECT_EQ(proxy().accepted(), 1);
    proxy().refuse(false);
    conn = PQconnectdb(d.c_str());
    EXPECT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
    PQfinish(conn);
    EXPECT_EQ(proxy().accepted(), 2);
    EXPECT_TRUE(wait_for([&] { return proxy().connections() == 0; }));
}

// (1) Three cuts at different points of a workload: early in a stream of small transactions,
// late in it, and while one large transaction is on its way under added latency.
//
// Broken on purpose once, then reverted: is_connection_loss (replicate/coordinator.cpp) without
// `pe.connection_lost ||`: pgtide stopped at the first cut with the error "reading from the
// server: server closed the connection unexpectedly"; `wait_reconnected(pgtide, cuts)` failed.
// (Resuming from the last WAL position received, `max(checkpoint, metrics_.source_wal_end)`,
// was not caught: when the stream ends the applier first commits every complete transaction it
// holds, so the two positions differ by at most a transaction in flight, sent again whole.)
TEST_F(NetworkFaults, CutsWhileStreamingReconnectAndLoseNothing) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v bigint, note text)");
    exec("INSERT INTO t SELECT g, g, 'snap' FROM generate_series(1, 100) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    PgtideProcess pgtide(proxied_args(false));
    wait_streaming(pgtide);
    if (HasFatalFailure()) {
        return;
    }

    // 300 transactions of 10 inserts, an update and a delete each.
    std::mutex error_mu;
    std::string workload_error;
    std::thread workload([&] {
        try {
            for (int i = 0; i < 300; ++i) {
                const int base = 1000 + i * 10;
                exec("BEGIN; INSERT INTO t SELECT g, g % 97, 'w" + std::to_string(i) +
                     "' FROM generate_series(" + std::to_string(base) + ", " +
                     std::to_string(base + 9) +
                     ") g; UPDATE t SET v = v + 1 WHERE id % 13 = " + std::to_string(i % 13) +
                     "; DELETE FROM t WHERE id = " + std::to_string(base - 5) + "; COMMIT");
            }
        } catch (const std::exception& e) {
            std::lock_guard lock(error_mu);
            workload_error = e.what();
        }
    });
    const auto dest_count_at_least = [&](long n) {
        return wait_for([&] {
            const auto c = dest_value("SELECT count(*) FROM t");
            return c && std::stol(*c) >= n;
        });
    };
    int cuts = 0;
    for (const long at : {400L, 2000L}) {
        EXPECT_TRUE(dest_count_at_least(at)) << pgtide.stderr_text();
        EXPECT_GE(proxy().cut_all(), 1);
        ++cuts;
        EXPECT_TRUE(wait_reconnected(pgtide, cuts)) << pgtide.stderr_text();
    }
    workload.join();
    ASSERT_EQ(workload_error, "");
    // Compared here too: the large update below rewrites every row, which would hide an insert
    // or update lost around the first two cuts (only a lost delete would still show).
    exec("INSERT INTO t VALUES (-2, -2, 'after the workload')");
    ASSERT_TRUE(wait_for_dest("SELECT count(*) FROM t WHERE id = -2", "1")) << pgtide.stderr_text();
    expect_t_equal();

    // One large transaction, cut while it is in flight.
    proxy().delay(20ms);
    exec("UPDATE t SET v = v * 3, note = note || '+'");
    EXPECT_GE(proxy().cut_all(), 1);
    ++cuts;
    proxy().delay(0ms);
    EXPECT_TRUE(wait_reconnected(pgtide, cuts)) << pgtide.stderr_text();
    exec("INSERT INTO t VALUES (-1, -1, 'last')");

    ASSERT_TRUE(wait_for_t()) << pgtide.stderr_text();
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    EXPECT_EQ(occurrences(pgtide.stderr_text(), "reconnecting"), 3) << pgtide.stderr_text();
    expect_t_equal();
}

// (2) A stall longer than a few seconds: nothing arrives meanwhile, everything after.
//
// Broken on purpose once, then reverted: StreamOptions::receive_timeout (replicate/stream.hpp)
// 3000 ms instead of 30000 ms. The stall was taken for a dead connection ("no message from the
// source for 3 s, ... presumed dead") and pgtide reconnected; nothing was lost, but
// `EXPECT_EQ(occurrences(pgtide.stderr_text(), "reconnecting"), 0)` saw 1.
TEST_F(NetworkFaults, StallThenResumeLosesNothing) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v bigint, note text)");
    exec("INSERT INTO t SELECT g, g, 'snap' FROM generate_series(1, 100) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    PgtideProcess pgtide(proxied_args(false));
    wait_streaming(pgtide);
    if (HasFatalFailure()) {
        return;
    }
    exec("INSERT INTO t SELECT g, g, 'before' FROM generate_series(101, 200) g");
    ASSERT_TRUE(wait_for_dest("SELECT count(*) FROM t", "200")) << pgtide.stderr_text();

    proxy().stall();
    exec("INSERT INTO t SELECT g, -g, 'stalled' FROM generate_series(201, 300) g");
    exec("UPDATE t SET v = v + 1000 WHERE id % 2 = 0");
    exec("DELETE FROM t WHERE id % 10 = 0");
    // The stall itself: for 6 s the destination must not move (polled, not slept).
    const auto until = Clock::now() + 6s;
    while (Clock::now() < until) {
        ASSERT_EQ(dest_value("SELECT count(*) FROM t"), "200") << pgtide.stderr_text();
        std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
    proxy().resume();
    exec("INSERT INTO t VALUES (-1, -1, 'after')");

    ASSERT_TRUE(wait_for_t()) << pgtide.stderr_text();
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    expect_t_equal();
    // A stall this short is within every timeout: the session survives it.
    EXPECT_EQ(occurrences(pgtide.stderr_text(), "reconnecting"), 0) << pgtide.stderr_text();
}

// (3) The proxy half-closes toward pgtide (pgtide reads EOF while its sending side stays open).
//
// Broken on purpose once, then reverted: Coordinator::run_phases (replicate/coordinator.cpp)
// without `connected = false;` after a lost connection: every retry sent START_REPLICATION on
// the closed session ("connection is closed") and never reconnected;
// `wait_reconnected(pgtide, 1)`, then `wait_for_t()`, failed.
TEST_F(NetworkFaults, HalfCloseTowardTheClientRecovers) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v bigint, note text)");
    exec("INSERT INTO t SELECT g, g, 'snap' FROM generate_series(1, 100) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    PgtideProcess pgtide(proxied_args(false));
    wait_streaming(pgtide);
    if (HasFatalFailure()) {
        return;
    }
    EXPECT_GE(proxy().half_close_all(), 1);
    exec("INSERT INTO t SELECT g, g, 'after' FROM generate_series(101, 300) g");
    exec("UPDATE t SET v = v + 1 WHERE id % 3 = 0");
    EXPECT_TRUE(wait_reconnected(pgtide, 1)) << pgtide.stderr_text();
    exec("DELETE FROM t WHERE id % 4 = 0");

    ASSERT_TRUE(wait_for_t()) << pgtide.stderr_text();
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    EXPECT_GE(occurrences(pgtide.stderr_text(), "reconnecting"), 1) << pgtide.stderr_text();
    expect_t_equal();
}

// (4) The source stays unreachable past source.reconnect_deadline: a clear error and exit 1
// soon after the deadline; once the source is reachable again, a new run ends equal.
//
// Broken on purpose once, then reverted: Coordinator::run_phases (replicate/coordinator.cpp)
// restarted the deadline's clock at every failed attempt: `unreachable_since = now;` without
// `if (!unreachable_since)`. pgtide kept retrying: "still running 60 s after the cut".
TEST_F(NetworkFaults, UnreachablePastTheDeadlineExitsThenANewRunCatchesUp) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v bigint, note text)");
    exec("INSERT INTO t SELECT g, g, 'snap' FROM generate_series(1, 100) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    const std::string cfg = config("reconnect_deadline = \"3s\"");
    PgtideProcess pgtide({"run", "-c", cfg});
    wait_streaming(pgtide);
    if (HasFatalFailure()) {
        return;
    }
    exec("INSERT INTO t SELECT g, g, 'streamed' FROM generate_series(101, 150) g");
    ASSERT_TRUE(wait_for_t()) << pgtide.stderr_text();

    proxy().refuse(true);
    const auto cut_at = Clock::now();
    EXPECT_GE(proxy().cut_all(), 1);
    exec("INSERT INTO t SELECT g, g, 'while down' FROM generate_series(151, 250) g");
    exec("UPDATE t SET v = -v WHERE id <= 10");
    const auto code = pgtide.wait_for(60s);
    const auto took = Clock::now() - cut_at;
    ASSERT_TRUE(code.has_value()) << "still running 60 s after the cut\n" << pgtide.stderr_text();
    EXPECT_EQ(*code, 1) << pgtide.stderr_text();
    EXPECT_GE(took, 3s);
    EXPECT_LT(took, 15s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
    EXPECT_NE(pgtide.stderr_text().find("past source.reconnect_deadline; last error:"),
              std::string::npos)
        << pgtide.stderr_text();
    EXPECT_GE(occurrences(pgtide.stderr_text(), "reconnecting"), 1) << pgtide.stderr_text();
    EXPECT_EQ(proxy().connections(), 0);
    EXPECT_EQ(dest_value("SELECT count(*) FROM t"), "150");

    proxy().refuse(false);
    std::string out;
    std::string err;
    ASSERT_EQ(PgtideProcess::run({"run", "--once", "--json", "-c", cfg}, &out, &err), 0)
        << out << err;
    expect_t_equal();
    EXPECT_EQ(dest_value("SELECT epoch FROM _pgtide_checkpoint"), "1");
}

// (4a) source.reconnect_deadline bounds one outage, counted from the loss of the connection:
// a brief cut after pgtide has streamed for longer than the deadline is an ordinary reconnect.
//
// Broken on purpose once, then reverted: Coordinator::run_phases (replicate/coordinator.cpp)
// counted the deadline from the start of streaming: `unreachable_since = steady_clock::now();`
// instead of `unreachable_since.reset();` once START_REPLICATION succeeded. The cut exited 1
// ("the source stayed unreachable for 5 s, past source.reconnect_deadline");
// `wait_reconnected(pgtide, 1)` failed.
TEST_F(NetworkFaults, BriefCutAfterStreamingLongerThanTheDeadlineReconnects) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v bigint, note text)");
    exec("INSERT INTO t SELECT g, g, 'snap' FROM generate_series(1, 100) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    const std::string cfg = config("reconnect_deadline = \"3s\"");
    PgtideProcess pgtide({"run", "-c", cfg});
    wait_streaming(pgtide);
    if (HasFatalFailure()) {
        return;
    }
    // Stream for 5 s (longer than the deadline), one applied transaction after another.
    const auto streaming_since = Clock::now();
    for (int i = 0; Clock::now() - streaming_since < 5s; ++i) {
        exec("INSERT INTO t VALUES (" + std::to_string(1000 + i) + ", " + std::to_string(i) +
             ", 'streamed')");
        ASSERT_TRUE(wait_for_t()) << pgtide.stderr_text();
    }
    EXPECT_GE(proxy().cut_all(), 1);
    exec("UPDATE t SET v = v + 1 WHERE id % 2 = 0");
    ASSERT_TRUE(wait_reconnected(pgtide, 1)) << pgtide.stderr_text();
    ASSERT_TRUE(wait_for_t()) << pgtide.stderr_text();
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    EXPECT_EQ(occurrences(pgtide.stderr_text(), "reconnecting"), 1) << pgtide.stderr_text();
    EXPECT_EQ(pgtide.stderr_text().find("stayed unreachable"), std::string::npos)
        << pgtide.stderr_text();
    expect_t_equal();
}

// (4b) A silent network (every byte held, no FIN, no RST: a partition) that outlasts
// source.reconnect_deadline: pgtide must notice the dead session (stream.receive_timeout, here
// 4 s) and give up like (4), not wait forever on a socket that will never speak again.
//
// Broken on purpose once, then reverted: Stream::run (replicate/stream.cpp) reset its silence
// bookkeeping (`last_received_ = now; pinged_ = false;`) after every read, timeouts included
// (the `else` dropped): an unanswered keepalive request never counted, and the assertion
// "pgtide still running 90 s into a silent network with reconnect_deadline = 3s" failed.
TEST_F(NetworkFaults, SilentNetworkPastTheDeadlineExits) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v bigint, note text)");
    exec("INSERT INTO t SELECT g, g, 'snap' FROM generate_series(1, 100) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    const std::string cfg =
        config("reconnect_deadline = \"3s\"", "[stream]\nreceive_timeout = \"4s\"\n");
    PgtideProcess pgtide({"run", "-c", cfg});
    wait_streaming(pgtide);
    if (HasFatalFailure()) {
        return;
    }
    proxy().stall();
    exec("INSERT INTO t SELECT g, g, 'unseen' FROM generate_series(101, 150) g");
    const auto code = pgtide.wait_for(90s);
    ASSERT_TRUE(code.has_value())
        << "pgtide still running 90 s into a silent network with reconnect_deadline = 3s and "
           "receive_timeout = 4s\n"
        << pgtide.stderr_text();
    EXPECT_EQ(*code, 1) << pgtide.stderr_text();
    EXPECT_NE(pgtide.stderr_text().find("past source.reconnect_deadline; last error:"),
              std::string::npos)
        << pgtide.stderr_text();
    EXPECT_EQ(dest_value("SELECT count(*) FROM t"), "100");
    proxy().resume();
    std::string out;
    std::string err;
    ASSERT_EQ(PgtideProcess::run({"run", "--once", "--json", "-c", cfg}, &out, &err), 0)
        << out << err;
    expect_t_equal();
}

// (5) A cut while the snapshot is being copied: the epoch is abandoned and the run finishes on
// epoch 2, equal to the source.
//
// Broken on purpose once, then reverted: Coordinator::run_phases (replicate/coordinator.cpp)
// computed the snapshot's epoch once, before its attempts loop, so the attempt after the cut
// reused epoch 1. The copy still ended equal to the source (the epoch's start empties the
// tables), but on epoch 1: the `"epoch":2` check of stdout failed.
TEST_F(NetworkFaults, CutDuringTheSnapshotFinishesOnANewEpoch) {
    constexpr int kRows = 100000;
    exec("CREATE TABLE big (id int PRIMARY KEY, v text)");
    exec("INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, " + std::to_string(kRows) +
         ") g");
    exec("CREATE PUBLICATION pub FOR TABLE big");
    const std::string cfg =
        config("", "[snapshot]\npage_rows = 50\nbatch_rows = 50\nparallel_tables = 4\n"
                   "commit_rows = 100\n[apply]\nbatch_rows = 20\n");
    PgtideProcess pgtide({"run", "--once", "--json", "-c", cfg});
    const std::string copied = "SELECT rows_copied FROM _pgtide_tables WHERE epoch = 1";
    ASSERT_TRUE(wait_for([&] {
        const auto n = dest_value(copied);
        return (n && std::stol(*n) > 0) || !pgtide.running();
    })) << pgtide.stderr_text();
    // Freeze the copy mid-table (each page is a round trip through the proxy), then cut.
    proxy().stall();
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
    EXPECT_EQ(dest_value("SELECT phase FROM _pgtide_checkpoint"), "snapshot");
    const auto before_cut = dest_value(copied);
    ASSERT_TRUE(before_cut.has_value());
    EXPECT_LT(std::stol(*before_cut), kRows);
    EXPECT_GE(proxy().cut_all(), 2); // the replication session and at least one reader
    proxy().resume();

    const auto code = pgtide.wait_for(180s);
    ASSERT_TRUE(code.has_value()) << pgtide.stderr_text();
    ASSERT_EQ(*code, 0) << pgtide.stderr_text();
    EXPECT_NE(pgtide.stdout_text().find("\"epoch\":2"), std::string::npos) << pgtide.stdout_text();
    EXPECT_NE(pgtide.stderr_text().find("starting a new epoch"), std::string::npos)
        << pgtide.stderr_text();
    EXPECT_EQ(query_value(
                  "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"),
              "1");
    expect_equal("SELECT b.id::text, b.v FROM big b ORDER BY b.id",
                 "SELECT id, v FROM big ORDER BY id");
    EXPECT_EQ(dest_value("SELECT count(*) FROM big WHERE _pgtide_lsn = (SELECT consistent_lsn "
                         "FROM _pgtide_checkpoint)"),
              std::to_string(kRows));
}

} // namespace
} // namespace pgtide::testing
