// SqliteWriter: the SQLite destination as the applier sees it. Every SqliteDestination call runs
// on the writer thread this object owns; the loop only awaits their completions.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "io/worker_thread.hpp"
#include "replicate/destination.hpp"
#include "replicate/sqlite_destination.hpp"

namespace pgtide::replicate {

class SqliteWriter final : public Destination {
public:
    /// Opens (creating if needed) the database at `path` on a new writer thread. Suspends.
    /// Throws DestinationError naming the path. `deletes`: see SqliteDestination.
    static io::Task<std::unique_ptr<SqliteWriter>> open(std::string path,
                                                        Deletes deletes = Deletes::Hard);
    ~SqliteWriter() override;

    std::string describe() const override { return "sqlite:" + path_; }
    io::Task<std::optional<Checkpoint>> load_checkpoint(std::string slot) override;
    io::Task<void> insert_checkpoint(Checkpoint c) override;
    io::Task<std::map<std::string, std::vector<schema::TableColumn>>>
    recorded_column_types() override;
    io::Task<std::vector<TableProgress>> table_states(std::string slot) override;
    io::Task<void> create_tables(std::vector<schema::Table> tables) override;
    io::Task<void> follow_schema(std::shared_ptr<const schema::Table> table) override;
    /// The rows commit with the applier's transaction, `apart` or not (one writer).
    io::Task<void> copy_rows(std::shared_ptr<const schema::Table> table,
                             std::vector<schema::Row> rows, schema::Lsn version,
                             std::optional<TableProgress> apart) override;
    /// Throws InternalError: tables copied into SQLite are never copy_binary.
    io::Task<void> copy_tuples(std::shared_ptr<const schema::Table> table, CopyTuples tuples,
                               schema::Lsn version, std::optional<TableProgress> apart) override;
    io::Task<void> apply_changes(std::vector<Change> changes) override;
    io::Task<void> reset_tables(std::string slot, std::vector<schema::Table> tables) override;
    io::Task<void> empty_tables(std::vector<schema::Table> tables) override;
    /// Nothing: SQLite tables keep their keys while they are copied.
    io::Task<void> table_copied(std::shared_ptr<const schema::Table>) override { co_return; }
    io::Task<void> request_copies(std::string slot,
                                  std::vector<std::string> source_tables) override;
    io::Task<void> forget_tables(std::string slot, std::vector<std::string> source_tables) override;
    io::Task<void> clear_tombstones(std::vector<std::string> targets) override;
    io::Task<std::int64_t> discard_unfinished_chunks(schema::Table table, CopyKey key) override;
    io::Task<bool> commit(std::vector<TableProgress> progress, Checkpoint expected,
                          Checkpoint next) override;
    io::Task<void> rollback() override;
    io::Task<void> close() override;

private:
    explicit SqliteWriter(std::string path);
    /// Frees, on the loop, the copied batches the writer has handed back.
    void free_written_batches();

    std::string path_;
    std::unique_ptr<SqliteDestination> db_; ///< used on writer_ only
    /// Copied batches the writer has written, handed back for the loop to free: their rows were
    /// allocated on the loop, and glibc frees another thread's memory slowly (the allocating
    /// arena's lock, taken against the loop's own allocations). At most the posted batches.
    std::mutex written_mutex_;
    std::vector<std::vector<schema::Row>> written_;
    /// Declared after db_ so that it stops first: batches still posted are dropped, not written
    /// into a closed database.
    io::WorkerThread writer_;
};

} // namespace pgtide::replicate
