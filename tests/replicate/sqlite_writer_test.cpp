// SqliteWriter on its writer thread: snapshot batches are posted, not awaited, so a batch that
// fails must still stop everything queued after it, above all the commit that would record the
// copy.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include "io/event_loop.hpp"
#include "io/sync_wait.hpp"
#include "io/task.hpp"
#include "replicate/checkpoint.hpp"
#include "replicate/errors.hpp"
#include "replicate/sqlite_writer.hpp"
#include "schema/lsn.hpp"
#include "schema/table.hpp"
#include "schema/value.hpp"
#include "tests/replicate/checkpoint_fixture.hpp"

namespace pgtide::replicate {
namespace {

using schema::Row;
using schema::StorageClass;
using schema::Table;
using schema::TableColumn;

Table items() {
    Table t;
    t.schema = "public";
    t.name = "items";
    t.target = "items";
    TableColumn id;
    id.name = "id";
    id.storage = StorageClass::Integer;
    id.key = true;
    TableColumn v;
    v.name = "v";
    v.storage = StorageClass::Text;
    t.columns = {id, v};
    t.key_columns = {0};
    return t;
}

Checkpoint checkpoint() {
    return testing::sample_checkpoint();
}

std::vector<Row> rows(std::int64_t from, std::int64_t to) {
    std::vector<Row> out;
    for (std::int64_t i = from; i <= to; ++i) {
        out.push_back(Row{i, std::string("row ") + std::to_string(i)});
    }
    return out;
}

// What happened: the error the loop saw, and whether the commit after it returned.
struct Outcome {
    std::string error;
    bool committed = false;
};

io::Task<Outcome> copy_with_a_broken_batch(std::string path) {
    std::unique_ptr<SqliteWriter> writer = co_await SqliteWriter::open(path);
    std::vector<Table> tables{items()};
    co_await writer->create_tables(tables);
    co_await writer->insert_checkpoint(checkpoint());
    auto table = std::make_shared<const Table>(items());
    Outcome outcome;
    try {
        co_await writer->copy_rows(table, rows(1, 100), checkpoint().consistent_lsn, std::nullopt);
        std::vector<Row> broken = rows(101, 200);
        broken[50].pop_back(); // one value short: the writer refuses the batch
        co_await writer->copy_rows(table, std::move(broken), checkpoint().consistent_lsn,
                                   std::nullopt);
        co_await writer->copy_rows(table, rows(201, 300), checkpoint().consistent_lsn,
                                   std::nullopt);
        Checkpoint next = checkpoint();
        next.lsn = schema::Lsn(checkpoint().lsn.value() + 0x1000);
        std::vector<TableProgress> progress{
            TableProgress{"public.items", "items", TableState::Copied, 1,
                          checkpoint().consistent_lsn, 300, 0, "", ""}};
        outcome.committed = co_await writer->commit(progress, checkpoint(), next);
    } catch (const std::exception& e) {
        outcome.error = e.what();
    }
    if (!outcome.error.empty()) {
        co_await writer->rollback(); // as the applier's abort() does
    }
    co_await writer->close();
    co_return outcome;
}

std::string committed_value(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    std::string value = "<none>";
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt* stmt = nullptr;
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
            sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
            value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
        }
        sqlite3_finalize(stmt);
    }
    sqlite3_close_v2(db);
    return value;
}

// Broken on purpose once, then reverted: WorkerThread::thread_main (io/worker_thread.cpp) did
// not poison the worker when a posted job failed (`if (false && job->failure() ...`). The
// commit ran after the refused batch and returned true: `outcome.error` was empty, and the
// destination held 250 committed rows (the refused batch's first 50 among them) and a table
// state row.
TEST(SqliteWriter, AFailedCopyBatchStopsEveryLaterWriteAndTheCommit) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("pgtide_sqlite_writer_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "dest.db").string();

    io::EventLoop loop;
    const Outcome outcome = io::sync_wait(loop, copy_with_a_broken_batch(path));
    EXPECT_FALSE(outcome.committed);
    EXPECT_NE(outcome.error.find("snapshot row for items has 1 values, expected 2"),
              std::string::npos)
        << outcome.error;
    EXPECT_EQ(committed_value(path, "SELECT count(*) FROM items"), "0");
    EXPECT_EQ(committed_value(path, "SELECT count(*) FROM _pgtide_tables"), "0");
    EXPECT_EQ(committed_value(path, "SELECT lsn FROM _pgtide_checkpoint"),
              std::to_string(checkpoint().lsn.value()));
    std::filesystem::remove_all(dir);
}

} // namespace
} // namespace pgtide::replicate
