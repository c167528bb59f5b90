// End-to-end: `pgtide run` copies and streams a real PostgreSQL into a real SQLite file.
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/replication_test.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

using namespace std::chrono_literals;

// Every mapped type of the skeleton, NULLs every 10th row, extremes in the first rows.
constexpr const char* kCreateItems = R"sql(
CREATE TABLE items (
    id bigint PRIMARY KEY,
    flag boolean,
    small int2,
    medium int4,
    amount numeric(12,4),
    ratio float8,
    name text,
    code varchar(20),
    payload bytea,
    uid uuid,
    day date,
    at timestamp,
    at_tz timestamptz,
    doc jsonb
))sql";

std::string insert_items(long from, long to) {
    return "INSERT INTO items SELECT g, g % 2 = 0, (g % 30000)::int2, (g * 7)::int4, "
           "(g * 1.25)::numeric(12,4), g / 7.0, 'name ' || g || ' ''quoted'' é', "
           "'c' || (g % 100), decode(md5(g::text), 'hex'), md5(g::text)::uuid, "
           "date '2024-01-01' + g::int, timestamp '2024-01-01 00:00:00' + g * interval '1.5 "
           "second', timestamptz '2024-01-01 00:00:00+02' + g * interval '1 minute 0.000001 "
           "second', jsonb_build_object('g', g, 'tags', jsonb_build_array('a', g % 3)) "
           "FROM generate_series(" +
           std::to_string(from) + ", " + std::to_string(to) +
           ") g;"
           "UPDATE items SET flag = NULL, small = NULL, amount = NULL, ratio = NULL, name = NULL, "
           "payload = NULL, uid = NULL, day = NULL, at = NULL, at_tz = NULL, doc = NULL "
           "WHERE id % 10 = 0 AND id BETWEEN " +
           std::to_string(from) + " AND " + std::to_string(to);
}

// The source's rows spelled the way SQLite stores them (DESIGN §5).
constexpr const char* kSourceItems =
    "SELECT id::text, flag::int::text, small::text, medium::text, amount::text, ratio::text, "
    "name, code, payload::text, uid::text, day::text, replace(at::text, ' ', 'T'), "
    "replace(replace(at_tz::text, ' ', 'T'), '+00', 'Z'), doc::text FROM items ORDER BY items.id";
constexpr const char* kDestItems = "SELECT id, flag, small, medium, amount, ratio, name, code, "
                                   "payload, uid, day, at, at_tz, doc FROM items ORDER BY id";

class ReplicateToSqlite : public ReplicationTest {
protected:
    std::int64_t checkpoint_lsn() const {
        SqliteFile f(sqlite_path_);
        return std::stoll(f.value("SELECT lsn FROM _pgtide_checkpoint"));
    }

    std::int64_t confirmed_flush_lsn() const {
        return std::stoll(query_value("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint "
                                      "FROM pg_replication_slots WHERE slot_name = '" +
                                      slot() + "'"));
    }

    std::int64_t current_wal_lsn() const {
        return std::stoll(query_value("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"));
    }

    /// Bounded wait until the destination's items table holds `n` rows.
    bool wait_for_dest_count(int n) const {
        return wait_for_dest("SELECT count(*) FROM items", std::to_string(n));
    }

    void expect_items_equal() const { expect_equal(kSourceItems, kDestItems); }
};

TEST_F(ReplicateToSqlite, CopiesTenThousandRowsThenStreamsChanges) {
    exec(kCreateItems);
    exec(insert_items(1, 10000));
    exec("INSERT INTO items (id, small, medium, amount, ratio, name) VALUES "
         "(-9223372036854775808, -32768, -2147483648, -99999999.9999, -1.5e300, ''), "
         "(9223372036854775807, 32767, 2147483647, 99999999.9999, 2.2250738585072014e-308, 'x')");
    exec("CREATE PUBLICATION pub FOR TABLE items");

    const std::string first = run_once();
    EXPECT_NE(first.find("\"rows_copied\":10002"), std::string::npos) << first;
    EXPECT_NE(first.find("\"tables_copied\":1"), std::string::npos) << first;
    expect_items_equal();

    exec(insert_items(10001, 10500));
    exec("UPDATE items SET name = 'renamed ' || id, amount = amount * 2 WHERE id % 7 = 0 AND id "
         "BETWEEN 1 AND 1000000");
    exec("UPDATE items SET id = id + 100000 WHERE id BETWEEN 200 AND 210"); // key changes
    exec("DELETE FROM items WHERE id % 13 = 0");
    exec("BEGIN; INSERT INTO items (id, name) VALUES (500000, 'tmp'); "
         "UPDATE items SET name = 'tmp2' WHERE id = 500000; DELETE FROM items WHERE id = 500000; "
         "COMMIT");

    const std::string second = run_once();
    EXPECT_NE(second.find("\"rows_copied\":0"), std::string::npos) << second;
    EXPECT_NE(second.find("\"transactions\":5"), std::string::npos) << second;
    expect_items_equal();

    // Nothing left: a third run applies nothing and still exits 0.
    const std::string third = run_once();
    EXPECT_NE(third.find("\"transactions\":0"), std::string::npos) << third;
    expect_items_equal();
    EXPECT_LE(confirmed_flush_lsn(), checkpoint_lsn());
}

TEST_F(ReplicateToSqlite, WriteAfterConsistentPointIsStreamedNotCopied) {
    exec(kCreateItems);
    exec(insert_items(1, 1000));
    exec("CREATE PUBLICATION pub FOR TABLE items");

    PgtideProcess pgtide(run_args(false));
    // The consistent LSN is committed to the destination before any row is copied; once it is
    // there (lsn set: not only the announcement of the slot, whose consistent_lsn is the WAL
    // position before CREATE_REPLICATION_SLOT), every later write is after the slot's
    // consistent point.
    std::string consistent;
    for (int i = 0; i < 1200 && consistent.empty(); ++i) {
        consistent = dest_value("SELECT consistent_lsn FROM _pgtide_checkpoint WHERE epoch = 1 "
                                "AND lsn > 0")
                         .value_or("");
        if (consistent.empty()) {
            ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
            std::this_thread::sleep_for(10ms);
        }
    }
    ASSERT_FALSE(consistent.empty()) << pgtide.stderr_text();
    ASSERT_GE(current_wal_lsn(), std::stoll(consistent));
    exec("INSERT INTO items (id, name) VALUES (424242, 'after the consistent point')");
    ASSERT_TRUE(wait_for_dest_count(1001)) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    ASSERT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    expect_items_equal();

    // Copied rows carry the consistent LSN; the late row carries its (later) commit LSN, and
    // it is the only streamed row.
    SqliteFile f(sqlite_path_);
    EXPECT_EQ(f.value("SELECT count(*) FROM items WHERE _pgtide_lsn = " + consistent), "1000");
    EXPECT_EQ(f.value("SELECT count(*) FROM items WHERE _pgtide_lsn > " + consistent), "1");
    EXPECT_EQ(f.value("SELECT id FROM items WHERE _pgtide_lsn > " + consistent), "424242");
    EXPECT_EQ(f.value("SELECT rows_copied FROM _pgtide_tables"), "1000");
}

TEST_F(ReplicateToSqlite, KilledWhileStreamingRestartsExactly) {
    exec(kCreateItems);
    exec(insert_items(1, 2000));
    exec("CREATE PUBLICATION pub FOR TABLE items");
    run_once();

    auto workload = [&](long from, long to) {
        for (long i = from; i < to; ++i) {
            exec("BEGIN; INSERT INTO items (id, name, amount) VALUES (" +
                 std::to_string(100000 + i) + ", 'w" + std::to_string(i) + "', " +
                 std::to_string(i) + ".5); UPDATE items SET medium = medium + 1 WHERE id = " +
                 std::to_string(1 + i % 2000) +
                 "; DELETE FROM items WHERE id = " + std::to_string(2000 - i) + "; COMMIT");
        }
    };

    PgtideProcess pgtide(run_args(false));
    workload(0, 75);
    const std::int64_t middle = current_wal_lsn();
    workload(75, 150);
    // Let the stream pass the middle of the workload, checking on the way that the slot is
    // never confirmed past the destination's durable checkpoint.
    bool reached = false;
    for (int i = 0; i < 1200 && !reached; ++i) {
        const std::int64_t confirmed = confirmed_flush_lsn(); // read first: it trails
        const std::int64_t durable = checkpoint_lsn();
        ASSERT_LE(confirmed, durable);
        reached = durable >= middle;
        if (!reached) {
            ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
            std::this_thread::sleep_for(25ms);
        }
    }
    ASSERT_TRUE(reached) << pgtide.stderr_text();
    workload(150, 200); // in flight when the process dies
    pgtide.kill(SIGKILL);
    pgtide.wait();
    EXPECT_LE(confirmed_flush_lsn(), checkpoint_lsn());
    workload(200, 300);

    run_once();
    expect_items_equal();
    EXPECT_LE(confirmed_flush_lsn(), checkpoint_lsn());
}

TEST_F(ReplicateToSqlite, SigtermFinishesTheTransactionAndExitsZero) {
    exec(kCreateItems);
    exec(insert_items(1, 100));
    exec("CREATE PUBLICATION pub FOR TABLE items");
    PgtideProcess pgtide(run_args(false));
    // Bounded wait for the snapshot to be complete.
    bool streaming = false;
    for (int i = 0; i < 1200 && !streaming; ++i) {
        streaming =
            dest_value("SELECT count(*) FROM _pgtide_checkpoint WHERE phase = 'streaming'") == "1";
        if (!streaming) {
            ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
            std::this_thread::sleep_for(25ms);
        }
    }
    ASSERT_TRUE(streaming);
    exec(insert_items(101, 200));
    ASSERT_TRUE(wait_for_dest_count(200)) << pgtide.stderr_text();
    pgtide.kill(SIGTERM);
    EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
    expect_items_equal();
    EXPECT_LE(confirmed_flush_lsn(), checkpoint_lsn());
}

} // namespace
} // namespace pgtide::testing
