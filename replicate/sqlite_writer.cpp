// SqliteWriter: SqliteDestination calls shipped to the writer thread.
#include "replicate/sqlite_writer.hpp"

#include "replicate/errors.hpp"

namespace pgtide::replicate {

namespace {

/// Opens a transaction unless one is open: the Destination contract opens one on first write.
void ensure_open(SqliteDestination& db) {
    if (!db.in_transaction()) {
        db.begin();
    }
}

} // namespace

SqliteWriter::SqliteWriter(std::string path) : path_(std::move(path)), writer_("sqlite-writer") {}

SqliteWriter::~SqliteWriter() = default;

io::Task<std::unique_ptr<SqliteWriter>> SqliteWriter::open(std::string path, Deletes deletes) {
    std::unique_ptr<SqliteWriter> writer(new SqliteWriter(path));
    auto job = [path, deletes]() { return std::make_unique<SqliteDestination>(path, deletes); };
    writer->db_ = co_await writer->writer_.run(std::move(job));
    co_return writer;
}

io::Task<std::optional<Checkpoint>> SqliteWriter::load_checkpoint(std::string slot) {
    SqliteDestination* db = db_.get();
    auto job = [db, slot]() { return db->load_checkpoint(slot); };
    co_return co_await writer_.run(std::move(job));
}

io::Task<std::map<std::string, std::vector<schema::TableColumn>>>
SqliteWriter::recorded_column_types() {
    SqliteDestination* db = db_.get();
    auto job = [db]() { return db->column_types(); };
    co_return co_await writer_.run(std::move(job));
}

io::Task<std::vector<TableProgress>> SqliteWriter::table_states(std::string slot) {
    SqliteDestination* db = db_.get();
    auto job = [db, slot]() { return db->load_tables(slot); };
    co_return co_await writer_.run(std::move(job));
}

io::Task<void> SqliteWriter::insert_checkpoint(Checkpoint c) {
    SqliteDestination* db = db_.get();
    auto job = [db, c]() {
        db->begin();
        db->insert_checkpoint(c);
        db->commit();
    };
    co_await writer_.run(std::move(job));
}

io::Task<void> SqliteWriter::create_tables(std::vector<schema::Table> tables) {
    SqliteDestination* db = db_.get();
    auto job = [db, tables = std::move(tables)]() {
        db->begin();
        for (const auto& t : tables) {
            db->ensure_table(t);
            db->record_column_types(t, false);
        }
        db->commit();
    };
    co_await writer_.run(std::move(job));
}

io::Task<void> SqliteWriter::follow_schema(std::shared_ptr<const schema::Table> table) {
    // DDL is transactional in SQLite: the new column commits with the changes using it.
    SqliteDestination* db = db_.get();
    auto job = [db, table = std::move(table)]() {
        ensure_open(*db);
        db->ensure_table(*table);
        db->record_column_types(*table, true);
    };
    co_await writer_.run(std::move(job));
}

void SqliteWriter::free_written_batches() {
    std::vector<std::vector<schema::Row>> written;
    {
        std::lock_guard lock(written_mutex_);
        written.swap(written_);
    }
    // Freed here, on the loop that allocated them.
}

io::Task<void> SqliteWriter::copy_rows(std::shared_ptr<const schema::Table> table,
                                       std::vector<schema::Row> rows, schema::Lsn version,
                                       std::optional<TableProgress>) {
    free_written_batches();
    SqliteDestination* db = db_.get();
    auto job = [this, db, table = std::move(table), rows = std::move(rows), version]() mutable {
        ensure_open(*db);
        db->copy_rows(*table, rows, version);
        std::lock_guard lock(written_mutex_);
        written_.push_back(std::move(rows));
    };
    // Posted, not awaited: the writer writes this batch while the loop decodes the next. Every
    // later call queues behind it and rethrows its failure (WorkerThread's poison).
    co_await writer_.post(std::move(job));
}

io::Task<void> SqliteWriter::copy_tuples(std::shared_ptr<const schema::Table> table, CopyTuples,
                                         schema::Lsn, std::optional<TableProgress>) {
    throw InternalError("the SQLite destination was handed binary COPY tuples of " +
                        table->qualified() + " (only PostgreSQL destinations copy in binary)");
    co_return;
}

io::Task<void> SqliteWriter::apply_changes(std::vector<Change> changes) {
    SqliteDestination* db = db_.get();
    auto job = [db, changes = std::move(changes)]() {
        ensure_open(*db);
        for (const auto& c : changes) {
            switch (c.kind) {
            case Change::Kind::Upsert:
                if (!c.moved_from.empty()) {
                    // The key changed: unchanged TOAST columns keep the old row's values.
                    if (auto old = db->read_row(*c.table, c.moved_from)) {
                        schema::Row filled = c.values;
                        for (std::size_t i = 0; i < filled.size() && i < old->size(); ++i) {
                            if (std::holds_alternative<schema::UnchangedToast>(filled[i])) {
                                filled[i] = std::move((*old)[i]);
                            }
                        }
                        db->upsert(*c.table, filled, c.version);
                        break;
                    }
                }
                db->upsert(*c.table, c.values, c.version);
                break;
            case Change::Kind::Delete:
                db->remove(*c.table, c.values, c.version, false);
                break;
            case Change::Kind::Truncate:
                db->truncate(*c.table, c.version, false);
                break;
            }
        }
    };
    co_await writer_.run(std::move(job));
}

io::Task<void> SqliteWriter::reset_tables(std::string slot, std::vector<schema::Table> tables) {
    SqliteDestination* db = db_.get();
    auto job = [db, slot, tables = std::move(tables)]() {
        ensure_open(*db);
        db->reset_tables(slot, tables);
    };
    co_await writer_.run(std::move(job));
}

io::Task<void> SqliteWriter::request_copies(std::string slot,
                                            std::vector<std::string> source_tables) {
    SqliteDestination* db = db_.get();
    auto job = [db, slot, source_tables = std::move(source_tables)]() {
        db->begin();
        db->request_copies(slot, source_tables);
        db->commit();
    };
    co_await writer_.run(std::move(job));
}

io::Task<void> SqliteWriter::empty_tables(std::vector<schema::Table> tables) {
    SqliteDestination* db = db_.get();
    auto job = [db, tables = std::move(tables)]() {
        ensure_open(*db);
        db->empty_tables(tables);
    };
    co_await writer_.run(std::move(job));
}

io::Task<void> SqliteWriter::forget_tables(std::string slot,
                                           std::vector<std::string> source_tables) {
    SqliteDestination* db = db_.get();
    auto job = [db, slot, source_tables = std::move(source_tables)]() {
        ensure_open(*db);
        db->forget_tables(slot, source_tables);
    };
    co_await writer_.run(std::move(job));
}

io::Task<void> SqliteWriter::clear_tombstones(std::vector<std::string> targets) {
    SqliteDestination* db = db_.get();
    auto job = [db, targets = std::move(targets)]() {
        ensure_open(*db);
        for (const auto& t : targets) {
            db->clear_tombstones(t);
        }
    };
    co_await writer_.run(std::move(job));
}

io::Task<std::int64_t> SqliteWriter::discard_unfinished_chunks(schema::Table, CopyKey) {
    // Nothing to remove: a table keeps its key while it is copied, and the versioned upsert
    // replaces a row read again (copies into SQLite read keyset pages anyway).
    co_return 0;
}

io::Task<bool> SqliteWriter::commit(std::vector<TableProgress> progress, Checkpoint expected,
                                    Checkpoint next) {
    free_written_batches(); // the copy's last batches do not outlive it
    SqliteDestination* db = db_.get();
    auto job = [db, progress = std::move(progress), expected, next]() {
        ensure_open(*db);
        for (const auto& p : progress) {
            db->set_table_progress(next.slot_name, p);
        }
        if (!db->cas_checkpoint(expected, next)) {
            db->rollback();
            return false;
        }
        db->commit();
        return true;
    };
    co_return co_await writer_.run(std::move(job));
}

io::Task<void> SqliteWriter::rollback() {
    SqliteDestination* db = db_.get();
    auto job = [db]() { db->rollback(); };
    co_await writer_.run(std::move(job));
}

io::Task<void> SqliteWriter::close() {
    std::unique_ptr<SqliteDestination>* db = &db_;
    auto job = [db]() { db->reset(); };
    co_await writer_.run(std::move(job));
}

} // namespace pgtide::replicate
