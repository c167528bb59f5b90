// Tables that join the publications after the destination was copied (DESIGN §4 "Copy
// ranges"): each is copied alone under a temporary slot's exported snapshot, whose consistent
// LSN becomes the version of its rows, and the stream skips that table's changes committed
// below it. Found at start-up (joined while pgtide was stopped) and by the stream (joined while
// it runs). Every scenario ends with the destination compared with the source row by row, and
// with the main slot the only one left on the source.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/support/pg_server.hpp"
#include "tests/support/pg_session.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class CopyRanges : public ::testing::TestWithParam<const char*> {
protected:
    void SetUp() override {
        PGTIDE_REQUIRE_PG();
        db_ = pg().create_database();
        if (postgres()) {
            dest_db_ = pg().create_database();
        }
        dir_ = fs::temp_directory_path() / ("pgtide-cr-" + std::to_string(::getpid()) + "-" + db_);
        fs::create_directories(dir_);
        sqlite_path_ = (dir_ / "replica.db").string();
    }

    void TearDown() override {
        if (!dir_.empty()) {
            std::error_code ec;
            fs::remove_all(dir_, ec);
        }
    }

    static PgServer& pg() { return PgServer::shared(); }
    bool postgres() const { return std::string(GetParam()) == "postgresql"; }
    std::string slot() const { return "s_" + db_; }
    void exec(const std::string& sql) const { pg().exec(db_, sql); }
    std::string value(const std::string& sql) const { return pg().query_value(db_, sql); }

    std::string dest_url() const {
        return postgres() ? "postgresql://postgres@/" + dest_db_ + "?host=" + pg().socket_dir() +
                                "&port=" + std::to_string(pg().port())
                          : "sqlite:" + sqlite_path_;
    }

    /// `snapshot` and `apply`: more settings of those sections.
    std::vector<std::string> args(bool once, const std::string& snapshot = "",
                                  const std::string& apply = "") const {
        const std::string path = (dir_ / "pgtide.toml").string();
        std::ofstream f(path);
        f << "[source]\ndsn = \"" << pg().dsn(db_) << "\"\npublications = [\"pub\"]\nslot = \""
          << slot() << "\"\n[destination]\nurl = \"" << dest_url()
          << "\"\n[snapshot]\npage_rows = 500\n"
          << snapshot << "[apply]\n"
          << apply << "[stream]\npublication_poll_interval = \"300ms\"\n";
        std::vector<std::string> a{"run", "-c", path};
        if (once) {
            a.push_back("--once");
        }
        return a;
    }

    /// `pgtide run --once` to completion, expecting exit 0; its stderr.
    std::string run_once() const {
        PgtideProcess p(args(true));
        const int code = p.wait();
        EXPECT_EQ(code, 0) << p.stderr_text();
        return p.stderr_text();
    }

    std::optional<std::string> dest_value(const std::string& sql) const {
        try {
            const Rows r =
                postgres() ? pg().query(dest_db_, sql) : SqliteFile(sqlite_path_).rows(sql);
            if (r.size() == 1 && r[0].size() == 1) {
                return r[0][0];
            }
        } catch (const std::exception&) {
        }
        return std::nullopt;
    }

    static bool wait_for(const std::function<bool()>& done) {
        const auto deadline = std::chrono::steady_clock::now() + 120s;
        while (std::chrono::steady_clock::now() < deadline) {
            if (done()) {
                return true;
            }
            std::this_thread::sleep_for(20ms);
        }
        return false;
    }

    /// Until the running pgtide's destination answers `sql` with `want`; false if it exited
    /// first or the answer did not come.
    bool wait_for_dest(PgtideProcess& pgtide, const std::string& sql,
                       const std::string& want) const {
        return wait_for([&] {
                   return dest_value(sql) == std::optional<std::string>(want) || !pgtide.running();
               }) &&
               pgtide.running();
    }

    /// Inserts row `id` into a, then waits until the running pgtide's destination has it: how
    /// many milliseconds that took; nullopt if pgtide exited first or the row did not come.
    std::optional<double> probe_a(PgtideProcess& pgtide, int id) const {
        const auto sent = std::chrono::steady_clock::now();
        exec("INSERT INTO a VALUES (" + std::to_string(id) + ", 'probe', 0)");
        if (!wait_for_dest(pgtide, "SELECT count(*) FROM a WHERE id = " + std::to_string(id),
                           "1")) {
            return std::nullopt;
        }
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent)
            .count();
    }

    /// Until the running pgtide streams (its snapshot is done); false if it exited first.
    bool wait_for_streaming(PgtideProcess& pgtide) const {
        return wait_for_dest(pgtide, "SELECT phase FROM _pgtide_checkpoint", "streaming");
    }

    /// The state of `table` in _pgtide_tables, if it has a row.
    std::optional<std::string> state_of(const std::string& table) const {
        return dest_value("SELECT state FROM _pgtide_tables WHERE source_table = 'public." + table +
                          "'");
    }

    /// Until `table` is in `state` in the running pgtide's destination, or pgtide exited.
    bool wait_for_state(PgtideProcess& pgtide, const std::string& table,
                        const std::string& state) const {
        return wait_for([&] {
            return state_of(table) == std::optional<std::string>(state) || !pgtide.running();
        });
    }

    /// Every row of `table` (id, v, n) equals the source's.
    void expect_equal(const std::string& table) const {
        const std::string sql =
            "SELECT id::text, v, n::text FROM " + table + " ORDER BY " + table + ".id";
        const Rows want = pg().query(db_, sql);
        const Rows got =
            postgres()
                ? pg().query(dest_db_, sql)
                : SqliteFile(sqlite_path_).rows("SELECT id, v, n FROM " + table + " ORDER BY id");
        EXPECT_EQ(got.size(), want.size()) << table;
        for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
            if (got[i] != want[i]) {
                ADD_FAILURE() << table << ": row " << i << " differs (source id "
                              << want[i][0].value_or("NULL") << ", destination id "
                              << got[i][0].value_or("NULL") << ")";
                return;
            }
        }
    }

    /// The source's replication slots of this test's database.
    std::string slots() const {
        return value("SELECT coalesce(string_agg(slot_name, ',' ORDER BY slot_name), '') FROM "
                     "pg_replication_slots WHERE database = current_database()");
    }

    std::string db_;
    std::string dest_db_;
    fs::path dir_;
    std::string sqlite_path_;
};

// Rows of c in the copies beside the stream: enough that the stream goes on during the copy;
// fewer under the sanitizers, where pgtide copies several times slower (and CI's time is
// counted).
#if defined(__SANITIZE_ADDRESS__)
constexpr const char* kBigTableRows = "60000";
#else
constexpr const char* kBigTableRows = "200000";
#endif

constexpr const char* kTables = R"sql(
CREATE TABLE a (id bigint PRIMARY KEY, v text, n int);
CREATE TABLE b (id bigint PRIMARY KEY, v text, n int);
INSERT INTO a SELECT g, 'a' || g, g FROM generate_series(1, 1000) g;
INSERT INTO b SELECT g, 'b' || g, g FROM generate_series(1, 20000) g;
CREATE PUBLICATION pub FOR TABLE a;
)sql";

// Random inserts, updates (key changes too) and deletes on a and `other`, one small transaction
// at a time on a session of its own, until `stop`.
void write_load(const std::string& dsn, std::atomic<bool>* stop, std::uint64_t seed,
                std::atomic<long>* transactions, std::string other) {
    PgSession s(dsn);
    std::mt19937_64 rng(seed);
    long next_id = 1000000 + long(seed % 1000) * 100000; // loads of other seeds do not collide
    while (!stop->load()) {
        const char* table = rng() % 2 == 0 ? "a" : other.c_str();
        const long id = long(rng() % 20000) + 1;
        std::string sql;
        switch (rng() % 5) {
        case 0:
            sql = "INSERT INTO " + std::string(table) + " VALUES (" + std::to_string(next_id++) +
                  ", 'new', 1)";
            break;
        case 1:
            sql = "DELETE FROM " + std::string(table) + " WHERE id = " + std::to_string(id);
            break;
        case 2:
            sql = "UPDATE " + std::string(table) + " SET id = " + std::to_string(next_id++) +
                  " WHERE id = " + std::to_string(id);
            break;
        default:
            sql = "UPDATE " + std::string(table) +
                  " SET n = n + 1, v = v || '+' WHERE id BETWEEN " + std::to_string(id) + " AND " +
                  std::to_string(id + 20);
            break;
        }
        s.exec(sql);
        transactions->fetch_add(1);
#if defined(__SANITIZE_ADDRESS__)
        // pgtide applies several times slower under the sanitizers: a load it can follow with
        // room to spare, so that a catch-up reaches the main stream as soon as it does in the
        // plain build.
        std::this_thread::sleep_for(2ms);
#endif
    }
}

// write_load on a thread of its own, stopped and joined when it goes out of scope (also when an
// assertion returns early).
class WriteLoad {
public:
    WriteLoad(const std::string& dsn, std::uint64_t seed, std::string other = "b")
        : thread_(write_load, dsn, &stop_, seed, &transactions_, std::move(other)) {}
    ~WriteLoad() { stop(); }
    WriteLoad(const WriteLoad&) = delete;
    WriteLoad& operator=(const WriteLoad&) = delete;
    void stop() {
        stop_ = true;
        if (thread_.joinable()) {
            thread_.join();
        }
    }
    long transactions() const { return transactions_.load(); }

private:
    std::atomic<bool> stop_{false};
    std::atomic<long> transactions_{0};
    std::thread thread_;
};

// How many times `what` occurs in `text`.
std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
        ++n;
    }
    return n;
}

// A number logged as `name` (`"name":"12"` or `name=12`) in `log`, the first from `from` on.
std::optional<long> logged_number(const std::string& log, const std::string& name,
                                  std::size_t from = 0) {
    for (const std::string& prefix : {"\"" + name + "\":\"", name + "="}) {
        const std::size_t at = log.find(prefix, from);
        if (at != std::string::npos) {
            return std::stol(log.substr(at + prefix.size()));
        }
    }
    return std::nullopt;
}

// A table added to the publication while pgtide streams, under a steady write load on it and
// on the table already published: copied alone, then followed; equal at the end.
TEST_P(CopyRanges, TableAddedWhileRunningUnderWriteLoadEndsEqual) {
    exec(kTables);
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
    WriteLoad writer(pg().dsn(db_), 7u);
    std::this_thread::sleep_for(1s);
    exec("ALTER PUBLICATION pub ADD TABLE b");
    const bool copied = wait_for_state(pgtide, "b", "ready");
    std::this_thread::sleep_for(1s); // the load goes on after the copy
    writer.stop();
    ASSERT_TRUE(copied && pgtide.running()) << pgtide.stderr_text();
    EXPECT_GT(writer.transactions(), 50);
    exec("INSERT INTO a VALUES (-1, 'last', 0)");
    ASSERT_TRUE(wait_for_dest(pgtide, "SELECT count(*) FROM a WHERE id = -1", "1"))
        << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    const std::string log = pgtide.stderr_text();
    EXPECT_NE(log.find("a table joined the publications while streaming"), std::string::npos)
        << log;
    EXPECT_NE(log.find("copying a table alone"), std::string::npos) << log;
    expect_equal("a");
    expect_equal("b");
    EXPECT_EQ(slots(), slot()); // the copy's temporary slot is gone
    // The destination goes on following b.
    exec("UPDATE b SET v = 'later' WHERE id % 10 = 0");
    exec("DELETE FROM b WHERE id % 10 = 1");
    run_once();
    expect_equal("b");
}

// Acceptance 1 of issue 9: the other tables are not paused while a joined table is copied. c
// (200,000 rows, 60,000 under the sanitizers; pages of 500) is copied beside the stream while a
// load writes to a and c; a row written to a after c's copy began reaches the destination while c
// is still not ready (before, the stream waited for the whole copy), also while the copy's slot
// waits for a transaction left open on the source, and both end equal. No batch of the stream
// waits behind more than one of the copy's in the applier's queue (counted by the applier). How
// long a's probes took is printed, not asserted: these machines are shared.
//
// Broken on purpose, each once, then reverted:
// - follower.beside_stream = false in Coordinator::run_phases (the copy before the stream
//   session, as before): `EXPECT_GT(probes_while_copying, 0)` saw 0.
// - Stream::maybe_hand_off handing off at the catch-up's first commit, without waiting to pass
//   every transaction the main stream had begun: expect_equal("c") found rows of c missing or
//   different on both destinations (the main stream had skipped their changes).
// - No SessionJoiner for the stream (c found by ending the session and starting another at the
//   checkpoint, as before): two "streaming" sessions in the log instead of one.
// - The copy's batches queued without waiting for the applier (pace_copy and the catch-up
//   sending with Channel::send instead of send_and_wait): longest_wait_batches was 7 (SQLite)
//   and 8 (PostgreSQL), a full applier queue.
TEST_P(CopyRanges, TableAddedWhileRunningIsCopiedBesideTheStream) {
    exec(kTables);
    exec(std::string("CREATE TABLE c (id bigint PRIMARY KEY, v text, n int);"
                     "INSERT INTO c SELECT g, 'c' || g, g FROM generate_series(1, ") +
         kBigTableRows + ") g");
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
    WriteLoad writer(pg().dsn(db_), 11u, "c");
    int next_probe = -1;
    const auto probe = [&]() { return probe_a(pgtide, next_probe--); };
    double slowest_before = 0;
    for (int i = 0; i < 5; ++i) {
        const std::optional<double> ms = probe();
        ASSERT_TRUE(ms) << pgtide.stderr_text();
        slowest_before = std::max(slowest_before, *ms);
    }
    // A transaction left open on the source: the copy's temporary slot waits for it to end
    // before it has a snapshot, the stream must not wait with it.
    PgSession open_transaction(pg().dsn(db_));
    open_transaction.exec("BEGIN");
    open_transaction.exec("INSERT INTO b VALUES (-7, 'open', 0)");
    exec("ALTER PUBLICATION pub ADD TABLE c");
    ASSERT_TRUE(wait_for([&] {
        return pgtide.stderr_text().find("copying a table alone") != std::string::npos ||
               !pgtide.running();
    })) << pgtide.stderr_text();
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(probe()) << pgtide.stderr_text();
    }
    EXPECT_EQ(pgtide.stderr_text().find("copy snapshot taken"), std::string::npos)
        << "the copy's slot did not wait for the open transaction:\n"
        << pgtide.stderr_text();
    open_transaction.exec("COMMIT");
    ASSERT_TRUE(wait_for([&] { return state_of("c").has_value() || !pgtide.running(); }))
        << pgtide.stderr_text();
    int probes_while_copying = 0;
    double slowest_ms = 0;
    for (int i = 0; i < 200 && state_of("c") != std::optional<std::string>("ready"); ++i) {
        const std::optional<double> ms = probe();
        ASSERT_TRUE(ms) << pgtide.stderr_text();
        if (state_of("c") != std::optional<std::string>("ready")) {
            ++probes_while_copying;
            slowest_ms = std::max(slowest_ms, *ms);
        }
    }
    std::cout << "[ beside ] a's probes under the load: the slowest of 5 before c joined took "
              << slowest_before << " ms; " << probes_while_copying
              << " applied while c was copied and caught up, the slowest in " << slowest_ms << " ms"
              << std::endl;
    EXPECT_GT(probes_while_copying, 0) << pgtide.stderr_text();
    ASSERT_TRUE(wait_for_state(pgtide, "c", "ready")) << pgtide.stderr_text();
    std::this_thread::sleep_for(500ms); // the load goes on after the copy
    writer.stop();
    EXPECT_GT(writer.transactions(), 50);
    exec("INSERT INTO a VALUES (-1000, 'last', 0)");
    exec("INSERT INTO c VALUES (-1000, 'last', 0)");
    ASSERT_TRUE(wait_for_dest(pgtide, "SELECT count(*) FROM c WHERE id = -1000", "1"))
        << pgtide.stderr_text();
    ASSERT_TRUE(wait_for_dest(pgtide, "SELECT count(*) FROM a WHERE id = -1000", "1"))
        << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    const std::string log = pgtide.stderr_text();
    EXPECT_NE(log.find("catching up the tables copied beside the stream"), std::string::npos)
        << log;
    const std::size_t ready_at = log.find("table copied beside the stream is ready");
    ASSERT_NE(ready_at, std::string::npos) << log;
    // No batch of a waited behind more than one batch of c's copy or catch-up in the applier's
    // queue (the copy hands over one batch at a time); the counts come from the applier, which
    // numbers what it takes, so they do not depend on this machine's speed.
    const std::optional<long> stream_batches = logged_number(log, "stream_batches", ready_at);
    const std::optional<long> waited = logged_number(log, "stream_batches_behind_copy", ready_at);
    const std::optional<long> longest = logged_number(log, "longest_wait_batches", ready_at);
    ASSERT_TRUE(stream_batches && waited && longest) << log;
    std::cout << "[ beside ] " << *stream_batches << " stream batches applied while c was copied, "
              << *waited << " of them behind a batch of the copy, at most " << *longest
              << " batch(es) each" << std::endl;
    EXPECT_GT(*stream_batches, 0) << log;
    EXPECT_LE(*longest, 1) << log;
    // One stream session throughout: c was taken while it streamed, nothing restarted.
    EXPECT_EQ(count(log, "info: streaming slot="), 1u) << log;
    expect_equal("a");
    expect_equal("c");
    EXPECT_EQ(slots(), slot()); // the copy's temporary slot is gone
    // A restart from the checkpoint skips what the catch-up applied; c goes on being followed.
    exec("UPDATE c SET v = 'later' WHERE id % 10 = 0");
    exec("DELETE FROM c WHERE id % 10 = 1");
    run_once();
    expect_equal("a");
    expect_equal("c");
}

// Issue 9: a table that joined while pgtide was stopped is copied beside the stream too, from
// the first session on. A source transaction is held open from before pgtide starts, so the
// copy's temporary slot waits for it: rows written to a still reach the destination while c is
// copying. Then the transaction ends, c is copied under a load on a and c, caught up, and both
// end equal. (A lock on c would not do: PostgreSQL 18's publication catalog functions wait on
// it, and pgtide's start-up with them.)
//
// Broken on purpose once, then reverted: follower.beside_stream = false (every copy before the
// stream, as at start-up before): the start-up waited for the open transaction, and c was not
// even recorded copying within 2 minutes.
TEST_P(CopyRanges, TableAddedWhileStoppedIsCopiedBesideTheStreamAtStart) {
    exec(kTables);
    run_once();
    exec(std::string("CREATE TABLE c (id bigint PRIMARY KEY, v text, n int);"
                     "INSERT INTO c SELECT g, 'c' || g, g FROM generate_series(1, ") +
         kBigTableRows + ") g");
    exec("ALTER PUBLICATION pub ADD TABLE c");
    exec("UPDATE c SET v = v || '+' WHERE id % 7 = 0; DELETE FROM a WHERE id % 9 = 0");
    PgSession open_transaction(pg().dsn(db_));
    open_transaction.exec("BEGIN");
    open_transaction.exec("INSERT INTO b VALUES (-7, 'open', 0)");
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_state(pgtide, "c", "copying")) << pgtide.stderr_text();
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(probe_a(pgtide, -1 - i)) << pgtide.stderr_text();
    }
    EXPECT_EQ(state_of("c"), std::optional<std::string>("copying"));
    EXPECT_EQ(pgtide.stderr_text().find("copy snapshot taken"), std::string::npos)
        << "the copy's slot did not wait for the open transaction:\n"
        << pgtide.stderr_text();
    {
        WriteLoad writer(pg().dsn(db_), 17u, "c");
        open_transaction.exec("COMMIT");
        ASSERT_TRUE(wait_for_state(pgtide, "c", "ready")) << pgtide.stderr_text();
        std::this_thread::sleep_for(300ms); // the load goes on after the copy
        writer.stop();
        EXPECT_GT(writer.transactions(), 10);
    }
    exec("INSERT INTO c VALUES (-1000, 'last', 0)");
    ASSERT_TRUE(wait_for_dest(pgtide, "SELECT count(*) FROM c WHERE id = -1000", "1"))
        << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    const std::string log = pgtide.stderr_text();
    EXPECT_NE(log.find("beside_the_stream=yes"), std::string::npos) << log;
    EXPECT_NE(log.find("catching up the tables copied beside the stream"), std::string::npos)
        << log;
    expect_equal("a");
    expect_equal("c");
    EXPECT_TRUE(wait_for([&] { return slots() == slot(); })) << slots();
}

// A copy beside the stream killed with SIGKILL at each of its steps, under a write load on a and
// c: while c's rows are copied, while they are caught up from the copy's slot, and just after c
// became ready. Each restart
// finds c not ready and copies it again, or ready with its hand-off, and skips what the catch-up
// applied; a `pgtide resync` of the running process starts the next copy beside the stream.
// Equal at the end, with only the main slot left.
TEST_P(CopyRanges, CopyBesideTheStreamKilledAtEachStepEndsEqual) {
    exec(kTables);
    exec(std::string("CREATE TABLE c (id bigint PRIMARY KEY, v text, n int);"
                     "INSERT INTO c SELECT g, 'c' || g, g FROM generate_series(1, ") +
         kBigTableRows + ") g");
    WriteLoad writer(pg().dsn(db_), 13u, "c");
    std::vector<std::string> resync = args(false);
    resync[0] = "resync";
    resync.push_back("public.c");
    const std::vector<std::vector<std::string>> kill_in{
        {"copying"}, {"copied", "ready"}, {"ready"}};
    for (std::size_t step = 0; step < kill_in.size(); ++step) {
        PgtideProcess pgtide(args(false));
        ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
        if (step == 0) {
            exec("ALTER PUBLICATION pub ADD TABLE c");
        } else {
            ASSERT_TRUE(wait_for_state(pgtide, "c", "ready")) << pgtide.stderr_text();
            // Step 1: as soon as the copy has its snapshot, c is locked (which holds the copy
            // back) until the lock holder has changed every row of c: when the stream has begun
            // that transaction by the end of the copy, the catch-up has every row's change to
            // apply, long enough to be killed in (else it hands off at once, and the kill falls
            // just after c is ready).
            const std::size_t logged = pgtide.stderr_text().size();
            PgtideProcess requester(resync);
            if (step == 1) {
                ASSERT_TRUE(wait_for([&] {
                    return pgtide.stderr_text().find("copy snapshot taken", logged) !=
                               std::string::npos ||
                           !pgtide.running();
                })) << pgtide.stderr_text();
                PgSession locker(pg().dsn(db_));
                locker.exec("BEGIN");
                locker.exec("LOCK TABLE c IN ACCESS EXCLUSIVE MODE");
                locker.exec("UPDATE c SET n = n + 1");
                locker.exec("COMMIT");
            }
            ASSERT_EQ(requester.wait(), 0) << requester.stderr_text() << pgtide.stderr_text();
        }
        const std::vector<std::string>& wanted = kill_in[step];
        // The state to kill in; after a resync, "ready" counts once the copy has begun again.
        bool begun = step == 0;
        ASSERT_TRUE(wait_for([&] {
            const std::optional<std::string> state = state_of("c");
            begun = begun || (state && *state != "ready");
            const bool rows = dest_value("SELECT count(*) > 0 FROM c") ==
                              std::optional<std::string>(postgres() ? "t" : "1");
            return (begun && rows && state &&
                    std::find(wanted.begin(), wanted.end(), *state) != wanted.end()) ||
                   !pgtide.running();
        })) << pgtide.stderr_text();
        ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
        std::cout << "[ beside ] killed with c " << state_of("c").value_or("-") << std::endl;
        pgtide.kill(SIGKILL);
        pgtide.wait();
    }
    writer.stop();
    run_once();
    expect_equal("a");
    expect_equal("c");
    EXPECT_EQ(state_of("c"), std::optional<std::string>("ready"));
    EXPECT_TRUE(wait_for([&] { return slots() == slot(); })) << slots();
}

// SIGTERM while the slot of a copy beside the stream waits for a transaction left open on the
// source: pgtide stops at once (the end of the stream closes the copy's connection) with exit
// 0, the temporary slot goes once its backend is no longer held, and the next run copies the
// table.
//
// Broken on purpose once, then reverted: copy_beside_stream without its CancelRegistration.
// `ASSERT_TRUE(code)` saw pgtide still running after 30 s, held by the open transaction.
TEST_P(CopyRanges, StopWhileTheCopysSlotWaitsForAnOpenTransaction) {
    exec(kTables);
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
    PgSession open_transaction(pg().dsn(db_));
    open_transaction.exec("BEGIN");
    open_transaction.exec("INSERT INTO a VALUES (-7, 'open', 0)");
    exec("ALTER PUBLICATION pub ADD TABLE b");
    ASSERT_TRUE(wait_for([&] {
        return pgtide.stderr_text().find("copying a table alone") != std::string::npos ||
               !pgtide.running();
    })) << pgtide.stderr_text();
    std::this_thread::sleep_for(300ms); // into CREATE_REPLICATION_SLOT
    pgtide.kill(SIGTERM);
    const std::optional<int> code = pgtide.wait_for(30s); // a guard, not a pace
    ASSERT_TRUE(code) << pgtide.stderr_text();
    EXPECT_EQ(*code, 0) << pgtide.stderr_text();
    EXPECT_EQ(pgtide.stderr_text().find("copy snapshot taken"), std::string::npos)
        << pgtide.stderr_text();
    // The temporary slot goes with its backend, which notices the closed connection once the
    // transaction it waits for ends.
    open_transaction.exec("COMMIT");
    EXPECT_TRUE(wait_for([&] { return slots() == slot(); })) << slots();
    run_once();
    expect_equal("a");
    expect_equal("b");
    EXPECT_EQ(state_of("b"), std::optional<std::string>("ready"));
    EXPECT_TRUE(wait_for([&] { return slots() == slot(); })) << slots();
}

// A table that joins with no change to announce it is found by the poll of the publications
// (stream.publication_poll_interval), copied, then followed.
TEST_P(CopyRanges, TableAddedWhileRunningWithoutChangesIsFoundByThePoll) {
    exec(kTables);
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
    exec("ALTER PUBLICATION pub ADD TABLE b");
    ASSERT_TRUE(wait_for_state(pgtide, "b", "ready"));
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
    expect_equal("b");
    exec("DELETE FROM b WHERE id % 2 = 0");
    ASSERT_TRUE(wait_for([&] {
        return dest_value("SELECT count(*) FROM b") == std::optional<std::string>("10000");
    })) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    expect_equal("a");
    expect_equal("b");
    EXPECT_EQ(slots(), slot());
}

// The same while pgtide is stopped: b, with rows from before it joined and changes after, is
// copied at start-up; a table that left the publications is forgotten, its destination table
// kept as it was.
TEST_P(CopyRanges, TableAddedWhileStoppedIsCopiedAtStart) {
    exec(kTables);
    exec("CREATE TABLE c (id bigint PRIMARY KEY, v text, n int)");
    exec("INSERT INTO c VALUES (1, 'c', 1)");
    exec("ALTER PUBLICATION pub ADD TABLE c");
    run_once();
    exec("ALTER PUBLICATION pub ADD TABLE b");
    exec("UPDATE b SET v = 'after' WHERE id % 3 = 0");
    exec("DELETE FROM b WHERE id % 7 = 0");
    exec("INSERT INTO c VALUES (2, 'c', 2)"); // c's change on its way as it leaves
    exec("ALTER PUBLICATION pub DROP TABLE c");
    exec("INSERT INTO c VALUES (3, 'c', 3)");
    exec("INSERT INTO a VALUES (-1, 'a', 0)");
    const std::string log = run_once();
    EXPECT_NE(log.find("copying a table alone"), std::string::npos) << log;
    EXPECT_NE(log.find("a table left the publications"), std::string::npos) << log;
    expect_equal("a");
    expect_equal("b");
    EXPECT_EQ(state_of("b"), std::optional<std::string>("ready"));
    EXPECT_EQ(state_of("c"), std::nullopt);
    EXPECT_EQ(dest_value("SELECT count(*) FROM c"), std::optional<std::string>("1"));
    EXPECT_EQ(slots(), slot());
    exec("UPDATE b SET n = -n WHERE id % 5 = 0");
    run_once();
    expect_equal("b");
}

// Killed while copying a table that joined: the next run copies it again, from an empty table,
// under a new snapshot; nothing of the killed copy's slot remains.
TEST_P(CopyRanges, KilledWhileCopyingAJoinedTableCopiesItAgain) {
    exec(kTables);
    exec("INSERT INTO b SELECT g, 'more', g FROM generate_series(20001, 200000) g");
    run_once();
    exec("ALTER PUBLICATION pub ADD TABLE b");
    exec("UPDATE b SET v = 'after' WHERE id % 3 = 0");
    {
        PgtideProcess pgtide(args(false));
        ASSERT_TRUE(wait_for([&] {
            const auto n = dest_value("SELECT count(*) FROM b");
            return (n && std::stol(*n) > 0) || !pgtide.running();
        }));
        ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
        pgtide.kill(SIGKILL);
        pgtide.wait();
    }
    EXPECT_EQ(state_of("b"), std::optional<std::string>("copying"));
    exec("DELETE FROM b WHERE id % 11 = 0");
    run_once();
    expect_equal("a");
    expect_equal("b");
    EXPECT_EQ(state_of("b"), std::optional<std::string>("ready"));
    EXPECT_TRUE(wait_for([&] { return slots() == slot(); })) << slots();
}

// `pgtide resync` of a table whose destination copy was damaged by hand (rows deleted, rows
// changed, rows added): the running pgtide takes the request, copies the table alone and
// streams on, under a write load; the table ends equal. Without a running pgtide, resync copies
// by itself. A table the destination does not follow is refused, naming the ones it does.
TEST_P(CopyRanges, ResyncRepairsADamagedTableWhileTheStreamRuns) {
    exec(kTables);
    exec("ALTER PUBLICATION pub ADD TABLE b");
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
    const auto damage = [&] {
        const std::vector<std::string> statements{
            "DELETE FROM b WHERE id % 97 = 0", "UPDATE b SET v = 'damaged' WHERE id % 89 = 0",
            "INSERT INTO b (id, v, n, _pgtide_lsn) VALUES (-5, 'extra', 0, 1)"};
        for (const std::string& sql : statements) {
            if (postgres()) {
                pg().exec(dest_db_, sql);
            } else {
                write_sqlite(sqlite_path_, sql);
            }
        }
    };
    damage(); // before the load: a by-hand write meeting pgtide's could deadlock
    WriteLoad writer(pg().dsn(db_), 11u);
    std::this_thread::sleep_for(500ms);
    std::vector<std::string> resync = args(false);
    resync[0] = "resync";
    resync.push_back("--wait");
    resync.push_back("public.b");
    std::string out;
    std::string err;
    EXPECT_EQ(PgtideProcess::run(resync, &out, &err), 0) << out << err;
    EXPECT_NE(out.find("copied again by the running pgtide"), std::string::npos) << out << err;
    std::this_thread::sleep_for(500ms);
    writer.stop();
    exec("INSERT INTO a VALUES (-1, 'last', 0)");
    ASSERT_TRUE(wait_for([&] {
        return dest_value("SELECT count(*) FROM a WHERE id = -1") ==
                   std::optional<std::string>("1") ||
               !pgtide.running();
    })) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    EXPECT_NE(pgtide.stderr_text().find("a table is copied again"), std::string::npos)
        << pgtide.stderr_text();
    expect_equal("a");
    expect_equal("b");
    EXPECT_EQ(slots(), slot());

    // Nobody streams: resync copies by itself, then streams up to now.
    damage();
    exec("UPDATE b SET n = -n WHERE id % 4 = 0");
    resync.pop_back();
    resync.pop_back();
    resync.push_back("public.b");
    EXPECT_EQ(PgtideProcess::run(resync, &out, &err), 0) << out << err;
    EXPECT_NE(err.find("copying a table alone"), std::string::npos) << err;
    expect_equal("b");
    EXPECT_EQ(slots(), slot());

    resync.back() = "public.nope";
    EXPECT_EQ(PgtideProcess::run(resync, &out, &err), 2) << out << err;
    EXPECT_NE(err.find("table public.nope is not replicated into"), std::string::npos) << err;
    EXPECT_NE(err.find("public.a, public.b"), std::string::npos) << err;
}

// Schema changes the stream cannot carry, on a table with rows, while pgtide runs: a column
// added with a default (existing rows hold it without WAL), a type change that keeps every
// value (int to bigint: followed in place) and one that rewrites them (numeric scale: the
// table is copied again, alone). Equal at the end, existing rows included.
TEST_P(CopyRanges, SchemaChangesOnATableWithRowsEndEqual) {
    exec("CREATE TABLE s (id bigint PRIMARY KEY, n int, amount numeric(10,2))");
    exec("INSERT INTO s SELECT g, g, g / 8.0 FROM generate_series(1, 5000) g");
    exec("CREATE PUBLICATION pub FOR TABLE s");
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
    exec("ALTER TABLE s ADD COLUMN c int DEFAULT 7");
    exec("ALTER TABLE s ALTER COLUMN n TYPE bigint");
    exec("INSERT INTO s VALUES (5001, 5000000000, 1.25, 8)");
    ASSERT_TRUE(wait_for([&] {
        return dest_value("SELECT count(*) FROM s") == std::optional<std::string>("5001") ||
               !pgtide.running();
    })) << pgtide.stderr_text();
    exec("ALTER TABLE s ALTER COLUMN amount TYPE numeric(10,1)");
    exec("UPDATE s SET n = -n WHERE id % 10 = 0");
    exec("INSERT INTO s VALUES (5002, 1, 2.25, DEFAULT)");
    ASSERT_TRUE(wait_for_dest(pgtide, "SELECT count(*) FROM s", "5002")) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    EXPECT_NE(pgtide.stderr_text().find("a table is copied again"), std::string::npos)
        << pgtide.stderr_text();
    const std::string sql = "SELECT id::text, n::text, amount::text, c::text FROM s ORDER BY s.id";
    const Rows want = pg().query(db_, sql);
    const Rows got =
        postgres() ? pg().query(dest_db_, sql)
                   : SqliteFile(sqlite_path_).rows("SELECT id, n, amount, c FROM s ORDER BY id");
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "row " << i;
    }
    EXPECT_EQ(want[0][3], std::optional<std::string>("7"));
    EXPECT_EQ(want[0][2], std::optional<std::string>("0.1"));
    EXPECT_EQ(slots(), slot());
}

// A bootstrap of 8 tables killed (SIGKILL) at 5 points, each once one more table is whole: the
// next run resumes the epoch (its slot is still there and proven ours), keeps the tables copied
// whole and copies the others alone, each under a temporary slot; later runs copy what is left.
// No table finished before a kill is copied again (each run's log names every table it
// copies), the epoch stays 1, and the end equals the source.
TEST_P(CopyRanges, BootstrapKilledAtFivePointsResumesWithoutCopyingFinishedTablesAgain) {
    std::string schema = "CREATE PUBLICATION pub FOR ALL TABLES;\n";
    for (int t = 1; t <= 8; ++t) {
        const std::string name = "t" + std::to_string(t);
        schema += "CREATE TABLE " + name + " (id bigint PRIMARY KEY, v text, n int);\n" +
                  "INSERT INTO " + name + " SELECT g, md5(g::text), g FROM generate_series(1, " +
                  std::to_string(20000 + 5000 * t) + ") g;\n";
    }
    exec(schema);
    const auto finished = [&] {
        std::vector<std::string> names;
        const auto rows = postgres()
                              ? pg().query(dest_db_, "SELECT source_table FROM _pgtide_tables "
                                                     "WHERE state IN ('copied', 'ready') "
                                                     "ORDER BY 1")
                              : SqliteFile(sqlite_path_)
                                    .rows("SELECT source_table FROM _pgtide_tables WHERE "
                                          "state IN ('copied', 'ready') ORDER BY 1");
        for (const auto& r : rows) {
            names.push_back(r[0].value_or(""));
        }
        return names;
    };
    int kills = 0;
    int resumed = 0;
    for (int round = 0; round < 5; ++round) {
        std::vector<std::string> before;
        try {
            before = finished();
        } catch (const std::exception&) {
        }
        if (before.size() == 8) {
            break;
        }
        // A commit every 50,000 rows: tables are seen whole one by one.
        PgtideProcess p(args(true, "commit_rows = 50000\n"));
        ASSERT_TRUE(wait_for([&] {
            try {
                return finished().size() > before.size() || !p.running();
            } catch (const std::exception&) {
                return !p.running();
            }
        }));
        p.kill(SIGKILL);
        p.wait();
        ++kills;
        const std::string log = p.stderr_text();
        if (log.find("resuming the unfinished snapshot") != std::string::npos) {
            ++resumed;
        }
        for (const std::string& table : before) {
            EXPECT_EQ(log.find("\"table\":\"" + table + "\",\"reason\""), std::string::npos)
                << "round " << round << ": " << table << " was copied again\n"
                << log;
            EXPECT_EQ(log.find("table=" + table + " reason="), std::string::npos)
                << "round " << round << ": " << table << " was copied again\n"
                << log;
        }
    }
    EXPECT_GE(kills, 3);
    EXPECT_EQ(resumed, 1); // the next run resumes the epoch; later ones copy what is left alone
    const std::string log = run_once();
    EXPECT_EQ(dest_value("SELECT epoch FROM _pgtide_checkpoint"), std::optional<std::string>("1"));
    for (int t = 1; t <= 8; ++t) {
        expect_equal("t" + std::to_string(t));
    }
    EXPECT_TRUE(wait_for([&] { return slots() == slot(); })) << slots();
}

// Issue 9 item 3: a copy cut short (SIGKILL) goes on from its copy_key. Table c (120,000 rows,
// copied as 4 key ranges, a commit every 10,000 rows) is killed twice while copying, with
// changes to c all over its key space (kept rows, rows not copied yet, new rows, deletes) made
// while pgtide is stopped and a write load while it runs. Each next run keeps the rows copied
// so far and copies only the rest of each range; the stream applies every change since the
// oldest copy. The rows each run copies plus those it kept are c's rows; `pgtide status` tells
// how many key ranges are done; the end equals the source, and only the main slot is left.
//
// Broken on purpose, each once, then reverted:
// - follow_publications giving the stream the new copy's version of a resumed table (it then
//   skips the changes made to the kept rows while stopped): expect_equal("c") failed on both
//   destinations ("row 0 differs").
// - SnapshotCopier::plan going on from each range's start instead of its key: the PostgreSQL
//   destination refused the duplicate keys (pgtide exited, "c was not copying when killed"),
//   SQLite's run copied 120,413 rows again ("the rows kept were copied again").
// - PostgresDestination::discard_unfinished_chunks removing nothing: the next run's key build
//   failed on a row of a chunk cut short copied twice ("Key (id)=(106888) is duplicated").
TEST_P(CopyRanges, CopyCutShortGoesOnFromItsKey) {
    exec(std::string(kTables) +
         "CREATE TABLE c (id bigint PRIMARY KEY, v text, n int);\n"
         "INSERT INTO c SELECT g, 'c' || g, g FROM generate_series(1, 120000) g;\n"
         "ANALYZE c;\n"
         "ALTER PUBLICATION pub ADD TABLE c;\n");
    // Into PostgreSQL, c is read as unordered chunks of about 1,000 rows: each kill leaves rows
    // of the chunks in flight, which the next run removes (no key holds them off while copying)
    // and reads again.
    const std::string snapshot =
        "split_rows = 30000\nparallel_tables = 2\nbatch_rows = 500\nchunk_rows = 1000\n"
        "commit_rows = 5000\n";
    long removed = 0; ///< rows of chunks cut short, removed by the runs that went on
    const auto removed_in = [&](const std::string& log) -> long {
        const std::size_t at = log.find("removed the rows of the chunks");
        return at == std::string::npos ? 0 : logged_number(log, "rows_removed", at).value_or(-1);
    };
    const std::string apply = "batch_rows = 2000\n";
    const auto copied = [&]() -> long {
        const auto v = dest_value("SELECT rows_copied FROM _pgtide_tables WHERE source_table = "
                                  "'public.c' AND state = 'copying'");
        return v ? std::stol(*v) : -1;
    };
    // Changes while stopped: kept rows, rows not copied yet, new rows, deletes, on both tables.
    const auto change_while_stopped = [&](int round) {
        const std::string r = std::to_string(round);
        exec("UPDATE c SET v = v || '-stopped" + r + "', n = -n WHERE id % 997 = " + r +
             ";\nDELETE FROM c WHERE id % 1009 = " + r +
             ";\nINSERT INTO c SELECT 200000 + g * 10 + " + r +
             ", 'added', g FROM generate_series(1, 300) g;\nUPDATE a SET n = n + 1 WHERE id < 50;");
    };
    int kills = 0;
    long kept = 0;
    std::string logs;
    for (int round = 0; round < 2; ++round) {
        const long before = std::max(0L, copied());
        PgtideProcess p(args(false, snapshot, apply));
        WriteLoad load(pg().dsn(db_), 40 + std::uint64_t(round), "c");
        // Killed once this run has committed rows of c beyond those kept, while c copies: at
        // its first commit (commit_rows), so that a late kill in round 0 (a loaded machine)
        // still leaves round 1 most of c to copy.
        ASSERT_TRUE(wait_for([&] {
            return copied() > before || !p.running() ||
                   state_of("c") == std::optional<std::string>("ready");
        }));
        const bool mid_copy = p.running() && copied() > before;
        p.kill(SIGKILL);
        p.wait();
        load.stop();
        logs += p.stderr_text();
        if (round > 0) {
            const std::size_t at = p.stderr_text().find("resuming a table's copy");
            ASSERT_NE(at, std::string::npos) << p.stderr_text();
            EXPECT_EQ(logged_number(p.stderr_text(), "rows_kept", at), std::optional<long>(kept));
            removed += removed_in(p.stderr_text());
        }
        ASSERT_TRUE(mid_copy) << "c was not copying when killed\n" << p.stderr_text();
        ++kills;
        kept = copied();
        ASSERT_GT(kept, before);
        if (round == 0) {
            // `pgtide status` tells how far the copy got.
            std::vector<std::string> status = args(false, snapshot, apply);
            status[0] = "status";
            PgtideProcess s(status);
            EXPECT_EQ(s.wait(), 0) << s.stderr_text();
            EXPECT_NE(s.stdout_text().find("key ranges done"), std::string::npos)
                << s.stdout_text();
        }
        change_while_stopped(round);
    }
    const std::string log = run_once();
    const std::size_t at = log.find("resuming a table's copy");
    ASSERT_NE(at, std::string::npos) << log;
    EXPECT_EQ(logged_number(log, "rows_kept", at), std::optional<long>(kept));
    const std::size_t done = log.find("table copied");
    ASSERT_NE(done, std::string::npos) << log;
    const std::optional<long> now = logged_number(log, "rows_now", done);
    ASSERT_TRUE(now.has_value()) << log;
    // c has grown and shrunk a little since the kill (inserts and deletes), never by thousands;
    // only the rows of the chunks cut short are read again (at most two ranges in flight).
    const long removed_now = removed_in(log);
    removed += removed_now;
    EXPECT_GE(removed_now, 0) << log;
    EXPECT_LT(removed_now, 2 * 3000) << log;
    const long rows = std::stol(value("SELECT count(*) FROM c"));
    EXPECT_LT(*now, rows - kept + removed_now + 2000) << "the rows kept were copied again\n" << log;
    // Into PostgreSQL c is read in chunks, into SQLite in keyset pages, and only chunks leave
    // rows to remove.
    const std::size_t end = log.find("tables copied alone");
    ASSERT_NE(end, std::string::npos) << log;
    const std::optional<long> chunks = logged_number(log, "chunks_read", end);
    ASSERT_TRUE(chunks.has_value()) << log;
    if (postgres()) {
        EXPECT_GT(*chunks, 0) << log;
        EXPECT_GT(removed, 0) << "no run went on from inside a chunk\n" << logs << log;
    } else {
        EXPECT_EQ(*chunks, 0) << "SQLite copies read keyset pages\n" << log;
        EXPECT_EQ(removed, 0) << logs << log;
    }
    EXPECT_GT(*now, 0) << log;
    EXPECT_EQ(kills, 2);
    EXPECT_EQ(state_of("c"), std::optional<std::string>("ready"));
    EXPECT_EQ(dest_value("SELECT epoch FROM _pgtide_checkpoint"), std::optional<std::string>("1"));
    expect_equal("a");
    expect_equal("c");
    EXPECT_TRUE(wait_for([&] { return slots() == slot(); })) << slots();
}

// The same statements, run while pgtide is stopped or while it streams: table a dropped and
// created again under its name, with other rows (a DROP writes no row changes to the stream, so
// the destination still holds the old table's rows unless the table is copied again).
constexpr const char* kRecreateA = R"sql(
DROP TABLE a;
CREATE TABLE a (id bigint PRIMARY KEY, v text, n int);
INSERT INTO a SELECT g, 'again' || g, -g FROM generate_series(500, 1700) g;
ALTER PUBLICATION pub ADD TABLE a;
)sql";

// Issue 9 item 2, while stopped: the recorded source OID differs from today's, so the table is
// copied again at start-up. Fails if follow_publications takes a ready state row by its name
// alone: the destination keeps ids 1..499 of the dropped table (and their old values).
//
// Broken on purpose once, then reverted: follow_publications (replicate/coordinator.cpp) with
// `recreated` returning false. expect_equal("a") failed: 1000 destination rows for 1201 on the
// source, "row 0 differs (source id 500, destination id 1)".
TEST_P(CopyRanges, TableDroppedAndCreatedAgainWhileStoppedIsCopiedAgain) {
    exec(kTables);
    run_once();
    expect_equal("a");
    exec(kRecreateA);
    exec("UPDATE a SET n = 0 WHERE id = 600");
    const std::string err = run_once();
    EXPECT_NE(err.find("it was dropped and created again"), std::string::npos) << err;
    expect_equal("a");
    EXPECT_EQ(state_of("a"), std::optional<std::string>("ready"));
    // Followed after its copy, as any table.
    exec("DELETE FROM a WHERE id = 700; INSERT INTO a VALUES (1, 'one', 1)");
    run_once();
    expect_equal("a");
    EXPECT_EQ(slots(), slot());
}

// Issue 9 item 2, while running: pgoutput describes the new table with its new OID under the
// known name; the stream stops that transaction, the table is copied again, and the changes of
// the old table still in the stream (before the drop) are history. The DROP, CREATE and ADD
// TABLE commit together, so the publication poll never sees the table gone.
//
// Broken on purpose once, then reverted: Stream::install_relation (replicate/stream.cpp)
// without its OID check (`if (false && !history ...`). The new table's changes went into the
// old table's rows: 1001 destination rows for 1202, "row 1 differs (source id 500, destination
// id 1)", and the log never said "it was dropped and created again".
TEST_P(CopyRanges, TableDroppedAndCreatedAgainWhileRunningIsCopiedAgain) {
    exec(kTables);
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
    exec("UPDATE a SET n = n + 1 WHERE id <= 10"); // old-table changes ahead of the drop
    exec(kRecreateA);
    exec("UPDATE a SET v = 'changed' WHERE id BETWEEN 900 AND 950");
    exec("INSERT INTO a VALUES (-1, 'last', 0)");
    ASSERT_TRUE(wait_for_dest(pgtide, "SELECT count(*) FROM a WHERE id = -1", "1"))
        << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    EXPECT_NE(pgtide.stderr_text().find("it was dropped and created again"), std::string::npos)
        << pgtide.stderr_text();
    expect_equal("a");
    EXPECT_EQ(slots(), slot());
}

// Changes a and b while a is out of the publication, in transactions of their own: the stream
// sends none of a's.
constexpr const char* kLeaveAndComeBack = R"sql(
ALTER PUBLICATION pub DROP TABLE a;
UPDATE a SET v = 'while out' WHERE id <= 100;
DELETE FROM a WHERE id > 900;
INSERT INTO a VALUES (5000, 'while out', 5000);
ALTER PUBLICATION pub ADD TABLE a;
)sql";

// Issue 9 item 2, a table taken out of the publication and put back while pgtide is stopped:
// ADD TABLE writes a pg_publication_rel row with a new OID, so the recorded membership shares
// nothing with today's, and the table is copied again at start-up.
//
// Broken on purpose once, then reverted: follow_publications (replicate/coordinator.cpp) with
// `came_back` returning false. expect_equal("a") failed on both destinations: 1000 rows for
// the source's 901, "row 0 differs": the changes made while the table was out never arrived.
TEST_P(CopyRanges, TableTakenOutOfThePublicationAndPutBackWhileStoppedIsCopiedAgain) {
    exec(kTables);
    run_once();
    expect_equal("a");
    exec(kLeaveAndComeBack);
    exec("UPDATE a SET n = 0 WHERE id = 600");
    const std::string err = run_once();
    EXPECT_NE(err.find("it left the publications and was added again"), std::string::npos) << err;
    expect_equal("a");
    EXPECT_EQ(state_of("a"), std::optional<std::string>("ready"));
    // The new membership is recorded: the next run copies nothing.
    exec("UPDATE a SET n = 1 WHERE id = 601");
    const std::string again = run_once();
    EXPECT_EQ(again.find("copying a table alone"), std::string::npos) << again;
    expect_equal("a");
    EXPECT_EQ(slots(), slot());
}

// The same while pgtide runs: the publication poll sees the new membership (whether or not one
// of its looks fell while the table was out) and asks for a copy.
//
// Broken on purpose once, then reverted: Stream::poll_publications (replicate/stream.cpp)
// without its membership check (on both destinations): the 101 rows written while the table
// was out never reached the destination, and the wait for them timed out.
TEST_P(CopyRanges, TableTakenOutOfThePublicationAndPutBackWhileRunningIsCopiedAgain) {
    exec(kTables);
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
    exec(kLeaveAndComeBack);
    exec("INSERT INTO a VALUES (-1, 'back', 0)");
    ASSERT_TRUE(wait_for_dest(pgtide, "SELECT count(*) FROM a WHERE v = 'while out'", "101"))
        << pgtide.stderr_text();
    ASSERT_TRUE(wait_for_dest(pgtide, "SELECT count(*) FROM a WHERE id = -1", "1"))
        << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    EXPECT_NE(pgtide.stderr_text().find("it left the publications and was added again"),
              std::string::npos)
        << pgtide.stderr_text();
    expect_equal("a");
    EXPECT_EQ(slots(), slot());
}

// A column dropped and added again under its name and type: every existing row of the source
// holds NULL in it now, and no change of those rows reaches the stream. Its new attnum tells it
// apart from the old column, so the table is copied again (DESIGN §4 "Stream": a change whose
// effect on existing rows never reaches the stream ends with the destination equal anyway).
constexpr const char* kColumnAgain =
    "ALTER TABLE a DROP COLUMN v;\nALTER TABLE a ADD COLUMN v text;\n";

// While stopped: the recorded column numbers are not today's. Then a column added after the
// copy (recorded as found at the next start), dropped and added again in turn.
//
// Broken on purpose once, then reverted: follow_publications (replicate/coordinator.cpp) with
// `column_again` returning false. expect_equal("a") failed on both destinations, "row 10
// differs (source id 11, ...)": the destination kept the old values of v in the rows no change
// touched; and extra read "1000:1000:7013" for the source's "1000:1:1".
TEST_P(CopyRanges, ColumnDroppedAndAddedAgainWhileStoppedIsCopiedAgain) {
    exec(kTables);
    run_once();
    expect_equal("a");
    exec(std::string(kColumnAgain) + "UPDATE a SET v = 'after' WHERE id <= 10;");
    const std::string err = run_once();
    EXPECT_NE(err.find("a column was dropped and added again"), std::string::npos) << err;
    expect_equal("a");
    EXPECT_EQ(state_of("a"), std::optional<std::string>("ready"));
    // The new numbers are recorded: the next run copies nothing, and follows a column added
    // since (recorded as found).
    exec("ALTER TABLE a ADD COLUMN extra int DEFAULT 7; UPDATE a SET extra = 8 WHERE id <= 20;");
    const std::string added = run_once();
    EXPECT_EQ(added.find("copying a table alone"), std::string::npos) << added;
    const std::string extra = "SELECT count(*) || ':' || count(extra) || ':' || "
                              "coalesce(sum(extra), 0) FROM a";
    EXPECT_EQ(value(extra), "1000:1000:7020");
    EXPECT_EQ(dest_value(extra), std::optional<std::string>("1000:1000:7020"));
    exec("ALTER TABLE a DROP COLUMN extra; ALTER TABLE a ADD COLUMN extra int;"
         "UPDATE a SET extra = 1 WHERE id = 5;");
    const std::string again = run_once();
    EXPECT_NE(again.find("a column was dropped and added again"), std::string::npos) << again;
    EXPECT_EQ(value(extra), "1000:1:1");
    EXPECT_EQ(dest_value(extra), std::optional<std::string>("1000:1:1"));
    expect_equal("a");
    EXPECT_EQ(slots(), slot());
}

// While running: the publication poll sees the new number without any change of the table,
// and asks for a copy; changes after it are followed.
//
// Broken on purpose once, then reverted: Stream::poll_publications (replicate/stream.cpp)
// without its column-number check: the wait for the 1,000 NULLs of v timed out on both
// destinations.
TEST_P(CopyRanges, ColumnDroppedAndAddedAgainWhileRunningIsCopiedAgain) {
    exec(kTables);
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
    exec("UPDATE a SET n = n + 1 WHERE id <= 10");
    exec(kColumnAgain);
    ASSERT_TRUE(wait_for_dest(pgtide, "SELECT count(*) FROM a WHERE v IS NULL", "1000"))
        << pgtide.stderr_text();
    exec("UPDATE a SET v = 'after' WHERE id BETWEEN 100 AND 150");
    exec("INSERT INTO a (id, v, n) VALUES (-1, 'last', 0)");
    ASSERT_TRUE(wait_for_dest(pgtide, "SELECT count(*) FROM a WHERE id = -1", "1"))
        << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    EXPECT_NE(pgtide.stderr_text().find("was dropped and added again"), std::string::npos)
        << pgtide.stderr_text();
    expect_equal("a");
    EXPECT_EQ(slots(), slot());
}

INSTANTIATE_TEST_SUITE_P(Destinations, CopyRanges, ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                             return std::string(param.param);
                         });

} // namespace
} // namespace pgtide::testing
