// SqliteDestination: the blocking SQLite writer: versioned tombstone-aware apply and metadata.
//
// Every method blocks on SQLite and must be called from one thread only (the destination's
// writer thread; the asynchronous wrapper that feeds it lives elsewhere).
//
// Versions (DESIGN §5). Every replicated row carries `_pgtide_lsn`, the version of the change
// that wrote it; deletes and truncates leave tombstones in `_pgtide_tombstones` while a copy of
// the table may still arrive. The rules:
//
//   arriving                 | row at version v      | no row, tombstone t | no row, none
//   snapshot row at C        | replace iff C > v     | skip iff t >= C     | insert
//   stream insert/update at L| replace iff L >= v    | insert iff L >= t   | insert ('u': skip)
//   stream delete at L       | delete iff L >= v     | t := max(t, L)      | t := L
//
// A table-wide tombstone (a truncate) counts as a tombstone of every key. The apply statements
// rely on one invariant that these rules keep: when a row exists at version v, no tombstone of
// its key (nor of its table) is above v. So each row costs one statement: an
// `INSERT … SELECT … WHERE NOT EXISTS (tombstone) ON CONFLICT DO UPDATE … WHERE version`.
//
// Soft deletes (Deletes::Soft): a delete or truncate marks the row `_pgtide_deleted = 1` at L
// (an UPDATE under the same conditions); an upsert sets it to 0. Emptying a table for its copy
// marks its rows deleted, versions kept; the copy's versioned upserts replace those it finds.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "replicate/checkpoint.hpp"
#include "replicate/destination.hpp"
#include "schema/lsn.hpp"
#include "schema/table.hpp"
#include "schema/value.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace pgtide::replicate {

class SqliteDestination {
public:
    /// Opens (creating if needed) the database file at `path` with journal_mode=WAL,
    /// synchronous=FULL, busy_timeout 5 s and foreign_keys off, and creates the metadata tables
    /// `_pgtide_checkpoint`, `_pgtide_tables`, `_pgtide_tombstones` when missing.
    /// Throws DestinationError naming the path and SQLite's message. `deletes`: what a stream
    /// delete does (Deletes::Soft: marks the row `_pgtide_deleted = 1`; see destination.hpp).
    explicit SqliteDestination(std::string path, Deletes deletes = Deletes::Hard);
    ~SqliteDestination();
    SqliteDestination(SqliteDestination&&) noexcept;
    SqliteDestination& operator=(SqliteDestination&&) noexcept;
    SqliteDestination(const SqliteDestination&) = delete;
    SqliteDestination& operator=(const SqliteDestination&) = delete;

    /// The checkpoint row of `slot`, or nullopt when there is none.
    /// Throws DestinationError (kind Corrupt when a stored value cannot be read back).
    std::optional<Checkpoint> load_checkpoint(const std::string& slot);
    /// Every `_pgtide_tables` row of `slot`, ordered by source table.
    std::vector<TableProgress> load_tables(const std::string& slot);

    /// Creates `table.target` when missing: each column declared exactly INTEGER/REAL/TEXT/BLOB
    /// per its storage class, key columns NOT NULL, PRIMARY KEY(key columns), and
    /// `_pgtide_lsn INTEGER NOT NULL` (soft deletes: and `_pgtide_deleted INTEGER NOT NULL
    /// DEFAULT 0`). When it exists: adds missing columns (`_pgtide_deleted` too, soft deletes);
    /// refuses (kind Schema) a different key, a column whose declared type differs, a table
    /// without `_pgtide_lsn`, or, with hard deletes, one with `_pgtide_deleted`. Names compare as
    /// SQLite does (ASCII case-insensitive). Forgets the table's cached statements. Runs in the
    /// current transaction, if any.
    void ensure_table(const schema::Table& table);

    /// BEGIN IMMEDIATE (waits up to the busy timeout for the write lock).
    void begin();
    void commit();
    /// Rolls back the open transaction; does nothing when there is none (SQLite may already
    /// have rolled back after SQLITE_FULL, SQLITE_IOERR, …).
    void rollback();
    /// True while a transaction begun by begin() is open.
    bool in_transaction() const;

    /// Snapshot rows at version C, in order: each replaces a row iff C > its version; with no
    /// row, is skipped iff a tombstone of its key or its table is at or above C, else inserted.
    /// Each row has one value per column of `table`, none UnchangedToast (InternalError).
    void copy_rows(const schema::Table& table, const std::vector<schema::Row>& rows,
                   schema::Lsn version);

    /// A stream insert or update at L: replaces a row iff L >= its version; with no row,
    /// inserts iff no tombstone of its key or table is above L. UnchangedToast values keep the
    /// destination's value (a partial update), and such an update with no row is skipped.
    void upsert(const schema::Table& table, const schema::Row& row, schema::Lsn version);

    /// A stream delete at L of `key` (values in `table.key_columns` order): deletes the row iff
    /// L >= its version (soft deletes: marks it deleted at L). With `record_tombstone`, tombstones
    /// the key at L (raising an existing tombstone to max(t, L)) whether or not a row was deleted.
    void remove(const schema::Table& table, const schema::Row& key, schema::Lsn version,
                bool record_tombstone);

    /// The row of `key` (values in `table.key_columns` order), each column as stored (a REAL
    /// column's NaN comes back as its TEXT 'NaN'), or nullopt when there is none.
    std::optional<schema::Row> read_row(const schema::Table& table, const schema::Row& key);

    /// A truncate at L: deletes (soft deletes: marks deleted at L) every row whose version is
    /// at or below L (a row at a newer
    /// version can only come from a copy that already reflects the truncate). With
    /// `record_tombstone`, a table-wide tombstone at L that gates copy_rows and upsert as a
    /// per-key one does.
    void truncate(const schema::Table& table, schema::Lsn version, bool record_tombstone);

    /// Removes every tombstone (per-key and table-wide) of `target_table`.
    void clear_tombstones(const std::string& target_table);

    /// Inserts or replaces `_pgtide_tables` (slot, p.source_table), stamping updated_at now.
    void set_table_progress(const std::string& slot, const TableProgress& p);

    /// Inserts the first checkpoint row of `c.slot_name`; DestinationError (kind Constraint)
    /// if the slot already has one.
    void insert_checkpoint(const Checkpoint& c);

    /// The compare-and-swap of DESIGN §1.4: sets the row of `expected.slot_name` to `next` iff
    /// it still has expected's epoch, owner and lsn. Returns false (fenced) when no row
    /// matched; the caller then rolls back. Must run inside a transaction (InternalError
    /// otherwise); `next.slot_name` must equal `expected.slot_name`.
    bool cas_checkpoint(const Checkpoint& expected, const Checkpoint& next);

    /// For a new epoch: empties each existing target table of `tables` and its tombstones,
    /// records their column types (replacing), and deletes the `_pgtide_tables` rows of
    /// `slot`. The checkpoint row is left to the caller.
    void reset_tables(const std::string& slot, const std::vector<schema::Table>& tables);
    /// Empties the target tables of `tables` (soft deletes: marks every row deleted, versions
    /// kept) and their tombstones, and records their column types as they are now (a copy of
    /// them follows).
    void empty_tables(const std::vector<schema::Table>& tables);
    /// Sets the `_pgtide_tables` state of `source_tables` for `slot` to init (a copy requested).
    void request_copies(const std::string& slot, const std::vector<std::string>& source_tables);
    /// Deletes the `_pgtide_tables` rows of `source_tables` for `slot`.
    void forget_tables(const std::string& slot, const std::vector<std::string>& source_tables);

    /// Records in `_pgtide_columns` the source type of each column of `table`: the type its
    /// destination values follow. `replace`: over what is recorded (the stream described the
    /// table, or it is copied anew); else only for columns without a record (start-up, where
    /// today's catalog may be ahead of the stream).
    void record_column_types(const schema::Table& table, bool replace);
    /// The recorded source column types, by target table (name, type, typmod, type_sql set).
    std::map<std::string, std::vector<schema::TableColumn>> column_types();

    const std::string& path() const { return path_; }

private:
    struct DbCloser {
        void operator()(sqlite3* db) const;
    };
    struct StmtFinalizer {
        void operator()(sqlite3_stmt* s) const;
    };
    using Db = std::unique_ptr<sqlite3, DbCloser>;
    using Statement = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

    /// Statements of one target table, prepared on first use, for the shape they were made for.
    struct TableStatements {
        std::vector<std::string> columns;
        std::vector<std::size_t> key_columns;
        Statement copy;
        Statement upsert;
        Statement copy_untombstoned;   ///< copy without the tombstone check
        Statement copy_many;           ///< copy_untombstoned of many rows at once
        Statement upsert_untombstoned; ///< upsert without the tombstone check
        Statement remove;
        std::map<std::vector<bool>, Statement> partial; ///< by which columns are unchanged
    };

    Statement prepare(const std::string& sql, const std::string& what);
    void exec(const std::string& sql, const std::string& what);
    [[noreturn]] void fail(int code, const std::string& what) const;
    int step(sqlite3_stmt* stmt, const std::string& what);
    /// As step(stmt, what), building the message "action object" only on failure (hot path).
    int step(sqlite3_stmt* stmt, const char* action, const std::string& object);
    TableStatements& statements_for(const schema::Table& table);
    sqlite3_stmt* metadata_statement(Statement& slot, const char* sql);
    void raise_tombstone(const std::string& target, const std::string& key, schema::Lsn version);
    /// Whether `target` may have tombstones. Most tables have none, and then a row needs no
    /// tombstone lookup (nor its encoded key): the hot path of copies and streams.
    bool may_have_tombstones(const std::string& target);
    bool table_exists(const std::string& name);

    std::string path_;
    Deletes deletes_;
    Db db_;
    Statement begin_;
    Statement commit_;
    Statement rollback_;
    Statement tombstone_;
    Statement load_checkpoint_;
    Statement load_tables_;
    Statement set_table_progress_;
    Statement insert_checkpoint_;
    Statement cas_checkpoint_;
    std::unordered_map<std::string, TableStatements> tables_;
    /// By target table: false only when it is known to have no tombstone. Raised before a
    /// tombstone is written, so a rolled-back transaction only leaves it conservatively true.
    std::unordered_map<std::string, bool> tombstones_;
};

} // namespace pgtide::replicate
