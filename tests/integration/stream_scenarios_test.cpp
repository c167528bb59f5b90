// Stream scenarios on a real PostgreSQL: TOAST, replica identities, truncate, schema changes,
// reconnects. Each ends with the destination compared row by row with the source.
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/replication_test.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

using namespace std::chrono_literals;

class StreamScenarios : public ReplicationTest {
protected:
    std::vector<std::string> args(bool once) const { return run_args(once); }
};

TEST_F(StreamScenarios, UnchangedToastColumnKeepsItsValue) {
    exec("CREATE TABLE docs (id int PRIMARY KEY, big text, n int)");
    exec("ALTER TABLE docs ALTER COLUMN big SET STORAGE EXTERNAL");
    exec("INSERT INTO docs SELECT g, repeat(md5(g::text), 400), g FROM generate_series(1, 5) g");
    exec("CREATE PUBLICATION pub FOR TABLE docs");
    run_once();
    exec("INSERT INTO docs VALUES (6, repeat('z', 20000), 6)"); // streamed with its TOAST value
    exec("UPDATE docs SET n = n + 100");                        // 'u' for big
    const std::string out = run_once();
    EXPECT_NE(out.find("\"changes\":7"), std::string::npos) << out;
    expect_equal("SELECT id::text, big, n::text FROM docs ORDER BY docs.id",
                 "SELECT id, big, n FROM docs ORDER BY id");
}

TEST_F(StreamScenarios, ReplicaIdentityFullAndKeyChanges) {
    exec("CREATE TABLE full_t (id int PRIMARY KEY, v text)");
    exec("ALTER TABLE full_t REPLICA IDENTITY FULL");
    exec("CREATE TABLE composite (a text, b bigint, v text, PRIMARY KEY (a, b))");
    exec("INSERT INTO full_t SELECT g, 'v' || g FROM generate_series(1, 100) g");
    exec("INSERT INTO composite SELECT 'k ' || (g % 7), g, 'v' FROM generate_series(1, 100) g");
    exec("CREATE PUBLICATION pub FOR TABLE full_t, composite");
    run_once();
    exec("UPDATE full_t SET id = id + 1000 WHERE id % 3 = 0");
    exec("UPDATE full_t SET v = NULL WHERE id % 5 = 0");
    exec("DELETE FROM full_t WHERE id % 7 = 0");
    exec("UPDATE composite SET a = a || ' moved', v = 'w' WHERE b % 4 = 0");
    exec("UPDATE composite SET b = -b WHERE b % 9 = 0");
    exec("DELETE FROM composite WHERE b % 11 = 0");
    // A key swap inside one transaction: order within the transaction matters.
    exec("BEGIN; UPDATE full_t SET id = -1 WHERE id = 1; UPDATE full_t SET id = 1 WHERE id = 2; "
         "UPDATE full_t SET id = 2 WHERE id = -1; COMMIT");
    run_once();
    expect_equal("SELECT id::text, v FROM full_t ORDER BY full_t.id",
                 "SELECT id, v FROM full_t ORDER BY id");
    expect_equal("SELECT a, b::text, v FROM composite ORDER BY composite.a, composite.b",
                 "SELECT a, b, v FROM composite ORDER BY a, b");
}

TEST_F(StreamScenarios, ReplicaIdentityUsingIndexOtherThanThePrimaryKey) {
    exec("CREATE TABLE t (id int PRIMARY KEY, code text NOT NULL, v int)");
    exec("CREATE UNIQUE INDEX t_code ON t (code)");
    exec("ALTER TABLE t REPLICA IDENTITY USING INDEX t_code");
    exec("INSERT INTO t SELECT g, 'c' || g, g FROM generate_series(1, 50) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    run_once();
    // Deletes and updates carry only `code`: it must be the destination's key.
    exec("DELETE FROM t WHERE id % 5 = 0");
    exec("UPDATE t SET code = code || 'x' WHERE id % 7 = 0");
    exec("UPDATE t SET id = id + 1000 WHERE id % 3 = 0");
    run_once();
    expect_equal("SELECT t.code, t.id::text, t.v::text FROM t ORDER BY t.code COLLATE \"C\"",
                 "SELECT code, id, v FROM t ORDER BY code");
}

TEST_F(StreamScenarios, TruncateOfSeveralTablesAtTheRightPoint) {
    exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    exec("CREATE TABLE b (id int PRIMARY KEY, v text)");
    exec("INSERT INTO a SELECT g, 'a' FROM generate_series(1, 50) g");
    exec("INSERT INTO b SELECT g, 'b' FROM generate_series(1, 50) g");
    exec("CREATE PUBLICATION pub FOR TABLE a, b");
    run_once();
    exec("INSERT INTO a VALUES (100, 'before')");
    exec("BEGIN; INSERT INTO b VALUES (100, 'before'); TRUNCATE a, b; "
         "INSERT INTO a VALUES (1, 'after'); COMMIT");
    exec("INSERT INTO b VALUES (2, 'after')");
    run_once();
    expect_equal("SELECT id::text, v FROM a ORDER BY a.id", "SELECT id, v FROM a ORDER BY id");
    expect_equal("SELECT id::text, v FROM b ORDER BY b.id", "SELECT id, v FROM b ORDER BY id");

    // TRUNCATE ... CASCADE names one table; the server truncates the one referencing it too,
    // and pgoutput lists both.
    exec("CREATE TABLE child (id int PRIMARY KEY, a_id int REFERENCES a (id))");
    exec("INSERT INTO child SELECT g, 1 FROM generate_series(1, 10) g");
    exec("ALTER PUBLICATION pub ADD TABLE child");
    exec("TRUNCATE child");
    run_once(); // child joined empty: copied alone
    exec("INSERT INTO child SELECT g, 1 FROM generate_series(1, 10) g");
    exec("INSERT INTO b VALUES (3, 'kept')");
    run_once();
    EXPECT_EQ(SqliteFile(sqlite_path_).rows("SELECT count(*) FROM child"), (Rows{{"10"}}));
    exec("BEGIN; TRUNCATE a CASCADE; INSERT INTO a VALUES (7, 'after cascade'); COMMIT");
    run_once();
    expect_equal("SELECT id::text, v FROM a ORDER BY a.id", "SELECT id, v FROM a ORDER BY id");
    expect_equal("SELECT id::text, v FROM b ORDER BY b.id", "SELECT id, v FROM b ORDER BY id");
    EXPECT_EQ(SqliteFile(sqlite_path_).rows("SELECT count(*) FROM child"), (Rows{{"0"}}));
}

TEST_F(StreamScenarios, AddedColumnAppearsAndDroppedColumnStopsBeingWritten) {
    exec("CREATE TABLE t (id int PRIMARY KEY, old text, v int)");
    exec("INSERT INTO t SELECT g, 'o', g FROM generate_series(1, 20) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    run_once();
    exec("ALTER TABLE t ADD COLUMN extra numeric(8,2)");
    exec("INSERT INTO t VALUES (21, 'o', 21, 1.5)");
    exec("UPDATE t SET extra = 2.25 WHERE id <= 3");
    exec("ALTER TABLE t DROP COLUMN old");
    exec("INSERT INTO t VALUES (22, 22, 3)");
    run_once();
    expect_equal("SELECT id::text, v::text, extra::text FROM t ORDER BY t.id",
                 "SELECT id, v, extra FROM t ORDER BY id");
    // The dropped column keeps what it had and is no longer written.
    EXPECT_EQ(SqliteFile(sqlite_path_).rows("SELECT old FROM t WHERE id IN (21, 22) ORDER BY id"),
              (Rows{{"o"}, {null}}));
}

// ADD COLUMN ... DEFAULT writes no WAL for the rows that exist: PostgreSQL keeps the value in
// attmissingval, and the destination's existing rows must get it too (issue 9 item 5).
TEST_F(StreamScenarios, ColumnAddedWithADefaultFillsTheExistingRows) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v int)");
    exec("INSERT INTO t SELECT g, g FROM generate_series(1, 50) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    run_once();
    exec("ALTER TABLE t ADD COLUMN c int DEFAULT 7");
    exec("ALTER TABLE t ADD COLUMN n numeric(12,4) DEFAULT 1.5");
    exec("ALTER TABLE t ADD COLUMN s text DEFAULT 'a b\"c\\d'");
    exec("ALTER TABLE t ADD COLUMN a int[] DEFAULT '{1,2}'");
    exec("ALTER TABLE t ADD COLUMN plain int"); // no default: NULL in the existing rows
    exec("ALTER TABLE t ADD COLUMN f float8 DEFAULT 1.1, ADD COLUMN b bytea DEFAULT '\\x00ff', "
         "ADD COLUMN ts timestamptz DEFAULT '2024-01-01 00:00:00+02'");
    exec("INSERT INTO t VALUES (51, 51, 8, 2.25, 'new', '{3}', 1)");
    exec("UPDATE t SET c = 0 WHERE id <= 5");
    run_once();
    expect_equal("SELECT id, v, c, n, s, array_to_json(a)::text, plain FROM t ORDER BY id",
                 "SELECT id, v, c, n, s, a, plain FROM t ORDER BY id");
    EXPECT_EQ(SqliteFile(sqlite_path_).rows("SELECT c, n, s, a FROM t WHERE id = 50"),
              (Rows{{"7", "1.5000", "a b\"c\\d", "[1,2]"}}));
    EXPECT_EQ(SqliteFile(sqlite_path_)
                  .rows("SELECT typeof(f), f = 1.1, hex(b), ts FROM t WHERE id IN (1, 51)"),
              (Rows{{"real", "1", "00FF", "2023-12-31T22:00:00Z"},
                    {"real", "1", "00FF", "2023-12-31T22:00:00Z"}}));
}

// The same while pgtide is stopped, with rows inserted before the ALTER that it has not
// streamed yet: the column must not be added (empty) at start-up from today's catalog, or those
// rows, inserted later by the stream, would miss the default.
TEST_F(StreamScenarios, ColumnAddedWithADefaultWhileStoppedFillsRowsNotYetStreamed) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v int)");
    exec("INSERT INTO t SELECT g, g FROM generate_series(1, 10) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    run_once();
    exec("INSERT INTO t SELECT g, g FROM generate_series(11, 20) g");
    exec("UPDATE t SET v = -v WHERE id <= 3");
    exec("ALTER TABLE t ADD COLUMN c int DEFAULT 7");
    exec("INSERT INTO t VALUES (21, 21, 9)");
    run_once();
    expect_equal("SELECT id::text, v::text, c::text FROM t ORDER BY t.id",
                 "SELECT id, v, c FROM t ORDER BY id");
    EXPECT_EQ(SqliteFile(sqlite_path_).rows("SELECT count(*) FROM t WHERE c = 7"), (Rows{{"20"}}));
}

// Type changes: those that leave every existing value as it was are followed; one that can
// rewrite existing rows (numeric scale: 1.50 becomes 1.5000 with no WAL for the stream) makes
// pgtide copy the table again, alone, whether it runs or was stopped; a new storage class, which
// a SQLite column cannot take, stops it naming the column, with nothing applied past it.
TEST_F(StreamScenarios, TypeChangesAreFollowedOnlyWhenTheyKeepExistingValues) {
    exec("CREATE TABLE t (id int PRIMARY KEY, small int2, name varchar(5), amount numeric(10,2))");
    exec("INSERT INTO t SELECT g, g, 'n' || g, g / 4.0 FROM generate_series(1, 20) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    run_once();
    exec("ALTER TABLE t ALTER COLUMN small TYPE bigint, ALTER COLUMN name TYPE text");
    exec("INSERT INTO t VALUES (21, 5000000000, 'a longer name', 1.25)");
    run_once();
    expect_equal("SELECT id, small, name, amount FROM t ORDER BY id",
                 "SELECT id, small, name, amount FROM t ORDER BY id");

    // While pgtide runs: the table is copied again, alone, and the stream goes on.
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_dest("SELECT count(*) FROM t WHERE id = 21", "1"));
    exec("INSERT INTO t VALUES (22, 1, 'x', 2.5)");
    ASSERT_TRUE(wait_for_dest("SELECT count(*) FROM t WHERE id = 22", "1")) << pgtide.stderr_text();
    exec("ALTER TABLE t ALTER COLUMN amount TYPE numeric(10,4)");
    exec("INSERT INTO t VALUES (23, 1, 'x', 2.5)");
    ASSERT_TRUE(wait_for_dest("SELECT max(amount) FROM t", "5.0000")) << pgtide.stderr_text();
    ASSERT_TRUE(wait_for_dest("SELECT count(*) FROM t", "23")) << pgtide.stderr_text();
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    const std::string running_err = pgtide.stderr_text();
    EXPECT_NE(running_err.find("column \"amount\" changed type (numeric(10,2) to numeric(10,4))"),
              std::string::npos)
        << running_err;
    EXPECT_NE(running_err.find("copying a table alone"), std::string::npos) << running_err;
    expect_equal("SELECT id, small, name, amount FROM t ORDER BY id",
                 "SELECT id, small, name, amount FROM t ORDER BY id");

    // While pgtide is stopped: the destination recorded the types it follows
    // (_pgtide_columns), and the stream compares with those, not with today's catalog.
    exec("ALTER TABLE t ALTER COLUMN amount TYPE numeric(10,1)");
    exec("INSERT INTO t VALUES (24, 1, 'y', 1.25)");
    std::string out;
    std::string err;
    EXPECT_EQ(PgtideProcess::run(args(true), &out, &err), 0) << out << err;
    EXPECT_NE(err.find("column \"amount\" changed type (numeric(10,4) to numeric(10,1))"),
              std::string::npos)
        << err;
    expect_equal("SELECT id, small, name, amount FROM t ORDER BY id",
                 "SELECT id, small, name, amount FROM t ORDER BY id");
    exec("ALTER TABLE t ALTER COLUMN name TYPE varchar(40)"); // keeps values: followed
    exec("INSERT INTO t VALUES (25, 1, 'z', 1)");
    EXPECT_EQ(PgtideProcess::run(args(true), &out, &err), 0) << out << err;
    EXPECT_EQ(err.find("copying a table alone"), std::string::npos) << err;
    expect_equal("SELECT id, small, name, amount FROM t ORDER BY id",
                 "SELECT id, small, name, amount FROM t ORDER BY id");

    // A new storage class SQLite cannot give the column: stopped, nothing applied past it.
    exec("ALTER TABLE t ALTER COLUMN small TYPE text");
    exec("INSERT INTO t VALUES (26, 'text', 'w', 1)");
    EXPECT_EQ(PgtideProcess::run(args(true), &out, &err), 1) << out << err;
    EXPECT_NE(err.find("declares column \"small\" as INTEGER but the source column needs TEXT"),
              std::string::npos)
        << err;
    EXPECT_EQ(dest_value("SELECT count(*) FROM t"), std::optional<std::string>("25"));
    // The way out the message names: the table re-created, by a new snapshot.
    write_sqlite(sqlite_path_, "DROP TABLE t");
    std::vector<std::string> again = args(true);
    again.push_back("--resnapshot");
    EXPECT_EQ(PgtideProcess::run(again, &out, &err), 0) << out << err;
    expect_equal("SELECT id, small, name, amount FROM t ORDER BY id",
                 "SELECT id, small, name, amount FROM t ORDER BY id");
}

// A renamed table stops pgtide at its first change under the new name, naming both, with
// nothing of that change applied; started again, it copies the table under its new name as a
// table that joined the publications.
TEST_F(StreamScenarios, RenamedTableStopsNamingBothNames) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v int)");
    exec("INSERT INTO t SELECT g, g FROM generate_series(1, 10) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    run_once();
    PgtideProcess pgtide(args(false));
    exec("INSERT INTO t VALUES (11, 11)");
    ASSERT_TRUE(wait_for_dest("SELECT count(*) FROM t", "11")) << pgtide.stderr_text();
    exec("ALTER TABLE t RENAME TO t_renamed");
    exec("INSERT INTO t_renamed VALUES (12, 12)");
    ASSERT_TRUE(wait_for([&] { return !pgtide.running(); })) << pgtide.stderr_text();
    EXPECT_EQ(pgtide.wait(), 1);
    EXPECT_NE(pgtide.stderr_text().find("table public.t was renamed to public.t_renamed on the "
                                        "source; pgtide cannot follow a rename"),
              std::string::npos)
        << pgtide.stderr_text();
    EXPECT_EQ(dest_value("SELECT count(*) FROM t"), std::optional<std::string>("11"));
    // Started again, pgtide copies the table under its new name; the old one stays as it was.
    std::string out;
    std::string err;
    EXPECT_EQ(PgtideProcess::run(args(true), &out, &err), 0) << out << err;
    EXPECT_NE(err.find("copying a table alone"), std::string::npos) << err;
    EXPECT_EQ(dest_value("SELECT count(*) FROM t"), std::optional<std::string>("11"));
    EXPECT_EQ(dest_value("SELECT count(*) FROM t_renamed"), std::optional<std::string>("12"));
    exec("INSERT INTO t_renamed VALUES (13, 13)");
    run_once();
    EXPECT_EQ(dest_value("SELECT count(*) FROM t_renamed"), std::optional<std::string>("13"));
}

TEST_F(StreamScenarios, ReconnectsAfterTheWalsenderIsTerminated) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v int)");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_dest("SELECT phase FROM _pgtide_checkpoint", "streaming"))
        << pgtide.stderr_text();
    exec("INSERT INTO t SELECT g, g FROM generate_series(1, 100) g");
    ASSERT_TRUE(wait_for_dest("SELECT count(*) FROM t", "100")) << pgtide.stderr_text();
    for (int round = 0; round < 3; ++round) {
        exec("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name "
             "= 's_" +
             dbname() + "'");
        exec("UPDATE t SET v = v + 1");
        exec("INSERT INTO t VALUES (" + std::to_string(1000 + round) + ", 0)");
        ASSERT_TRUE(wait_for_dest("SELECT count(*) FROM t", std::to_string(101 + round)))
            << pgtide.stderr_text();
    }
    ASSERT_TRUE(wait_for_dest("SELECT sum(v) FROM t", query_value("SELECT sum(v) FROM t")))
        << pgtide.stderr_text();
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    EXPECT_NE(pgtide.stderr_text().find("reconnecting"), std::string::npos) << pgtide.stderr_text();
    expect_equal("SELECT id::text, v::text FROM t ORDER BY t.id",
                 "SELECT id, v FROM t ORDER BY id");
}

// Small source transactions written while pgtide was stopped arrive without a pause, in stream
// batches that fill inside a transaction. The destination transactions still end every
// apply.batch_rows rows, at the next source commit: before, the whole catch-up was one
// destination transaction and its checkpoint did not move until the end.
TEST_F(StreamScenarios, CatchUpCommitsEveryBatchRowsWithoutAPause) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v int)");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    const std::string config = (dir_ / "pgtide.toml").string();
    std::ofstream(config) << "[apply]\nbatch_rows = 1000\nflush_interval = \"1h\"\n";
    std::vector<std::string> a = args(true);
    a.insert(a.end(), {"-c", config});
    std::string out;
    std::string err;
    ASSERT_EQ(PgtideProcess::run(a, &out, &err), 0) << err;
    exec("CREATE PROCEDURE ten_row_transactions(n int) LANGUAGE plpgsql AS $$ BEGIN "
         "FOR i IN 0 .. n - 1 LOOP INSERT INTO t SELECT i * 10 + g, g FROM "
         "generate_series(1, 10) g; COMMIT; END LOOP; END $$");
    exec("CALL ten_row_transactions(4000)");
    ASSERT_EQ(PgtideProcess::run(a, &out, &err), 0) << err;
    ASSERT_NE(out.find("\"changes\":40000,"), std::string::npos) << out;
    const auto at = out.find("\"commits\":");
    ASSERT_NE(at, std::string::npos) << out;
    const long long commits = std::stoll(out.substr(at + 10));
    // A destination transaction ends at the first source commit after it holds 1,000 rows; a
    // stream batch adds at most 1,000 (fewer when the source paused), so each holds fewer than
    // 2,010: at least 20 commits, 40 when the source never paused. One before the fix. A commit
    // per source transaction would be 4,000.
    EXPECT_GE(commits, 20) << out;
    EXPECT_LE(commits, 100) << out;
    expect_equal("SELECT id::text, v::text FROM t ORDER BY t.id",
                 "SELECT id, v FROM t ORDER BY id");
}

TEST_F(StreamScenarios, MissingPublicationAndKeylessTableAreRefused) {
    exec("CREATE TABLE nokey (v int)");
    exec("CREATE PUBLICATION pub FOR TABLE nokey WITH (publish = 'insert')");
    std::string out;
    std::string err;
    EXPECT_EQ(PgtideProcess::run(args(true), &out, &err), 3);
    EXPECT_NE(err.find("table public.nokey has no usable key"), std::string::npos) << err;

    auto other = args(true);
    other[other.size() - 5] = "nosuchpub"; // --publication value
    EXPECT_EQ(PgtideProcess::run(other, &out, &err), 3);
    EXPECT_NE(err.find("publication \"nosuchpub\" does not exist"), std::string::npos) << err;
}

} // namespace
} // namespace pgtide::testing

namespace pgtide::testing {
namespace {

class StreamFaults : public StreamScenarios {
protected:
    std::vector<std::string> config_args(const std::string& stream_settings) const {
        const auto path = (dir_ / "pgtide.toml").string();
        std::ofstream f(path);
        f << "[source]\ndsn = \"" << dsn() << "\"\npublications = [\"pub\"]\nslot = \"s_"
          << dbname() << "\"\n[destination]\nurl = \"sqlite:" << sqlite_path_ << "\"\n[stream]\n"
          << stream_settings << "\n";
        return {"run", "-c", path};
    }

    std::int64_t lsn_of(const std::string& sql) const {
        return std::stoll(query_value("SELECT (" + sql + " - '0/0'::pg_lsn)::bigint"));
    }
};

TEST_F(StreamFaults, HeartbeatsMoveTheSlotWhileOnlyUnpublishedTablesChange) {
    exec("CREATE TABLE published (id int PRIMARY KEY)");
    exec("CREATE TABLE busy (id int PRIMARY KEY, v text)");
    exec("CREATE PUBLICATION pub FOR TABLE published");
    PgtideProcess pgtide(
        config_args("heartbeat_interval = \"200ms\"\nstatus_interval = \"200ms\""));
    ASSERT_TRUE(wait_for_dest("SELECT phase FROM _pgtide_checkpoint", "streaming"))
        << pgtide.stderr_text();
    for (int i = 0; i < 20; ++i) {
        exec("INSERT INTO busy SELECT g, md5(g::text) FROM generate_series(" +
             std::to_string(i * 1000) + ", " + std::to_string(i * 1000 + 999) + ") g");
    }
    const std::int64_t written = lsn_of("pg_current_wal_lsn()");
    const std::string confirmed =
        "(SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's_" + dbname() +
        "')";
    bool moved = false;
    for (int i = 0; i < 2400 && !moved; ++i) {
        moved = lsn_of(confirmed) >= written;
        if (!moved) {
            ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
            std::this_thread::sleep_for(25ms);
        }
    }
    EXPECT_TRUE(moved) << pgtide.stderr_text();
    // Never past the durable checkpoint.
    const std::int64_t c = lsn_of(confirmed);
    EXPECT_LE(c, std::stoll(*dest_value("SELECT lsn FROM _pgtide_checkpoint")));
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
}

TEST_F(StreamFaults, ReconnectsAfterPostgresRestartsFastAndImmediate) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v int)");
    exec("INSERT INTO t SELECT g, 0 FROM generate_series(1, 100) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    PgtideProcess pgtide(args(false));
    ASSERT_TRUE(wait_for_dest("SELECT count(*) FROM t", "100")) << pgtide.stderr_text();
    int expected = 100;
    // Each mode at three points of the workload.
    for (const std::string mode : {"fast", "immediate", "fast", "immediate", "fast", "immediate"}) {
        exec("UPDATE t SET v = v + 1 WHERE id % 3 = 0");
        pg().restart(mode);
        exec("INSERT INTO t VALUES (" + std::to_string(1000 + expected) + ", 7)");
        exec("UPDATE t SET v = v + 1 WHERE id % 5 = 0");
        ++expected;
        ASSERT_TRUE(wait_for_dest("SELECT count(*) FROM t", std::to_string(expected)))
            << mode << "\n"
            << pgtide.stderr_text();
        ASSERT_TRUE(wait_for_dest("SELECT sum(v) FROM t", query_value("SELECT sum(v) FROM t")))
            << mode << "\n"
            << pgtide.stderr_text();
    }
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    EXPECT_NE(pgtide.stderr_text().find("reconnecting"), std::string::npos);
    expect_equal("SELECT t.id::text, t.v::text FROM t ORDER BY t.id",
                 "SELECT id, v FROM t ORDER BY id");
}

} // namespace
} // namespace pgtide::testing
