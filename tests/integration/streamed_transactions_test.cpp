// Streamed in-progress transactions (stream.large_transactions = "stream", DESIGN §4 "Stream"):
// on a server whose logical_decoding_work_mem is 64kB, transactions of a few thousand rows
// arrive in stream blocks long before they end; pgtide spools them to files and applies them
// at Stream Commit. Every scenario ends with the destination compared with the source row by
// row, and checks that the source really streamed (pg_stat_replication_slots.stream_txns):
// without that, passing would prove nothing.
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <unistd.h>

#include "tests/integration/enospc_env.hpp"
#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A session of the test's own, for transactions that stay open across statements (two at once
// to interleave them).
class Conn {
public:
    explicit Conn(const std::string& dsn) : conn_(PQconnectdb(dsn.c_str())) {
        if (PQstatus(conn_) != CONNECTION_OK) {
            const std::string message = PQerrorMessage(conn_);
            PQfinish(conn_);
            throw std::runtime_error("connect: " + message);
        }
    }
    ~Conn() { PQfinish(conn_); }
    Conn(const Conn&) = delete;
    Conn& operator=(const Conn&) = delete;

    void exec(const std::string& sql) { PQclear(run(sql)); }
    std::string value(const std::string& sql) {
        PGresult* r = run(sql);
        const std::string v = PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "";
        PQclear(r);
        return v;
    }

private:
    PGresult* run(const std::string& sql) {
        PGresult* r = PQexec(conn_, sql.c_str());
        const auto status = PQresultStatus(r);
        if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
            const std::string message = PQresultErrorMessage(r);
            PQclear(r);
            throw std::runtime_error(message + " in: " + sql.substr(0, 200));
        }
        return r;
    }
    PGconn* conn_;
};

// The server of this suite: small logical_decoding_work_mem, so that big transactions stream.
PgServer& server() {
    static std::unique_ptr<PgServer> s = std::make_unique<PgServer>(
        std::vector<std::string>{"logical_decoding_work_mem = '64kB'", "max_wal_senders = 20",
                                 "max_replication_slots = 20", "max_prepared_transactions = 10"});
    return *s;
}

constexpr const char* kSchema = R"sql(
CREATE TABLE big (id bigint PRIMARY KEY, v text, n int, doc text);
ALTER TABLE big ALTER COLUMN doc SET STORAGE EXTERNAL;
CREATE TABLE small (id int PRIMARY KEY, v text);
CREATE TABLE late (id int PRIMARY KEY, v text);
CREATE PUBLICATION pub FOR TABLE big, small, late;
INSERT INTO big SELECT g, 'v' || g, g, CASE WHEN g % 100 = 0 THEN repeat(md5(g::text), 300) END
    FROM generate_series(1, 1000) g;
INSERT INTO small SELECT g, 's' || g FROM generate_series(1, 10) g;
)sql";

// Rows [from, to] of big, one in 500 with an out-of-line TOAST value.
std::string insert_big(long from, long to, const std::string& tag = "v") {
    return "INSERT INTO big SELECT g, '" + tag + "' || g, g, CASE WHEN g % 500 = 0 THEN " +
           "repeat(md5(g::text), 300) END FROM generate_series(" + std::to_string(from) + ", " +
           std::to_string(to) + ") g";
}

// 50,000 inserts, then updates and deletes of earlier rows (the snapshot's and its own),
// updates that leave TOAST values unchanged ('u'), key changes, another table.
const std::vector<std::string>& big_transaction() {
    static const std::vector<std::string> statements{
        insert_big(1001, 51000),
        "UPDATE big SET n = n + 1, v = v || '+' WHERE id % 7 = 0",
        "UPDATE big SET n = -n WHERE id % 500 = 0",
        "UPDATE big SET id = id + 1000000 WHERE id % 1000 = 0",
        "DELETE FROM big WHERE id % 11 = 0",
        "INSERT INTO small SELECT g, 'big' || g FROM generate_series(100, 200) g",
        "UPDATE small SET v = 'updated' WHERE id <= 5",
    };
    return statements;
}

class StreamedTransactions : public ::testing::TestWithParam<const char*> {
protected:
    void SetUp() override {
        PGTIDE_REQUIRE_PG();
        db_ = server().create_database();
        for (const char* setting : {"TimeZone = 'UTC'", "extra_float_digits = 1",
                                    "bytea_output = 'hex'", "DateStyle = 'ISO'"}) {
            server().exec(db_, "ALTER DATABASE " + db_ + " SET " + setting);
        }
        if (postgres()) {
            dest_db_ = server().create_database();
        }
        dir_ = fs::temp_directory_path() / ("pgtide-st-" + std::to_string(::getpid()) + "-" + db_);
        fs::create_directories(dir_);
        dir_ = fs::canonical(dir_);
        sqlite_path_ = (dir_ / "replica.db").string();
        exec(kSchema);
    }

    void TearDown() override {
        if (!dir_.empty()) {
            std::error_code ec;
            fs::remove_all(dir_, ec);
        }
    }

    bool postgres() const { return std::string(GetParam()) == "postgresql"; }
    std::string slot() const { return "s_" + db_; }
    std::string dsn() const { return server().dsn(db_); }
    void exec(const std::string& sql) const { server().exec(db_, sql); }
    std::string value(const std::string& sql) const { return server().query_value(db_, sql); }

    /// The spool directory pgtide uses: $TMPDIR is the test's directory.
    fs::path spool_dir() const { return dir_ / ("pgtide-spool-" + slot()); }
    std::vector<std::string> env() const { return {"TMPDIR=" + dir_.string()}; }

    std::string dest_url() const {
        return postgres()
                   ? "postgresql://postgres@/" + dest_db_ + "?host=" + server().socket_dir() +
                         "&port=" + std::to_string(server().port())
                   : "sqlite:" + sqlite_path_;
    }

    /// `pgtide run -c FILE [--once --json]`; `stream_settings` go into [stream].
    std::vector<std::string> args(bool once, const std::string& stream_settings = "") const {
        const std::string path = (dir_ / "pgtide.toml").string();
        std::ofstream f(path);
        f << "[source]\ndsn = \"" << dsn() << "\"\npublications = [\"pub\"]\nslot = \"" << slot()
          << "\"\n[destination]\nurl = \"" << dest_url() << "\"\n[stream]\n"
          << stream_settings << "\n";
        std::vector<std::string> a{"run", "-c", path};
        if (once) {
            a.push_back("--once");
            a.push_back("--json");
        }
        return a;
    }

    /// `pgtide run --once` to completion, expecting exit 0; its stderr.
    std::string run_once(const std::string& stream_settings = "") const {
        PgtideProcess p(args(true, stream_settings), env());
        const int code = p.wait();
        EXPECT_EQ(code, 0) << "stdout:\n" << p.stdout_text() << "\nstderr:\n" << p.stderr_text();
        return p.stderr_text();
    }

    /// Transactions the source streamed to this test's slot so far.
    std::int64_t streamed() const {
        return std::stoll(value("SELECT stream_txns FROM pg_stat_replication_slots WHERE "
                                "slot_name = '" +
                                slot() + "'"));
    }

    std::optional<std::string> dest_value(const std::string& sql) const {
        try {
            const Rows r =
                postgres() ? server().query(dest_db_, sql) : SqliteFile(sqlite_path_).rows(sql);
            if (r.size() == 1 && r[0].size() == 1) {
                return r[0][0];
            }
        } catch (const std::exception&) {
        }
        return std::nullopt;
    }

    std::int64_t checkpoint_lsn() const {
        const auto v = dest_value("SELECT lsn FROM _pgtide_checkpoint");
        return v ? std::stoll(*v) : 0;
    }

    std::int64_t lsn_of(const std::string& expr) const {
        return std::stoll(value("SELECT (" + expr + " - '0/0'::pg_lsn)::bigint"));
    }

    static bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds step = 10ms) {
        const auto deadline = std::chrono::steady_clock::now() + 120s;
        while (std::chrono::steady_clock::now() < deadline) {
            if (done()) {
                return true;
            }
            std::this_thread::sleep_for(step);
        }
        return false;
    }

    /// The files in the spool directory (none when it does not exist).
    std::vector<fs::path> spool_files(const fs::path& dir) const {
        std::vector<fs::path> out;
        std::error_code ec;
        for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator();
             it.increment(ec)) {
            out.push_back(it->path());
        }
        return out;
    }

    /// Bytes in the spool directory's files.
    std::uintmax_t spool_size() const {
        std::uintmax_t total = 0;
        for (const auto& f : spool_files(spool_dir())) {
            std::error_code ec;
            const auto n = fs::file_size(f, ec);
            total += ec ? 0 : n;
        }
        return total;
    }

    /// Until the running pgtide streams (its snapshot is done); false if it exited.
    bool wait_for_streaming(PgtideProcess& pgtide) const {
        const bool ok = wait_for([&] {
            return dest_value("SELECT phase FROM _pgtide_checkpoint") ==
                       std::optional<std::string>("streaming") ||
                   !pgtide.running();
        });
        return ok && pgtide.running();
    }

    /// What savepoint_steps() leave: the rolled-back parts are missing.
    void expect_savepoint_outcome() const {
        expect_tables_equal();
        EXPECT_EQ(value("SELECT count(*) FROM big WHERE id BETWEEN 11001 AND 26000 OR "
                        "id BETWEEN 50001 AND 60000 OR v LIKE 'in %'"),
                  "0");
        EXPECT_EQ(value("SELECT string_agg(v, ',' ORDER BY id) FROM late"), "after a");
        EXPECT_EQ(value("SELECT count(*) FROM big WHERE id BETWEEN 60001 AND 61000"), "1000");
    }

    /// Every row of big, small and late equals the source's.

    void expect_tables_equal() const {
        struct Table {
            const char* name;
            const char* source_sql;
            const char* sqlite_sql;
        };
        static constexpr Table kTables[] = {
            {"big", "SELECT id::text, v, n::text, doc FROM big ORDER BY big.id",
             "SELECT id, v, n, doc FROM big ORDER BY id"},
            {"small", "SELECT id::text, v FROM small ORDER BY small.id",
             "SELECT id, v FROM small ORDER BY id"},
            {"late", "SELECT id::text, v FROM late ORDER BY late.id",
             "SELECT id, v FROM late ORDER BY id"},
        };
        for (const Table& t : kTables) {
            const Rows want = server().query(db_, t.source_sql);
            const Rows got = postgres() ? server().query(dest_db_, t.source_sql)
                                        : SqliteFile(sqlite_path_).rows(t.sqlite_sql);
            EXPECT_EQ(got.size(), want.size()) << t.name;
            for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
                if (got[i] != want[i]) {
                    ADD_FAILURE() << t.name << ": row " << i << " differs (source id "
                                  << want[i][0].value_or("NULL") << ", destination id "
                                  << got[i][0].value_or("NULL") << ")";
                    break;
                }
            }
        }
    }

    std::string db_;
    std::string dest_db_;
    fs::path dir_;
    std::string sqlite_path_;
};

std::string all(const std::vector<std::string>& statements) {
    std::string sql;
    for (const auto& s : statements) {
        sql += s + ";\n";
    }
    return sql;
}

// (1) One transaction of 50,000 inserts, updates, deletes and TOAST values, committed.
TEST_P(StreamedTransactions, CommittedLargeTransactionIsApplied) {
    run_once(); // the snapshot
    exec("BEGIN;\n" + all(big_transaction()) + "COMMIT;");
    exec("INSERT INTO small VALUES (1000, 'after')");
    const std::string log = run_once();
    EXPECT_GT(streamed(), 0);
    EXPECT_NE(log.find("applying a streamed transaction"), std::string::npos) << log;
    expect_tables_equal();
    EXPECT_TRUE(spool_files(spool_dir()).empty());
}

// (2) The same, rolled back while pgtide streams it: the spool file goes, nothing appears.
// (Live: PostgreSQL 17+ no longer streams a transaction that is already aborted when the
// walsender decodes it.)
TEST_P(StreamedTransactions, AbortedLargeTransactionLeavesNothing) {
    run_once();
    {
        PgtideProcess pgtide(args(false), env());
        ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
        Conn a(dsn());
        a.exec("BEGIN");
        for (const std::string& statement : big_transaction()) {
            a.exec(statement);
        }
        ASSERT_TRUE(wait_for([&] { return spool_size() > 1000000 || !pgtide.running(); }))
            << pgtide.stderr_text();
        a.exec("ROLLBACK");
        // The Stream Abort deletes the file.
        ASSERT_TRUE(wait_for([&] { return spool_files(spool_dir()).empty(); }))
            << pgtide.stderr_text();
        exec("INSERT INTO small VALUES (1000, 'after')");
        ASSERT_TRUE(wait_for([&] {
            return dest_value("SELECT count(*) FROM small WHERE id = 1000") ==
                   std::optional<std::string>("1");
        })) << pgtide.stderr_text();
        ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
        pgtide.kill(SIGTERM);
        EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
        EXPECT_EQ(pgtide.stderr_text().find("applying a streamed transaction"), std::string::npos)
            << pgtide.stderr_text();
    }
    EXPECT_GT(streamed(), 0);
    expect_tables_equal();
    EXPECT_EQ(value("SELECT count(*) FROM big"), "1000");
    EXPECT_FALSE(fs::exists(spool_dir())); // a clean stop removes it
}

// (2b) Two-phase commit on the source. pgtide does not ask for two_phase: a prepared transaction
// is not the replica's to show until it commits, so PostgreSQL sends it at COMMIT PREPARED (a
// large one streamed before, spooled, committed then) and never a rolled-back one.
TEST_P(StreamedTransactions, PreparedTransactionsAppearAtCommitPreparedOnly) {
    run_once();
    exec("BEGIN;\n" + all(big_transaction()) + "PREPARE TRANSACTION 'big_p';");
    exec("BEGIN; INSERT INTO small VALUES (2001, 'prepared, committed'); "
         "PREPARE TRANSACTION 'small_p';");
    exec("BEGIN; INSERT INTO small VALUES (2002, 'prepared, rolled back'); "
         "PREPARE TRANSACTION 'gone_p';");
    exec("INSERT INTO small VALUES (2003, 'plain')");
    run_once();
    // Nothing prepared is visible yet; the plain transaction after them is.
    EXPECT_EQ(dest_value("SELECT count(*) FROM small WHERE id >= 2001"),
              std::optional<std::string>("1"));
    EXPECT_EQ(dest_value("SELECT count(*) FROM big"), std::optional<std::string>("1000"));
    exec("COMMIT PREPARED 'big_p'");
    exec("COMMIT PREPARED 'small_p'");
    exec("ROLLBACK PREPARED 'gone_p'");
    run_once();
    expect_tables_equal();
    EXPECT_EQ(dest_value("SELECT count(*) FROM small WHERE id >= 2001"),
              std::optional<std::string>("2"));
    EXPECT_GT(streamed(), 0);
}

// One transaction with savepoints: rolled-back parts (one with a nested, released savepoint
// inside, and a table first used there and then again by the transaction itself), released
// ones, a rollback of an inner savepoint only. `rollback` marks the statements that undo
// changes made since the savepoint before.
struct Step {
    std::string sql;
    bool rollback = false;
};

const std::vector<Step>& savepoint_steps() {
    static const std::vector<Step> steps{
        {insert_big(1001, 11000)},
        {"SAVEPOINT a"},
        {insert_big(11001, 21000, "a")},
        {"UPDATE big SET v = 'in a' WHERE id <= 500"},
        {"SAVEPOINT b"},
        {insert_big(21001, 26000, "b")},
        {"INSERT INTO late VALUES (1, 'in b')"},
        {"RELEASE SAVEPOINT b"},
        {"DELETE FROM big WHERE id % 3 = 0"},
        {"ROLLBACK TO SAVEPOINT a", true},
        {insert_big(30001, 40000, "after a")},
        {"INSERT INTO late VALUES (2, 'after a')"},
        {"SAVEPOINT c"},
        {"INSERT INTO small SELECT g, 'c' || g FROM generate_series(100, 110) g"},
        {"DELETE FROM big WHERE id % 5 = 0"},
        {"RELEASE SAVEPOINT c"},
        {"SAVEPOINT d"},
        {"SAVEPOINT e"},
        {insert_big(50001, 60000, "e")},
        {"UPDATE big SET v = 'in e' WHERE id <= 100"},
        {"ROLLBACK TO SAVEPOINT e", true},
        {insert_big(60001, 61000, "d")},
        {"RELEASE SAVEPOINT d"},
        {"UPDATE big SET n = 0 WHERE id % 7 = 0"},
    };
    return steps;
}

// (3) The savepoint transaction, decoded by the server after its commit.
TEST_P(StreamedTransactions, RolledBackSavepointsAreMissing) {
    run_once();
    std::string sql = "BEGIN;\n";
    for (const Step& step : savepoint_steps()) {
        sql += step.sql + ";\n";
    }
    exec(sql + "COMMIT;");
    run_once();
    EXPECT_GT(streamed(), 0);
    expect_savepoint_outcome();
    EXPECT_TRUE(spool_files(spool_dir()).empty());
}

// (3, live) The same while pgtide streams it: what each rolled-back savepoint did reaches the
// spool first, and its rollback cuts it off the file.
TEST_P(StreamedTransactions, RolledBackSavepointsAreCutFromTheSpool) {
    run_once();
    {
        PgtideProcess pgtide(args(false), env());
        ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
        // A small transaction committed and applied: whatever the source streamed before its
        // commit is in the spool (the last few kB of the big one wait in the source's memory).
        int marks = 0;
        const auto sync = [&] {
            const std::string id = std::to_string(5000 + ++marks);
            exec("INSERT INTO small VALUES (" + id + ", 'mark')");
            return wait_for([&] {
                       return dest_value("SELECT count(*) FROM small WHERE id = " + id) ==
                                  std::optional<std::string>("1") ||
                              !pgtide.running();
                   }) &&
                   pgtide.running();
        };
        Conn a(dsn());
        a.exec("BEGIN");
        std::uintmax_t at_savepoint = 0;
        for (const Step& step : savepoint_steps()) {
            if (step.sql.starts_with("SAVEPOINT")) {
                ASSERT_TRUE(sync()) << pgtide.stderr_text();
                at_savepoint = spool_size();
            }
            if (!step.rollback) {
                a.exec(step.sql);
                continue;
            }
            ASSERT_TRUE(sync()) << pgtide.stderr_text();
            const std::uintmax_t before = spool_size();
            EXPECT_GT(before, at_savepoint + 100000) << step.sql;
            a.exec(step.sql);
            ASSERT_TRUE(sync()) << pgtide.stderr_text();
            EXPECT_LT(spool_size(), before)
                << step.sql << " (" << at_savepoint << " bytes at the savepoint)";
        }
        const std::int64_t before_commit =
            std::stoll(a.value("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"));
        a.exec("COMMIT");
        ASSERT_TRUE(wait_for([&] { return checkpoint_lsn() > before_commit || !pgtide.running(); }))
            << pgtide.stderr_text();
        ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
        pgtide.kill(SIGTERM);
        EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    }
    EXPECT_GT(streamed(), 0);
    expect_savepoint_outcome();
    EXPECT_FALSE(fs::exists(spool_dir()));
}

// (4) Two big transactions from two sessions, interleaved, committed in the opposite order of
// their start, with a small one between them; the later commit's update of the same rows wins.
TEST_P(StreamedTransactions, InterleavedTransactionsApplyInCommitOrder) {
    run_once();
    Conn a(dsn());
    Conn b(dsn());
    a.exec("BEGIN");
    a.exec(insert_big(100001, 120000, "a"));
    b.exec("BEGIN");
    b.exec(insert_big(200001, 220000, "b"));
    a.exec("UPDATE big SET n = n * 2 WHERE id BETWEEN 100001 AND 105000");
    exec("INSERT INTO small VALUES (500, 'between')");
    b.exec("UPDATE big SET v = 'b wins?' WHERE id <= 100");
    b.exec("DELETE FROM big WHERE id BETWEEN 200001 AND 201000");
    a.exec(insert_big(120001, 130000, "a2"));
    b.exec("COMMIT");
    a.exec("UPDATE big SET v = 'a wins' WHERE id <= 100");
    a.exec("DELETE FROM big WHERE id BETWEEN 219001 AND 220000");
    a.exec("COMMIT");
    run_once();
    EXPECT_GE(streamed(), 2);
    expect_tables_equal();
    EXPECT_EQ(value("SELECT count(*) FROM big WHERE v = 'a wins'"), "100");
}

// (5) SIGKILL while a transaction is being spooled, then while it is being applied; a restart
// ends equal, the crashed runs' spool files are deleted, and a clean stop leaves none.
TEST_P(StreamedTransactions, KilledWhileSpoolingAndWhileApplying) {
    run_once();
    Conn a(dsn());
    {
        PgtideProcess pgtide(args(false), env());
        ASSERT_TRUE(wait_for_streaming(pgtide)) << pgtide.stderr_text();
        a.exec("BEGIN");
        a.exec(insert_big(1001, 41000));
        // Spooling: the file grows while the transaction is open.
        ASSERT_TRUE(wait_for([&] {
            for (const auto& f : spool_files(spool_dir())) {
                std::error_code ec;
                if (fs::file_size(f, ec) > 100000) {
                    return true;
                }
            }
            return !pgtide.running();
        })) << pgtide.stderr_text();
        ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
        pgtide.kill(SIGKILL);
        pgtide.wait();
    }
    const auto stale = spool_files(spool_dir());
    EXPECT_FALSE(stale.empty()); // a killed process cannot clean up
    a.exec("UPDATE big SET v = 'updated', n = -n WHERE id % 3 = 0");
    a.exec("DELETE FROM big WHERE id % 17 = 0");
    const std::int64_t before_commit =
        std::stoll(a.value("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"));
    a.exec("COMMIT");
    bool killed_while_applying = false;
    {
        PgtideProcess pgtide(args(false), env());
        ASSERT_TRUE(wait_for(
            [&] {
                return pgtide.stderr_text().find("applying a streamed transaction") !=
                           std::string::npos ||
                       !pgtide.running();
            },
            1ms))
            << pgtide.stderr_text();
        pgtide.kill(SIGKILL);
        pgtide.wait();
        killed_while_applying = checkpoint_lsn() < before_commit;
        for (const auto& f : stale) {
            EXPECT_FALSE(fs::exists(f)) << f << " (left by the first kill)";
        }
    }
    EXPECT_TRUE(killed_while_applying) << "the transaction was durable before the kill";
    run_once();
    EXPECT_GT(streamed(), 0);
    expect_tables_equal();
    EXPECT_TRUE(spool_files(spool_dir()).empty());
}

// (6) large_transactions = "off": the same transaction arrives at commit and is applied.
TEST_P(StreamedTransactions, OffStillWorksWithoutStreaming) {
    run_once("large_transactions = \"off\"");
    exec("BEGIN;\n" + all(big_transaction()) + "COMMIT;");
    run_once("large_transactions = \"off\"");
    EXPECT_EQ(streamed(), 0);
    EXPECT_GT(std::stoll(value("SELECT spill_txns FROM pg_stat_replication_slots WHERE "
                               "slot_name = '" +
                               slot() + "'")),
              0);
    expect_tables_equal();
    EXPECT_FALSE(fs::exists(spool_dir()));
}

// (6b) Off, with a large transaction rolled back before the walsender decodes it: when its
// memory runs out, PostgreSQL 18 finds the transaction aborted and discards its changes, marking
// its subtransactions that held changes "streamed" (reorderbuffer.c, ReorderBufferTruncateTXN),
// so their abort then goes out as a Stream Abort although nothing was streamed. pgtide ignores
// it; before, it stopped with "Stream Abort although streaming was not requested" (mutation:
// throw again in Stream::on_stream_abort -> this test fails on 18).
TEST_P(StreamedTransactions, OffIgnoresStreamAbortsOfTransactionsNeverStreamed) {
    run_once("large_transactions = \"off\"");
    exec("BEGIN; SAVEPOINT s; INSERT INTO small VALUES (500, 'rolled back'); RELEASE SAVEPOINT "
         "s;\n" +
         all(big_transaction()) + "ROLLBACK;");
    std::string sql = "BEGIN;\n";
    for (const Step& step : savepoint_steps()) {
        sql += step.sql + ";\n";
    }
    exec(sql + "COMMIT;");
    std::vector<std::string> a = args(true, "large_transactions = \"off\"");
    a.push_back("--log-level");
    a.push_back("debug");
    PgtideProcess p(a, env());
    ASSERT_EQ(p.wait(), 0) << p.stderr_text();
    EXPECT_EQ(streamed(), 0);
    if (std::stoi(value("SHOW server_version_num")) >= 180000) {
        EXPECT_NE(p.stderr_text().find("Stream Abort of a transaction that was not streamed"),
                  std::string::npos)
            << "PostgreSQL 18 no longer sends stray Stream Aborts here: the test proves nothing\n"
            << p.stderr_text();
    }
    expect_savepoint_outcome();
}

// stream.spool_dir puts the files elsewhere, and a full disk there stops pgtide with the
// file's name, applying nothing of the transaction; the next run completes it. SQLite only:
// the destination plays no part.
class SpoolFaults : public StreamedTransactions {};

TEST_P(SpoolFaults, SpoolDirAndFullDisk) {
    const fs::path custom = dir_ / "custom";
    const std::string settings = "spool_dir = \"" + custom.string() + "\"";
    run_once(settings);
    std::int64_t before_commit = 0;
    {
        Conn a(dsn());
        a.exec("BEGIN;\n" + all(big_transaction()));
        before_commit =
            std::stoll(a.value("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"));
        a.exec("COMMIT");
    }
    const fs::path dir = custom / ("pgtide-spool-" + slot());
    {
        std::vector<std::string> e = env();
        for (std::string& v : enospc_env(dir.string(), 200000)) {
            e.push_back(std::move(v));
        }
        PgtideProcess p(args(true, settings), e);
        EXPECT_EQ(p.wait(), 1) << p.stderr_text();
        const std::string err = p.stderr_text();
        EXPECT_NE(err.find("cannot write the spool file " + dir.string() + "/"), std::string::npos)
            << err;
        EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
    }
    EXPECT_LT(checkpoint_lsn(), before_commit); // nothing of the transaction is durable
    EXPECT_TRUE(spool_files(dir).empty());
    run_once(settings);
    EXPECT_GT(streamed(), 0);
    expect_tables_equal();
    EXPECT_FALSE(fs::exists(dir));
    EXPECT_FALSE(fs::exists(spool_dir()));
}

// One transaction of 2,000,000 rows (issue 6): the server streams it, pgtide spools it to disk
// and applies it at Stream Commit with a peak RSS under 150 MB, however large it is. Not built
// with the sanitizers, whose shadow memory and quarantine say nothing of pgtide's own.
//
// Broken on purpose once, then reverted: the Stream Commit replay in Stream::on_stream_commit
// handed its batch over at 100,000 × batch_rows instead of batch_rows (the whole transaction in
// RAM). `EXPECT_LT(*p.peak_rss_kb(), 150L * 1024)` saw 373,444 KiB; it is 31 MB as built.
#if !defined(__SANITIZE_ADDRESS__)
class HugeTransaction : public StreamedTransactions {};

TEST_P(HugeTransaction, TwoMillionRowsStreamThroughInBoundedMemory) {
    run_once();
    exec("INSERT INTO small SELECT g, 'huge ' || g FROM generate_series(100001, 2100000) g");
    PgtideProcess p(args(true), env());
    ASSERT_EQ(p.wait(), 0) << p.stderr_text();
    EXPECT_GT(streamed(), 0);
    EXPECT_NE(p.stderr_text().find("applying a streamed transaction"), std::string::npos)
        << p.stderr_text();
    ASSERT_TRUE(p.peak_rss_kb());
    std::cout << "[ huge ] peak RSS " << *p.peak_rss_kb() / 1024 << " MB" << std::endl;
    EXPECT_LT(*p.peak_rss_kb(), 150L * 1024);
    EXPECT_EQ(dest_value("SELECT count(*) FROM small"), std::optional<std::string>("2000010"));
    // Every row, by content: the sum of ids and of value lengths, on both sides.
    const std::string check = "SELECT sum(id) || ' ' || sum(length(v)) FROM small";
    EXPECT_EQ(dest_value(check), std::optional<std::string>(value(check)));
    EXPECT_TRUE(spool_files(spool_dir()).empty());
}

INSTANTIATE_TEST_SUITE_P(Destinations, HugeTransaction, ::testing::Values("sqlite"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                             return std::string(param.param);
                         });
#endif

INSTANTIATE_TEST_SUITE_P(Destinations, StreamedTransactions,
                         ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                             return std::string(param.param);
                         });
INSTANTIATE_TEST_SUITE_P(Destinations, SpoolFaults, ::testing::Values("sqlite"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                             return std::string(param.param);
                         });

} // namespace
} // namespace pgtide::testing
