// PostgresDestination's stream merge on a real PostgreSQL, driven directly (no applier): stream
// batches of upserts and deletes at chosen versions, replays and older versions among them,
// through both ways it merges upserts: MERGE (PostgreSQL 15 and later) and INSERT … ON
// CONFLICT (what an older server gets, forced here). The destination holds exactly the rows
// and versions the rules of DESIGN §5 give.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/event_loop.hpp"
#include "io/pg_connection.hpp"
#include "io/sync_wait.hpp"
#include "io/task.hpp"
#include "replicate/apply_work.hpp"
#include "replicate/checkpoint.hpp"
#include "replicate/postgres_destination.hpp"
#include "replicate/session.hpp"
#include "replicate/source_catalog.hpp"
#include "tests/support/pg_server.hpp"

namespace pgtide::replicate {
namespace {

using testing::Rows;

/// An upsert of (id, v, n, f, s) at `version`: an empty `v` is NULL, and so is `f`; `f` is
/// whether n is even, `s` is n % 1000, or -32768 for n = 0 (text, as the source sends them).
Change upsert(const std::shared_ptr<const schema::Table>& table, std::int64_t id, std::string v,
              std::int64_t n, std::uint64_t version) {
    Change c;
    c.table = table;
    const bool null = v.empty();
    c.values = {schema::Value(std::to_string(id)),
                null ? schema::Value(schema::Null{}) : schema::Value(std::move(v)),
                schema::Value(std::to_string(n)),
                null ? schema::Value(schema::Null{})
                     : schema::Value(std::string(n % 2 == 0 ? "t" : "f")),
                schema::Value(n == 0 ? std::string("-32768") : std::to_string(n % 1000))};
    c.version = schema::Lsn(version);
    return c;
}

Change remove(const std::shared_ptr<const schema::Table>& table, std::int64_t id,
              std::uint64_t version) {
    Change c;
    c.kind = Change::Kind::Delete;
    c.table = table;
    c.values = {schema::Value(std::to_string(id))};
    c.version = schema::Lsn(version);
    return c;
}

/// The one table of publication "pub" on the source, as a PostgreSQL destination takes it.
io::Task<schema::Table> published_table(std::string source_dsn) {
    io::PgConnection source =
        co_await io::PgConnection::connect(source_dsn, sql_connection_params("pgtide-test"));
    SourceCatalog catalog;
    std::vector<std::string> publications{"pub"};
    std::vector<TableOverride> overrides;
    std::vector<SourceTable> tables =
        co_await catalog.published_tables(source, std::move(publications), std::move(overrides));
    EXPECT_EQ(tables.size(), 1U);
    schema::Table table = tables.at(0).table;
    table.source_text = true;
    co_return table;
}

/// Reads table t of publication "pub" from the source, creates it in the destination at
/// `url`, then applies `batches` in order, each in a transaction of its own that ends with a
/// checkpoint.
io::Task<void> apply_batches(
    std::string source_dsn, std::string url, bool on_conflict,
    std::vector<
        std::vector<std::tuple<char, std::int64_t, std::string, std::int64_t, std::uint64_t>>>
        batches) {
    const schema::Table plain = co_await published_table(source_dsn);
    const auto table = std::make_shared<const schema::Table>(plain);

    std::unique_ptr<PostgresDestination> dest =
        co_await PostgresDestination::open(url, "pgtide-test", 1000);
    if (on_conflict) {
        dest->use_on_conflict_upserts();
    }
    Checkpoint at;
    at.slot_name = "merge_test";
    at.system_identifier = "1";
    at.timeline = 1;
    at.database = "source";
    at.phase = Phase::Streaming;
    at.owner = "test";
    co_await dest->insert_checkpoint(at);
    std::vector<schema::Table> create{plain};
    co_await dest->create_tables(std::move(create));
    std::uint64_t lsn = 1;
    for (const auto& batch : batches) {
        std::vector<Change> changes;
        for (const auto& [kind, id, v, n, version] : batch) {
            changes.push_back(kind == 'u' ? upsert(table, id, v, n, version)
                                          : remove(table, id, version));
        }
        co_await dest->apply_changes(std::move(changes));
        Checkpoint next = at;
        next.lsn = schema::Lsn(++lsn);
        std::vector<TableProgress> progress;
        const bool swapped = co_await dest->commit(std::move(progress), at, next);
        EXPECT_TRUE(swapped);
        at = next;
    }
    co_await dest->close();
}

/// A source table t (published by "pub") and an empty destination database.
class PostgresMergeTest : public testing::PgTest {
protected:
    /// Creates both; returns the destination's URL.
    std::string source_and_destination() {
        exec("CREATE TABLE t (id bigint PRIMARY KEY, v text, n int, f boolean, s smallint); "
             "CREATE PUBLICATION pub FOR TABLE t");
        dest_db_ = pg().create_database();
        return "postgresql://postgres@/" + dest_db_ + "?host=" + pg().socket_dir() +
               "&port=" + std::to_string(pg().port());
    }

    io::EventLoop loop_;
    std::string dest_db_;
};

class PostgresMerge : public PostgresMergeTest, public ::testing::WithParamInterface<bool> {};

TEST_P(PostgresMerge, KeepsTheNewestVersionOfEveryKeyThroughReplaysAndOlderChanges) {
    PGTIDE_REQUIRE_PG();
    const std::string url = source_and_destination();
    using Batch =
        std::vector<std::tuple<char, std::int64_t, std::string, std::int64_t, std::uint64_t>>;
    const Batch first{{'u', 1, "a", 1, 100},
                      {'u', 2, "a", 2, 100},
                      {'u', 3, "a", 3, 100},
                      {'u', 4, "a", 4, 100},
                      {'u', 5, "", 5, 100},
                      {'u', -9223372036854775807 - 1, "min", -2147483648, 100},
                      {'u', 9223372036854775807, "max", 0, 100}};
    const Batch second{
        {'u', 1, "older", 10, 50},  // older than the row: skipped
        {'u', 2, "b", 20, 200},     // newer: replaces
        {'d', 3, "", 0, 90},        // a delete older than the row: skipped
        {'d', 4, "", 0, 300},       // newer: deletes
        {'u', 6, "new", 60, 300},   // absent: inserted
        {'u', 5, "again", 50, 100}, // the same version again: replaces (a replay is equal)
        {'d', 7, "", 0, 300},       // absent: nothing
        {'u', 8, "gone", 80, 250},  // inserted, then deleted in the same batch
        {'d', 8, "", 0, 260},
    };
    // Applied again (as a reconnect that replays it would): nothing changes.
    const std::vector<Batch> batches{first, second, second};
    io::sync_wait(loop_, apply_batches(dsn(), url, GetParam(), batches));
    const Rows got = pg().query(dest_db_, "SELECT id, v, n, f, s, _pgtide_lsn FROM t ORDER BY id");
    const Rows want{{"-9223372036854775808", "min", "-2147483648", "t", "-648", "100"},
                    {"1", "a", "1", "f", "1", "100"},
                    {"2", "b", "20", "t", "20", "200"},
                    {"3", "a", "3", "f", "3", "100"},
                    {"5", "again", "50", "t", "50", "100"},
                    {"6", "new", "60", "t", "60", "300"},
                    {"9223372036854775807", "max", "0", "t", "-32768", "100"}};
    EXPECT_EQ(got, want);
}

/// Applies one upsert to table t whose column n (int) holds `n_text`; returns the message of
/// the DestinationError it throws ("" when none).
io::Task<std::string> apply_bad_integer(std::string source_dsn, std::string url,
                                        std::string n_text) {
    const schema::Table plain = co_await published_table(source_dsn);
    const auto table = std::make_shared<const schema::Table>(plain);
    std::unique_ptr<PostgresDestination> dest =
        co_await PostgresDestination::open(url, "pgtide-test", 1000);
    std::vector<schema::Table> create{plain};
    co_await dest->create_tables(std::move(create));
    Change c = upsert(table, 1, "a", 1, 100);
    c.values[2] = schema::Value(std::move(n_text));
    std::vector<Change> changes;
    changes.push_back(std::move(c));
    std::string message;
    try {
        co_await dest->apply_changes(std::move(changes));
    } catch (const DestinationError& e) {
        message = e.what();
    }
    co_await dest->close();
    co_return message;
}

using PostgresMergeValues = PostgresMergeTest;

TEST_F(PostgresMergeValues, AnIntegerColumnValueThatIsNoIntegerIsRefusedNamingTheColumn) {
    PGTIDE_REQUIRE_PG();
    const std::string url = source_and_destination();
    for (const std::string bad : {"12x", "", "2147483648"}) {
        const std::string message = io::sync_wait(loop_, apply_bad_integer(dsn(), url, bad));
        EXPECT_NE(message.find("'" + bad + "' for column \"n\" of public.t"), std::string::npos)
            << message;
    }
}

INSTANTIATE_TEST_SUITE_P(Upserts, PostgresMerge, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param) {
                             return std::string(param.param ? "InsertOnConflict" : "Merge");
                         });

} // namespace
} // namespace pgtide::replicate
