// Destination: what the applier and the coordinator need of a destination database, whichever
// it is (SQLite on its writer thread, PostgreSQL through an async connection on the loop).
//
// Every method suspends; none blocks the loop. A destination transaction opens on the first
// method that writes (copy_rows, apply_changes, follow_schema, reset_tables, clear_tombstones)
// and ends with commit(), which always writes the table progress and the checkpoint
// compare-and-swap in the same transaction as the rows (DESIGN §1.3–1.4), or with rollback().
// The versioned, tombstone-aware rules of DESIGN §5 hold for both implementations; see
// sqlite_destination.hpp and postgres_destination.hpp for how each keeps them.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/task.hpp"
#include "replicate/apply_work.hpp"
#include "replicate/checkpoint.hpp"
#include "schema/lsn.hpp"
#include "schema/table.hpp"

namespace pgtide::replicate {

/// What a stream delete does to the destination's row (config `destination.deletes`).
///
/// Soft: every target table has `_pgtide_deleted` (0 or 1). A delete, a truncate, or the old key
/// of a key change marks the row deleted at its version instead of removing it; an insert or
/// update at a version at or above the row's makes it live again. A table copied anew keeps its
/// rows marked deleted: those the copy finds again are replaced by the copied row, the others
/// stay. The versioned rules of DESIGN §5 are otherwise the same, a row marked deleted at v
/// ranking as a row at v.
enum class Deletes { Hard, Soft };

/// What kind of failure a DestinationError reports, for the caller's retry and exit decisions.
enum class DestinationErrorKind {
    Other,
    Busy,       ///< SQLITE_BUSY / SQLITE_LOCKED; PostgreSQL: lock timeout, deadlock
    Full,       ///< SQLITE_FULL; PostgreSQL 53xxx: disk or quota full
    ReadOnly,   ///< SQLITE_READONLY; PostgreSQL: read-only transaction, missing privilege
    CantOpen,   ///< SQLITE_CANTOPEN; PostgreSQL: cannot connect
    Io,         ///< SQLITE_IOERR; PostgreSQL: the connection broke
    Corrupt,    ///< SQLITE_CORRUPT / SQLITE_NOTADB, or metadata rows pgtide cannot read
    Constraint, ///< SQLITE_CONSTRAINT; PostgreSQL 23xxx
    Schema,     ///< an existing table pgtide cannot follow (key mismatch, type change, …)
};

/// A destination operation failed. The message names the database (path or host and database),
/// the table or metadata involved, and the database's own message (SQLite's with its extended
/// result code, PostgreSQL's with its SQLSTATE).
class DestinationError : public std::runtime_error {
public:
    DestinationError(DestinationErrorKind kind, int sqlite_code, const std::string& message)
        : std::runtime_error(message), kind_(kind), sqlite_code_(sqlite_code) {}
    DestinationErrorKind kind() const { return kind_; }
    /// SQLite's extended result code; 0 for PostgreSQL and for pgtide's own checks.
    int sqlite_code() const { return sqlite_code_; }

private:
    DestinationErrorKind kind_;
    int sqlite_code_;
};

class Destination {
public:
    virtual ~Destination() = default;

    /// "sqlite:PATH" or the PostgreSQL URL without its password: for messages.
    virtual std::string describe() const = 0;

    /// The checkpoint row of `slot`, or nullopt when there is none.
    virtual io::Task<std::optional<Checkpoint>> load_checkpoint(std::string slot) = 0;
    /// Inserts the first checkpoint row of `c.slot_name` in a transaction of its own.
    virtual io::Task<void> insert_checkpoint(Checkpoint c) = 0;
    /// The source column types the destination's values follow, by target table, where the
    /// destination's own column types do not tell (SQLite: `_pgtide_columns`). The stream
    /// compares the first description of each table with them, so that a type change made
    /// while pgtide was stopped is seen. Empty when the destination declares the source types.
    virtual io::Task<std::map<std::string, std::vector<schema::TableColumn>>>
    recorded_column_types() = 0;
    /// The `_pgtide_tables` rows of `slot`: the source tables this destination holds a copy
    /// of, or is copying, and where each copy stands.
    virtual io::Task<std::vector<TableProgress>> table_states(std::string slot) = 0;

    /// Asks for a new copy of each of `source_tables` (`pgtide resync`): sets its `_pgtide_tables`
    /// state to init, in a transaction of its own (no transaction may be open). The process
    /// that streams (this one later, or another now) copies them alone. Tables without a state
    /// row are left alone.
    virtual io::Task<void> request_copies(std::string slot,
                                          std::vector<std::string> source_tables) = 0;

    /// Creates (or, where compatible, adopts and extends) the target table of each of `tables`
    /// in a transaction of its own. No transaction may be open.
    virtual io::Task<void> create_tables(std::vector<schema::Table> tables) = 0;
    /// The source table's columns changed: the target table follows, in the current
    /// transaction, before the next change of that table.
    virtual io::Task<void> follow_schema(std::shared_ptr<const schema::Table> table) = 0;

    /// Snapshot rows of `table` at version `version` (the slot's consistent LSN).
    ///
    /// `apart`, when set, is the table's progress once these rows are in, and says that they
    /// may commit apart from the current transaction, together with that progress and before
    /// it: the table was emptied by a transaction already committed, and nothing else touches
    /// it until table_copied() (which commits them) or commit(). A copy beside the stream
    /// passes nullopt: its table was emptied inside the stream's open transaction.
    virtual io::Task<void> copy_rows(std::shared_ptr<const schema::Table> table,
                                     std::vector<schema::Row> rows, schema::Lsn version,
                                     std::optional<TableProgress> apart) = 0;
    /// The same for a table copied in binary (Table::copy_binary, set for PostgreSQL
    /// destinations only): its rows as binary COPY tuples.
    virtual io::Task<void> copy_tuples(std::shared_ptr<const schema::Table> table,
                                       CopyTuples tuples, schema::Lsn version,
                                       std::optional<TableProgress> apart) = 0;
    /// Every row of `table`'s copy has been handed to copy_rows: whatever the copy put off (a
    /// PostgreSQL destination's primary key) is done now, in the current transaction, before
    /// any stream change of the table.
    virtual io::Task<void> table_copied(std::shared_ptr<const schema::Table> table) = 0;
    /// Stream changes in source order (each with its transaction's commit LSN as version).
    /// Per key, the effect is that of applying them one by one.
    virtual io::Task<void> apply_changes(std::vector<Change> changes) = 0;
    /// For a new epoch: empties each target table of `tables` and its tombstones, and deletes
    /// the table progress rows of `slot`.
    virtual io::Task<void> reset_tables(std::string slot, std::vector<schema::Table> tables) = 0;
    /// Empties each target table of `tables` and its tombstones, in the current transaction,
    /// before a copy of the table alone (DESIGN §4 "Copy ranges").
    virtual io::Task<void> empty_tables(std::vector<schema::Table> tables) = 0;
    /// Deletes the `_pgtide_tables` rows of `source_tables` (tables that left the
    /// publications), in the current transaction; their target tables stay as they are.
    virtual io::Task<void> forget_tables(std::string slot,
                                         std::vector<std::string> source_tables) = 0;
    /// Removes every tombstone of the given target tables (their copy is complete).
    virtual io::Task<void> clear_tombstones(std::vector<std::string> targets) = 0;
    /// Before a copy of `table` cut short goes on from `key` (DESIGN §4 "Copy ranges"), in the
    /// current transaction: removes the rows that the copy reads again and that would otherwise
    /// be there twice, those of each unfinished range read as unordered chunks (no key reached),
    /// at or above its lower bound. Returns how many rows it removed. A destination whose
    /// table keeps its key during a copy (SQLite) removes none: the versioned upsert replaces
    /// a row read again.
    virtual io::Task<std::int64_t> discard_unfinished_chunks(schema::Table table, CopyKey key) = 0;

    /// Writes `progress`, then the checkpoint CAS from `expected` to `next`, then COMMIT (a
    /// transaction is opened first when none is). Returns false, rolled back, when the CAS
    /// found another owner, epoch or LSN (fenced).
    virtual io::Task<bool> commit(std::vector<TableProgress> progress, Checkpoint expected,
                                  Checkpoint next) = 0;
    /// Rolls back the open transaction, if any.
    virtual io::Task<void> rollback() = 0;
    /// Closes the database (after rolling back what is open).
    virtual io::Task<void> close() = 0;
};

} // namespace pgtide::replicate
