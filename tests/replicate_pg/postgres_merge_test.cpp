// PostgresDestination's stream merge on a real PostgreSQL, driven directly (no applier): stream
// batches of upserts and deletes at chosen versions, replays and older versions among them,
// through both ways it merges upserts: MERGE (PostgreSQL 15 and later) and INSERT … ON
// CONFLICT (what an older server gets, forced here). The destination holds exactly the rows
// and versions the rules of DESIGN §5 give.
#include <memory>
#include <optional>
#include <string>
#include <tuple>
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

/// Four hex digits of `n`, in `digits` ("0123456789abcdef" or its upper case).
std::string hex4(std::int64_t n, const char* digits) {
    std::string out;
    for (int shift = 12; shift >= 0; shift -= 4) {
        out.push_back(digits[(n >> shift) & 0xf]);
    }
    return out;
}

/// An upsert of t's columns at `version`, as text as the source sends it, from (id, v, n): an
/// empty `v` is NULL, and so is `f`; `f` is whether n is even; `s` is n % 1000, or -32768 for
/// n = 0; `r` is n + 0.25, NaN for n = 0, -Infinity below -1000; `q` is n % 1000 + 0.5, or
/// Infinity for n = 0; `u` is a uuid ending in n's last four hex digits (in upper case, which
/// the destination reads as well), NULL for n = 0.
Change upsert(const std::shared_ptr<const schema::Table>& table, std::int64_t id, std::string v,
              std::int64_t n, std::uint64_t version) {
    Change c;
    c.table = table;
    const bool null = v.empty();
    const std::string r = n == 0 ? "NaN" : n < -1000 ? "-Infinity" : std::to_string(n) + ".25";
    const std::string q = n == 0 ? "Infinity" : std::to_string(n % 1000) + ".5";
    c.values = {
        schema::Value(std::to_string(id)),
        null ? schema::Value(schema::Null{}) : schema::Value(std::move(v)),
        schema::Value(std::to_string(n)),
        null ? schema::Value(schema::Null{}) : schema::Value(std::string(n % 2 == 0 ? "t" : "f")),
        schema::Value(n == 0 ? std::string("-32768") : std::to_string(n % 1000)),
        schema::Value(r),
        schema::Value(q),
        n == 0 ? schema::Value(schema::Null{})
               : schema::Value("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD38" + hex4(n, "0123456789ABCDEF"))};
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
        exec("CREATE TABLE t (id bigint PRIMARY KEY, v text, n int, f boolean, s smallint, r "
             "float8, q real, u uuid); CREATE PUBLICATION pub FOR TABLE t");
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
    const Rows got =
        pg().query(dest_db_, "SELECT id, v, n, f, s, r, q, u, _pgtide_lsn FROM t ORDER BY id");
    const std::string u = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd38";
    const Rows want{
        {"-9223372036854775808", "min", "-2147483648", "t", "-648", "-Infinity", "-648.5",
         u + "0000", "100"},
        {"1", "a", "1", "f", "1", "1.25", "1.5", u + "0001", "100"},
        {"2", "b", "20", "t", "20", "20.25", "20.5", u + "0014", "200"},
        {"3", "a", "3", "f", "3", "3.25", "3.5", u + "0003", "100"},
        {"5", "again", "50", "t", "50", "50.25", "50.5", u + "0032", "100"},
        {"6", "new", "60", "t", "60", "60.25", "60.5", u + "003c", "300"},
        {"9223372036854775807", "max", "0", "t", "-32768", "NaN", "Infinity", std::nullopt, "100"}};
    EXPECT_EQ(got, want);
}

/// Applies one upsert to table t whose column at `column` holds `text`; returns the message of
/// the DestinationError it throws ("" when none).
io::Task<std::string> apply_bad_value(std::string source_dsn, std::string url, std::size_t column,
                                      std::string text) {
    const schema::Table plain = co_await published_table(source_dsn);
    const auto table = std::make_shared<const schema::Table>(plain);
    std::unique_ptr<PostgresDestination> dest =
        co_await PostgresDestination::open(url, "pgtide-test", 1000);
    std::vector<schema::Table> create{plain};
    co_await dest->create_tables(std::move(create));
    Change c = upsert(table, 1, "a", 1, 100);
    c.values.at(column) = schema::Value(std::move(text));
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

TEST_F(PostgresMergeValues, AValueThatIsNotOfItsColumnsTypeIsRefusedNamingTheColumn) {
    PGTIDE_REQUIRE_PG();
    const std::string url = source_and_destination();
    const std::vector<std::tuple<std::size_t, std::string, std::string>> bad{
        {2, "n", "12x"},
        {2, "n", ""},
        {2, "n", "2147483648"},
        {4, "s", "32768"},
        {3, "f", "true"},
        {5, "r", "1.5x"},
        {6, "q", "0x1p3"},
        {7, "u", "not-a-uuid"},
        {7, "u", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380g00"}};
    for (const auto& [column, name, text] : bad) {
        const std::string message = io::sync_wait(loop_, apply_bad_value(dsn(), url, column, text));
        EXPECT_NE(message.find("'" + text + "' for column \"" + name + "\" of public.t"),
                  std::string::npos)
            << message;
    }
}

INSTANTIATE_TEST_SUITE_P(Upserts, PostgresMerge, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param) {
                             return std::string(param.param ? "InsertOnConflict" : "Merge");
                         });

} // namespace
} // namespace pgtide::replicate
