// SqliteDestination: every cell of DESIGN §5's versioned upsert table, metadata, storage classes.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include "replicate/checkpoint.hpp"
#include "replicate/errors.hpp"
#include "replicate/sqlite_destination.hpp"
#include "schema/lsn.hpp"
#include "schema/table.hpp"
#include "schema/value.hpp"
#include "tests/replicate/checkpoint_fixture.hpp"

namespace pgtide::replicate {
namespace {

using schema::Blob;
using schema::Lsn;
using schema::Null;
using schema::Row;
using schema::StorageClass;
using schema::Table;
using schema::TableColumn;
using schema::UnchangedToast;
using Rows = std::vector<std::vector<std::string>>;

const std::string kNull = "<null>";

TableColumn column(std::string name, StorageClass storage, bool key = false) {
    TableColumn c;
    c.name = std::move(name);
    c.storage = storage;
    c.key = key;
    return c;
}

// public.items (id INTEGER key, v TEXT, big TEXT)
Table items() {
    Table t;
    t.schema = "public";
    t.name = "items";
    t.target = "items";
    t.columns = {column("id", StorageClass::Integer, true), column("v", StorageClass::Text),
                 column("big", StorageClass::Text)};
    t.key_columns = {0};
    return t;
}

Lsn lsn(std::uint64_t v) {
    return Lsn(v);
}

class SqliteDestinationTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() /
               ("pgtide_sqlite_test_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
        path_ = (dir_ / "dest.db").string();
        dest_ = std::make_unique<SqliteDestination>(path_);
    }
    void TearDown() override {
        dest_.reset();
        std::filesystem::remove_all(dir_);
    }

    SqliteDestination& dest() { return *dest_; }
    /// A batch of one copied row.
    void copy_row(const Table& table, const Row& row, Lsn version) {
        dest().copy_rows(table, std::vector<Row>{row}, version);
    }

    // Rows of `sql` read through a separate connection (so only committed data is seen), each
    // cell as text, NULL as <null>.
    Rows query(const std::string& sql) {
        sqlite3* db = nullptr;
        EXPECT_EQ(sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
        sqlite3_stmt* stmt = nullptr;
        EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK)
            << sqlite3_errmsg(db);
        Rows rows;
        while (sqlite3_step(stmt) == SQLITE_ROW) {
            std::vector<std::string> row;
            for (int i = 0; i < sqlite3_column_count(stmt); ++i) {
                if (sqlite3_column_type(stmt, i) == SQLITE_NULL) {
                    row.push_back(kNull);
                } else {
                    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
                    row.emplace_back(p, std::size_t(sqlite3_column_bytes(stmt, i)));
                }
            }
            rows.push_back(std::move(row));
        }
        sqlite3_finalize(stmt);
        sqlite3_close(db);
        return rows;
    }

    Rows items_rows() { return query("SELECT id, v, big, _pgtide_lsn FROM items ORDER BY id"); }
    Rows tombstones() {
        return query("SELECT target_table, key, lsn FROM _pgtide_tombstones ORDER BY 1, 2");
    }

    std::filesystem::path dir_;
    std::string path_;
    std::unique_ptr<SqliteDestination> dest_;
};

Row item(std::int64_t id, std::string v, schema::Value big = Null{}) {
    return Row{id, std::move(v), std::move(big)};
}

Checkpoint checkpoint() {
    return testing::sample_checkpoint();
}

// ---- metadata tables ---------------------------------------------------------------------

TEST_F(SqliteDestinationTest, OpensInWalModeAndCreatesMetadataTables) {
    EXPECT_EQ(query("PRAGMA journal_mode"), (Rows{{"wal"}}));
    EXPECT_EQ(query("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"),
              (Rows{{"_pgtide_checkpoint"},
                    {"_pgtide_columns"},
                    {"_pgtide_tables"},
                    {"_pgtide_tombstones"}}));
    EXPECT_EQ(dest().path(), path_);
}

TEST_F(SqliteDestinationTest, OpenFailureNamesThePath) {
    const std::string bad = (dir_ / "missing" / "dir" / "x.db").string();
    try {
        SqliteDestination d(bad);
        FAIL() << "opened " << bad;
    } catch (const DestinationError& e) {
        EXPECT_EQ(e.kind(), DestinationErrorKind::CantOpen);
        EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
}

// ---- ensure_table ------------------------------------------------------------------------

TEST_F(SqliteDestinationTest, EnsureTableDeclaresExactTypesAndKey) {
    Table t = items();
    t.target = "we\"ird name";
    t.columns.push_back(column("r", StorageClass::Real));
    t.columns.push_back(column("b", StorageClass::Blob));
    dest().ensure_table(t);
    EXPECT_EQ(query("SELECT name, type, \"notnull\", pk FROM pragma_table_info('we\"ird name')"),
              (Rows{{"id", "INTEGER", "1", "1"},
                    {"v", "TEXT", "0", "0"},
                    {"big", "TEXT", "0", "0"},
                    {"r", "REAL", "0", "0"},
                    {"b", "BLOB", "0", "0"},
                    {"_pgtide_lsn", "INTEGER", "1", "0"}}));
    dest().ensure_table(t); // idempotent
}

TEST_F(SqliteDestinationTest, EnsureTableAddsMissingColumnAndKeepsRows) {
    dest().ensure_table(items());
    dest().upsert(items(), item(1, "a"), lsn(10));
    Table wider = items();
    wider.columns.push_back(column("added", StorageClass::Integer));
    dest().ensure_table(wider);
    EXPECT_EQ(query("SELECT id, v, added, _pgtide_lsn FROM items"),
              (Rows{{"1", "a", kNull, "10"}}));
    dest().upsert(wider, Row{std::int64_t(1), "b", Null{}, std::int64_t(7)}, lsn(11));
    EXPECT_EQ(query("SELECT id, v, added, typeof(added), _pgtide_lsn FROM items"),
              (Rows{{"1", "b", "7", "integer", "11"}}));
}

TEST_F(SqliteDestinationTest, EnsureTableRefusesKeyMismatch) {
    dest().ensure_table(items());
    Table other = items();
    other.key_columns = {1};
    try {
        dest().ensure_table(other);
        FAIL() << "key mismatch accepted";
    } catch (const DestinationError& e) {
        EXPECT_EQ(e.kind(), DestinationErrorKind::Schema);
        EXPECT_NE(std::string(e.what()).find("primary key (id) but the source key is (v)"),
                  std::string::npos)
            << e.what();
    }
}

TEST_F(SqliteDestinationTest, EnsureTableRefusesTypeChangeAndForeignTable) {
    dest().ensure_table(items());
    Table changed = items();
    changed.columns[1].storage = StorageClass::Integer;
    EXPECT_THROW(dest().ensure_table(changed), DestinationError);

    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE foreign_t (id INTEGER PRIMARY KEY)", nullptr, nullptr,
                           nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    Table foreign = items();
    foreign.target = "foreign_t";
    try {
        dest().ensure_table(foreign);
        FAIL() << "table without _pgtide_lsn accepted";
    } catch (const DestinationError& e) {
        EXPECT_EQ(e.kind(), DestinationErrorKind::Schema);
        EXPECT_NE(std::string(e.what()).find("not created by pgtide"), std::string::npos);
    }
}

// ---- snapshot rows (copy_rows) -----------------------------------------------------------

TEST_F(SqliteDestinationTest, CopyRowInsertsWhenNoRowNoTombstone) {
    dest().ensure_table(items());
    copy_row(items(), item(1, "a"), lsn(100));
    EXPECT_EQ(items_rows(), (Rows{{"1", "a", kNull, "100"}}));
}

TEST_F(SqliteDestinationTest, CopyRowReplacesOnlyOlderVersion) {
    dest().ensure_table(items());
    dest().upsert(items(), item(1, "stream@99"), lsn(99));
    dest().upsert(items(), item(2, "stream@100"), lsn(100));
    dest().upsert(items(), item(3, "stream@101"), lsn(101));
    for (std::int64_t id = 1; id <= 3; ++id) {
        copy_row(items(), item(id, "copy@100"), lsn(100));
    }
    EXPECT_EQ(items_rows(), (Rows{{"1", "copy@100", kNull, "100"},      // C > v: replaced
                                  {"2", "stream@100", kNull, "100"},    // C = v: kept
                                  {"3", "stream@101", kNull, "101"}})); // C < v: kept
}

// A batch is written 64 rows to a statement, the rest one by one: every row lands with its own
// values, and the version rules hold in both parts.
TEST_F(SqliteDestinationTest, CopyRowsOfABatchKeepEachRowsValuesAndTheVersionRules) {
    dest().ensure_table(items());
    dest().upsert(items(), item(10, "stream@99"), lsn(99));    // in the first 64: replaced
    dest().upsert(items(), item(70, "stream@100"), lsn(100));  // in the second 64: kept
    dest().upsert(items(), item(140, "stream@101"), lsn(101)); // in the rest: kept
    dest().upsert(items(), item(149, "stream@99"), lsn(99));   // in the rest: replaced
    std::vector<Row> batch;
    for (std::int64_t id = 1; id <= 150; ++id) {
        batch.push_back(id % 3 == 0 ? Row{id, std::string("copy") + std::to_string(id), Null{}}
                                    : Row{id, std::string("copy") + std::to_string(id),
                                          std::string(std::size_t(id), 'x')});
    }
    dest().copy_rows(items(), batch, lsn(100));
    Rows expected;
    for (std::int64_t id = 1; id <= 150; ++id) {
        const std::string i = std::to_string(id);
        if (id == 70) {
            expected.push_back({i, "stream@100", kNull, "100"});
        } else if (id == 140) {
            expected.push_back({i, "stream@101", kNull, "101"});
        } else {
            expected.push_back(
                {i, "copy" + i, id % 3 == 0 ? kNull : std::string(std::size_t(id), 'x'), "100"});
        }
    }
    EXPECT_EQ(items_rows(), expected);
}

TEST_F(SqliteDestinationTest, CopyRowRespectsKeyTombstone) {
    dest().ensure_table(items());
    dest().remove(items(), Row{std::int64_t(1)}, lsn(99), true);
    dest().remove(items(), Row{std::int64_t(2)}, lsn(100), true);
    dest().remove(items(), Row{std::int64_t(3)}, lsn(101), true);
    for (std::int64_t id = 1; id <= 3; ++id) {
        copy_row(items(), item(id, "copy@100"), lsn(100));
    }
    // Skip iff t >= C.
    EXPECT_EQ(items_rows(), (Rows{{"1", "copy@100", kNull, "100"}}));
}

TEST_F(SqliteDestinationTest, CopyRowRespectsTableWideTombstone) {
    dest().ensure_table(items());
    copy_row(items(), item(1, "old"), lsn(50));
    dest().truncate(items(), lsn(100), true);
    EXPECT_EQ(items_rows(), Rows{});
    EXPECT_EQ(tombstones(), (Rows{{"items", "*", "100"}}));
    copy_row(items(), item(1, "copy@99"), lsn(99));   // older than the truncate: skipped
    copy_row(items(), item(2, "copy@100"), lsn(100)); // t >= C: skipped
    copy_row(items(), item(3, "copy@101"), lsn(101)); // newer: inserted
    EXPECT_EQ(items_rows(), (Rows{{"3", "copy@101", kNull, "101"}}));
}

TEST_F(SqliteDestinationTest, TruncateKeepsRowsNewerThanItAndRaisesTableTombstone) {
    dest().ensure_table(items());
    copy_row(items(), item(1, "a"), lsn(100));
    dest().upsert(items(), item(2, "b"), lsn(200));
    dest().truncate(items(), lsn(150), true);
    EXPECT_EQ(items_rows(), (Rows{{"2", "b", kNull, "200"}}));
    dest().truncate(items(), lsn(120), true); // never lowers the tombstone
    EXPECT_EQ(tombstones(), (Rows{{"items", "*", "150"}}));
    dest().truncate(items(), lsn(300), false);
    EXPECT_EQ(items_rows(), Rows{});
    EXPECT_EQ(tombstones(), (Rows{{"items", "*", "150"}}));
}

TEST_F(SqliteDestinationTest, StreamInsertRespectsTableWideTombstone) {
    dest().ensure_table(items());
    dest().truncate(items(), lsn(100), true);
    dest().upsert(items(), item(1, "at99"), lsn(99));
    dest().upsert(items(), item(2, "at100"), lsn(100));
    EXPECT_EQ(items_rows(), (Rows{{"2", "at100", kNull, "100"}}));
}

// ---- stream inserts/updates (upsert) -----------------------------------------------------

TEST_F(SqliteDestinationTest, UpsertInsertsWhenNoRowNoTombstone) {
    dest().ensure_table(items());
    dest().upsert(items(), item(1, "a", std::string("x")), lsn(5));
    EXPECT_EQ(items_rows(), (Rows{{"1", "a", "x", "5"}}));
}

TEST_F(SqliteDestinationTest, UpsertReplacesIffNotOlder) {
    dest().ensure_table(items());
    for (std::int64_t id = 1; id <= 3; ++id) {
        copy_row(items(), item(id, "copy@100"), lsn(100));
    }
    dest().upsert(items(), item(1, "stream@99"), lsn(99));
    dest().upsert(items(), item(2, "stream@100"), lsn(100));
    dest().upsert(items(), item(3, "stream@101"), lsn(101));
    EXPECT_EQ(items_rows(), (Rows{{"1", "copy@100", kNull, "100"},      // L < v: kept
                                  {"2", "stream@100", kNull, "100"},    // L = v: replaced
                                  {"3", "stream@101", kNull, "101"}})); // L > v: replaced
}

TEST_F(SqliteDestinationTest, UpsertAfterTombstoneInsertsIffNotOlder) {
    dest().ensure_table(items());
    for (std::int64_t id = 1; id <= 3; ++id) {
        dest().remove(items(), Row{id}, lsn(100), true);
    }
    dest().upsert(items(), item(1, "at99"), lsn(99));
    dest().upsert(items(), item(2, "at100"), lsn(100));
    dest().upsert(items(), item(3, "at101"), lsn(101));
    EXPECT_EQ(items_rows(), (Rows{{"2", "at100", kNull, "100"}, {"3", "at101", kNull, "101"}}));
}

TEST_F(SqliteDestinationTest, PartialUpdateKeepsUnchangedToastColumns) {
    dest().ensure_table(items());
    copy_row(items(), item(1, "a", std::string("huge")), lsn(100));
    dest().upsert(items(), item(1, "b", UnchangedToast{}), lsn(110));
    EXPECT_EQ(items_rows(), (Rows{{"1", "b", "huge", "110"}}));
    // An older partial update loses.
    dest().upsert(items(), item(1, "older", UnchangedToast{}), lsn(105));
    EXPECT_EQ(items_rows(), (Rows{{"1", "b", "huge", "110"}}));
    // Equal version wins (L >= v), NULL is written as NULL.
    dest().upsert(items(), Row{std::int64_t(1), Null{}, UnchangedToast{}}, lsn(110));
    EXPECT_EQ(items_rows(), (Rows{{"1", kNull, "huge", "110"}}));
    // Every non-key column unchanged: only the version moves.
    dest().upsert(items(), Row{std::int64_t(1), UnchangedToast{}, UnchangedToast{}}, lsn(120));
    EXPECT_EQ(items_rows(), (Rows{{"1", kNull, "huge", "120"}}));
}

TEST_F(SqliteDestinationTest, UpdateWithUnchangedToastAndNoRowIsSkipped) {
    dest().ensure_table(items());
    dest().upsert(items(), item(1, "a", UnchangedToast{}), lsn(100));
    EXPECT_EQ(items_rows(), Rows{});
    dest().remove(items(), Row{std::int64_t(2)}, lsn(50), true);
    dest().upsert(items(), item(2, "a", UnchangedToast{}), lsn(100));
    EXPECT_EQ(items_rows(), Rows{});
}

TEST_F(SqliteDestinationTest, UnchangedToastRefusedInCopyAndKeys) {
    dest().ensure_table(items());
    EXPECT_THROW(copy_row(items(), item(1, "a", UnchangedToast{}), lsn(1)), InternalError);
    EXPECT_THROW(dest().upsert(items(), Row{UnchangedToast{}, "a", Null{}}, lsn(1)), InternalError);
    EXPECT_THROW(dest().upsert(items(), Row{std::int64_t(1)}, lsn(1)), InternalError);
}

// ---- stream deletes (remove) -------------------------------------------------------------

TEST_F(SqliteDestinationTest, RemoveDeletesIffNotOlderAndTombstones) {
    dest().ensure_table(items());
    for (std::int64_t id = 1; id <= 3; ++id) {
        copy_row(items(), item(id, "copy@100"), lsn(100));
    }
    dest().remove(items(), Row{std::int64_t(1)}, lsn(99), true);
    dest().remove(items(), Row{std::int64_t(2)}, lsn(100), true);
    dest().remove(items(), Row{std::int64_t(3)}, lsn(101), true);
    EXPECT_EQ(items_rows(), (Rows{{"1", "copy@100", kNull, "100"}}));
    EXPECT_EQ(tombstones(),
              (Rows{{"items", "i1:1", "99"}, {"items", "i1:2", "100"}, {"items", "i1:3", "101"}}));
}

TEST_F(SqliteDestinationTest, RemoveWithoutRowRaisesTombstoneToMax) {
    dest().ensure_table(items());
    dest().remove(items(), Row{std::int64_t(7)}, lsn(100), true); // no row, no tombstone: t := L
    EXPECT_EQ(tombstones(), (Rows{{"items", "i1:7", "100"}}));
    dest().remove(items(), Row{std::int64_t(7)}, lsn(90), true); // max(t, L)
    EXPECT_EQ(tombstones(), (Rows{{"items", "i1:7", "100"}}));
    dest().remove(items(), Row{std::int64_t(7)}, lsn(120), true);
    EXPECT_EQ(tombstones(), (Rows{{"items", "i1:7", "120"}}));
    EXPECT_EQ(items_rows(), Rows{});
}

TEST_F(SqliteDestinationTest, RemoveWithoutTombstoneLeavesNone) {
    dest().ensure_table(items());
    dest().upsert(items(), item(1, "a"), lsn(100));
    dest().remove(items(), Row{std::int64_t(1)}, lsn(100), false);
    dest().remove(items(), Row{std::int64_t(2)}, lsn(100), false);
    EXPECT_EQ(items_rows(), Rows{});
    EXPECT_EQ(tombstones(), Rows{});
    // With no tombstone, a late older copy reappears: that is why copies need tombstones.
    copy_row(items(), item(1, "late"), lsn(50));
    EXPECT_EQ(items_rows(), (Rows{{"1", "late", kNull, "50"}}));
}

TEST_F(SqliteDestinationTest, ClearTombstonesRemovesKeyAndTableWide) {
    dest().ensure_table(items());
    Table other = items();
    other.target = "other";
    dest().ensure_table(other);
    dest().remove(items(), Row{std::int64_t(1)}, lsn(10), true);
    dest().truncate(items(), lsn(20), true);
    dest().remove(other, Row{std::int64_t(1)}, lsn(10), true);
    dest().clear_tombstones("items");
    EXPECT_EQ(tombstones(), (Rows{{"other", "i1:1", "10"}}));
    copy_row(items(), item(1, "copy"), lsn(5));
    EXPECT_EQ(items_rows(), (Rows{{"1", "copy", kNull, "5"}}));
}

TEST_F(SqliteDestinationTest, CompositeTextKey) {
    Table t;
    t.schema = "s";
    t.name = "pairs";
    t.target = "s__pairs";
    t.columns = {column("a", StorageClass::Text, true), column("n", StorageClass::Integer),
                 column("b", StorageClass::Text, true)};
    t.key_columns = {2, 0}; // key order differs from column order
    dest().ensure_table(t);
    EXPECT_EQ(query("SELECT name, pk FROM pragma_table_info('s__pairs') WHERE pk > 0 ORDER BY pk"),
              (Rows{{"b", "1"}, {"a", "2"}}));
    dest().upsert(t, Row{std::string("x"), std::int64_t(1), std::string("y")}, lsn(10));
    dest().upsert(t, Row{std::string("x"), std::int64_t(2), std::string("y")}, lsn(11));
    dest().upsert(t, Row{std::string("xy"), std::int64_t(3), std::string("")}, lsn(12));
    EXPECT_EQ(query("SELECT a, n, b, _pgtide_lsn FROM s__pairs ORDER BY a"),
              (Rows{{"x", "2", "y", "11"}, {"xy", "3", "", "12"}}));
    dest().remove(t, Row{std::string("y"), std::string("x")}, lsn(20), true);
    EXPECT_EQ(query("SELECT a FROM s__pairs"), (Rows{{"xy"}}));
    EXPECT_EQ(tombstones(), (Rows{{"s__pairs", "t1:yt1:x", "20"}}));
    // The tombstone of (y, x) does not gate (xy, "") nor ("", xy).
    copy_row(t, Row{std::string(""), std::int64_t(4), std::string("xy")}, lsn(15));
    copy_row(t, Row{std::string("x"), std::int64_t(5), std::string("y")}, lsn(15));
    EXPECT_EQ(query("SELECT a, n, b FROM s__pairs ORDER BY a"),
              (Rows{{"", "4", "xy"}, {"xy", "3", ""}}));
}

TEST(TombstoneKey, EncodingIsTaggedAndLengthPrefixed) {
    EXPECT_EQ(encode_tombstone_key(Row{std::int64_t(1)}), "i1:1");
    EXPECT_EQ(encode_tombstone_key(Row{std::string("1")}), "t1:1");
    EXPECT_NE(encode_tombstone_key(Row{std::string("a:b")}),
              encode_tombstone_key(Row{std::string("a"), std::string("b")}));
    EXPECT_NE(encode_tombstone_key(Row{std::string("t1:a")}),
              encode_tombstone_key(Row{std::string(""), std::string("a")}));
    EXPECT_EQ(encode_tombstone_key(Row{Blob{std::string("\x00\xff", 2)}}), "b4:00ff");
    EXPECT_EQ(encode_tombstone_key(Row{1.5}), "r3:1.5");
    EXPECT_EQ(encode_tombstone_key(Row{-0.0}), encode_tombstone_key(Row{0.0}));
    EXPECT_EQ(encode_tombstone_key(Row{std::int64_t(-9), Null{}}), "i2:-9n0:");
    EXPECT_NE(encode_tombstone_key(Row{std::string("*")}), std::string(kTableTombstoneKey));
    EXPECT_THROW(encode_tombstone_key(Row{UnchangedToast{}}), InternalError);
}

// ---- storage classes ---------------------------------------------------------------------

TEST_F(SqliteDestinationTest, StorageClassesAreExact) {
    Table t;
    t.schema = "public";
    t.name = "typed";
    t.target = "typed";
    t.columns = {column("id", StorageClass::Integer, true), column("i", StorageClass::Integer),
                 column("r", StorageClass::Real), column("t", StorageClass::Text),
                 column("b", StorageClass::Blob)};
    t.key_columns = {0};
    dest().ensure_table(t);
    const std::int64_t max = std::numeric_limits<std::int64_t>::max();
    const std::int64_t min = std::numeric_limits<std::int64_t>::min();
    copy_row(t, Row{std::int64_t(1), max, 1.1, std::string("1.50"), Blob{"\x01\x02"}}, lsn(1));
    copy_row(t, Row{std::int64_t(2), min, std::string("NaN"), std::string(""), Blob{""}}, lsn(1));
    dest().upsert(
        t,
        Row{std::int64_t(3), Null{}, HUGE_VAL, std::string("  42"), Blob{std::string("a\0b", 3)}},
        lsn(1));
    dest().upsert(t, Row{std::int64_t(4), std::int64_t(0), -HUGE_VAL, Null{}, Null{}}, lsn(1));
    dest().upsert(
        t, Row{std::int64_t(5), std::int64_t(-1), std::nan(""), std::string("x\0y", 3), Blob{""}},
        lsn(1));
    EXPECT_EQ(query("SELECT id, typeof(i), i, typeof(r), quote(r), typeof(t), quote(t), "
                    "typeof(b), hex(b), length(b) FROM typed ORDER BY id"),
              (Rows{{"1", "integer", "9223372036854775807", "real", "1.1", "text", "'1.50'", "blob",
                     "0102", "2"},
                    {"2", "integer", "-9223372036854775808", "text", "'NaN'", "text", "''", "blob",
                     "", "0"},
                    {"3", "null", kNull, "real", "Inf", "text", "'  42'", "blob", "610062", "3"},
                    {"4", "integer", "0", "real", "-Inf", "null", "NULL", "null", "", kNull},
                    {"5", "integer", "-1", "text", "'NaN'", "text", "'x'", "blob", "", "0"}}));
    EXPECT_EQ(query("SELECT length(CAST(t AS BLOB)) FROM typed WHERE id = 5"), (Rows{{"3"}}));
    EXPECT_EQ(query("SELECT r = 1.1 FROM typed WHERE id = 1"), (Rows{{"1"}}));
}

// ---- transactions and checkpoints --------------------------------------------------------

TEST_F(SqliteDestinationTest, CheckpointInsertLoadAndCasSuccess) {
    EXPECT_EQ(dest().load_checkpoint("pgtide"), std::nullopt);
    const Checkpoint first = checkpoint();
    dest().begin();
    dest().insert_checkpoint(first);
    dest().commit();
    EXPECT_EQ(dest().load_checkpoint("pgtide"), first);
    EXPECT_EQ(query("SELECT typeof(lsn), lsn, phase FROM _pgtide_checkpoint"),
              (Rows{{"integer", std::to_string(0x16B374D848), "snapshot"}}));

    dest().ensure_table(items());
    Checkpoint next = first;
    next.phase = Phase::Streaming;
    next.lsn = lsn(0x16B374D900);
    next.lease_until_unix_ms += 5000;
    next.updated_at_unix_ms += 5000;
    dest().begin();
    dest().upsert(items(), item(1, "a"), lsn(0x16B374D8F0));
    EXPECT_TRUE(dest().cas_checkpoint(first, next));
    dest().commit();
    EXPECT_EQ(dest().load_checkpoint("pgtide"), next);
    EXPECT_EQ(items_rows(), (Rows{{"1", "a", kNull, std::to_string(0x16B374D8F0)}}));
    EXPECT_EQ(dest().load_checkpoint("other"), std::nullopt);
}

TEST_F(SqliteDestinationTest, InsertCheckpointTwiceFails) {
    dest().insert_checkpoint(checkpoint());
    try {
        dest().insert_checkpoint(checkpoint());
        FAIL() << "second checkpoint row accepted";
    } catch (const DestinationError& e) {
        EXPECT_EQ(e.kind(), DestinationErrorKind::Constraint);
    }
}

// Broken on purpose once, then reverted: SqliteDestination::cas_checkpoint
// (replicate/sqlite_destination.cpp) without `AND "owner" = ?13` in its UPDATE's WHERE. The
// wrong-owner case failed: `EXPECT_FALSE(dest().cas_checkpoint(expected, next))`.
TEST_F(SqliteDestinationTest, CasFailureIsFencedAndCallerRollsBack) {
    const Checkpoint stored = checkpoint();
    dest().insert_checkpoint(stored);
    dest().ensure_table(items());

    Checkpoint wrong_owner = stored;
    wrong_owner.owner = "owner-b";
    Checkpoint wrong_lsn = stored;
    wrong_lsn.lsn = lsn(stored.lsn.value() + 1);
    Checkpoint wrong_epoch = stored;
    wrong_epoch.epoch = 2;
    Checkpoint wrong_slot = stored;
    wrong_slot.slot_name = "other";

    for (const Checkpoint& expected : {wrong_owner, wrong_lsn, wrong_epoch, wrong_slot}) {
        Checkpoint next = expected;
        next.lsn = lsn(stored.lsn.value() + 100);
        next.phase = Phase::Streaming;
        dest().begin();
        dest().upsert(items(), item(1, "must vanish"), lsn(500));
        EXPECT_FALSE(dest().cas_checkpoint(expected, next));
        dest().rollback();
        EXPECT_FALSE(dest().in_transaction());
        EXPECT_EQ(items_rows(), Rows{});
        EXPECT_EQ(dest().load_checkpoint("pgtide"), stored);
    }
}

TEST_F(SqliteDestinationTest, CasOutsideTransactionIsAnInternalError) {
    dest().insert_checkpoint(checkpoint());
    EXPECT_THROW(dest().cas_checkpoint(checkpoint(), checkpoint()), InternalError);
}

TEST_F(SqliteDestinationTest, RollbackWithoutTransactionIsHarmless) {
    dest().rollback();
    dest().begin();
    EXPECT_TRUE(dest().in_transaction());
    dest().rollback();
    dest().rollback();
    EXPECT_FALSE(dest().in_transaction());
}

TEST_F(SqliteDestinationTest, SecondWriterIsBusyAfterTheTimeout) {
    dest().begin();
    SqliteDestination other(path_);
    try {
        other.begin(); // waits the 5 s busy timeout for the write lock
        FAIL() << "two writers";
    } catch (const DestinationError& e) {
        EXPECT_EQ(e.kind(), DestinationErrorKind::Busy) << e.what();
        EXPECT_EQ(e.sqlite_code() & 0xff, SQLITE_BUSY);
    }
    dest().rollback();
    other.begin();
    other.commit();
}

TEST_F(SqliteDestinationTest, TableProgressUpsertAndLoad) {
    TableProgress a{"public.a", "a",        TableState::Copying, 1, lsn(100), 10, 0,
                    "",         "1 \"id\"", "k1 0:1;o--0;"};
    TableProgress b{"s.b", "s__b", TableState::Init, 1, lsn(100), 0, 0, "", ""};
    dest().set_table_progress("pgtide", b);
    dest().set_table_progress("pgtide", a);
    dest().set_table_progress("another", a);
    a.state = TableState::Ready;
    a.rows_copied = 1000;
    dest().set_table_progress("pgtide", a);
    EXPECT_EQ(dest().load_tables("pgtide"), (std::vector<TableProgress>{a, b}));
    EXPECT_EQ(query("SELECT state FROM _pgtide_tables WHERE slot_name = 'pgtide' ORDER BY 1"),
              (Rows{{"init"}, {"ready"}}));

    dest().ensure_table(items());
    dest().upsert(items(), item(1, "a"), lsn(5));
    dest().remove(items(), Row{std::int64_t(2)}, lsn(6), true);
    dest().reset_tables("pgtide", {items()});
    EXPECT_EQ(items_rows(), Rows{});
    EXPECT_EQ(tombstones(), Rows{});
    EXPECT_EQ(dest().load_tables("pgtide"), std::vector<TableProgress>{});
    EXPECT_EQ(dest().load_tables("another").size(), 1u);
}

// The source OID each table was copied from, its publication membership and its column numbers
// round-trip; a destination written before pgtide recorded them gains the columns when opened,
// its rows reading 0 and '' (unknown).
TEST_F(SqliteDestinationTest, SourceOidsRoundTripAndOlderDestinationsGainTheColumn) {
    TableProgress a{"public.a", "a",           TableState::Ready,           1, lsn(100), 10,
                    16384,      "16390,16402", "1 \"id\",3 \"a \"\"b\"\"\""};
    dest().set_table_progress("pgtide", a);
    EXPECT_EQ(dest().load_tables("pgtide"), std::vector<TableProgress>{a});
    dest_.reset();

    const std::string old_path = (dir_ / "old.db").string();
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(old_path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           R"(CREATE TABLE "_pgtide_tables" ("slot_name" TEXT NOT NULL,
                                "source_table" TEXT NOT NULL, "target_table" TEXT NOT NULL,
                                "state" TEXT NOT NULL, "epoch" INTEGER NOT NULL,
                                "copy_lsn" INTEGER NOT NULL, "rows_copied" INTEGER NOT NULL,
                                "updated_at" INTEGER NOT NULL,
                                PRIMARY KEY ("slot_name", "source_table"));
                              INSERT INTO "_pgtide_tables" VALUES
                                ('pgtide', 'public.a', 'a', 'ready', 1, 100, 10, 0);)",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    SqliteDestination old(old_path);
    TableProgress recorded = a;
    recorded.source_oid = 0;
    recorded.membership.clear();
    recorded.source_columns.clear();
    EXPECT_EQ(old.load_tables("pgtide"), std::vector<TableProgress>{recorded});
    old.set_table_progress("pgtide", a);
    EXPECT_EQ(old.load_tables("pgtide"), std::vector<TableProgress>{a});
}

TEST_F(SqliteDestinationTest, StatesAndPhasesRoundTrip) {
    for (const TableState s :
         {TableState::Init, TableState::Copying, TableState::Copied, TableState::Ready}) {
        EXPECT_EQ(parse_table_state(to_string(s)), s);
    }
    EXPECT_EQ(parse_phase(to_string(Phase::Snapshot)), Phase::Snapshot);
    EXPECT_EQ(parse_phase(to_string(Phase::Streaming)), Phase::Streaming);
    EXPECT_EQ(parse_phase("Snapshot"), std::nullopt);
    EXPECT_EQ(parse_table_state("done"), std::nullopt);
}

TEST_F(SqliteDestinationTest, DurableAfterReopen) {
    dest().ensure_table(items());
    dest().begin();
    dest().insert_checkpoint(checkpoint());
    dest().upsert(items(), item(1, "kept", std::string("")), lsn(10));
    dest().remove(items(), Row{std::int64_t(2)}, lsn(11), true);
    dest().commit();
    dest().begin();
    dest().upsert(items(), item(3, "uncommitted"), lsn(12));
    dest_.reset(); // closing with an open transaction rolls it back

    dest_ = std::make_unique<SqliteDestination>(path_);
    EXPECT_EQ(dest().load_checkpoint("pgtide"), checkpoint());
    EXPECT_EQ(query("SELECT id, v, typeof(big), _pgtide_lsn FROM items ORDER BY id"),
              (Rows{{"1", "kept", "text", "10"}}));
    EXPECT_EQ(tombstones(), (Rows{{"items", "i1:2", "11"}}));
    dest().ensure_table(items()); // existing table accepted as is
    copy_row(items(), item(2, "late"), lsn(5));
    EXPECT_EQ(items_rows().size(), 1u);
}

TEST_F(SqliteDestinationTest, ManyRowsInOneTransaction) {
    dest().ensure_table(items());
    constexpr std::int64_t kRows = 20000;
    dest().begin();
    for (std::int64_t id = 0; id < kRows; ++id) {
        copy_row(items(), item(id, "v" + std::to_string(id)), lsn(100));
    }
    for (std::int64_t id = 0; id < kRows; id += 2) {
        dest().upsert(items(), item(id, "u"), lsn(200));
    }
    dest().commit();
    EXPECT_EQ(
        query("SELECT count(*), sum(v = 'u'), sum(_pgtide_lsn = 200) FROM items"),
        (Rows{{std::to_string(kRows), std::to_string(kRows / 2), std::to_string(kRows / 2)}}));
}

// The copy_key codec: every value comes back byte for byte, whatever it holds, and a text that
// is not one (hand-edited, cut short, from a later version) is refused rather than misread.
TEST(CopyKeyCodec, RoundTripsAndRefusesWhatItDidNotWrite) {
    CopyKey key;
    key.shape = "values\nid bigint\nkey 0\nfilter ";
    key.ranges.push_back(RangeProgress{std::nullopt, std::string("1000"), {"999"}, true});
    key.ranges.push_back(
        RangeProgress{std::string("1000"), std::string("it's 2:3;-"), {"1500", "a;b:c-"}, false});
    key.ranges.push_back(RangeProgress{std::string(""), std::nullopt, {}, false});
    const std::string text = encode_copy_key(key);
    EXPECT_EQ(parse_copy_key(text), std::optional<CopyKey>(key)) << text;
    EXPECT_EQ(parse_copy_key(encode_copy_key(CopyKey{})), std::optional<CopyKey>(CopyKey{}));
    EXPECT_EQ(parse_copy_key(""), std::nullopt);
    EXPECT_EQ(parse_copy_key("k2 " + text.substr(3)), std::nullopt);
    for (std::size_t cut = 0; cut < text.size(); ++cut) {
        EXPECT_EQ(parse_copy_key(text.substr(0, cut)), std::nullopt) << cut;
    }
    EXPECT_EQ(parse_copy_key(text + "x"), std::nullopt);
    EXPECT_EQ(parse_copy_key("k1 99999:x0;"), std::nullopt);
    EXPECT_EQ(parse_copy_key("k1 0:99999999999999999999;"), std::nullopt);
}

} // namespace
} // namespace pgtide::replicate
