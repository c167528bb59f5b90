// ApplyWork: what the snapshot readers and the stream reader hand to the applier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "replicate/checkpoint.hpp"
#include "schema/lsn.hpp"
#include "schema/table.hpp"
#include "schema/value.hpp"

namespace pgtide::replicate {

/// One row change of the stream, already decoded to canonical values.
struct Change {
    enum class Kind { Upsert, Delete, Truncate };
    Kind kind = Kind::Upsert;
    std::shared_ptr<const schema::Table> table;
    schema::Row values;  ///< Upsert: every column (UnchangedToast allowed); Delete: key columns
    schema::Lsn version; ///< commit LSN of the source transaction
    /// An Upsert whose key changed while some columns are UnchangedToast: the old key, whose
    /// destination row holds those columns' values (the delete of the old key follows). Empty
    /// otherwise.
    schema::Row moved_from = {};
};

/// Rows of a table whose source binary COPY fields the destination takes as they are
/// (Table::copy_binary), in the destination's binary COPY tuple format: per tuple the field
/// count, the columns' fields as the source sent them, then an 8-byte _pgtide_lsn field whose
/// value the destination fills in with the copy's version (the reader does not know it). No
/// value is decoded or copied one by one on the way.
struct CopyTuples {
    std::string bytes;
    std::vector<std::size_t> version_at; ///< per tuple: the offset of its _pgtide_lsn value
};

/// Rows of one table read under the snapshot, at the snapshot's consistent LSN.
struct CopyRows {
    std::size_t table = 0; ///< index into the coordinator's table list
    std::vector<schema::Row> rows;
    std::size_t range = 0; ///< index into the table's CopyPlanned ranges
    /// The key of the last row of the batch (RangeProgress::after); empty without rows.
    std::vector<std::string> reached = {};
    bool range_done = false; ///< the range's last batch (possibly without rows)
    /// Set on a batch of a range read as unordered chunks: every row of the range below this
    /// first-key value (its text output) is in this batch or an earlier one, so the range's
    /// progress goes on from here (RangeProgress::lower; `after` stays empty).
    std::optional<std::string> chunks_done_below = {};
    CopyTuples tuples = {}; ///< the rows instead of `rows` when the table is copy_binary

    std::int64_t size() const { return std::int64_t(rows.size() + tuples.version_at.size()); }
};

/// Sent before any row of a table: the key ranges its copy reads (and how far an earlier copy
/// got in each), which the applier keeps up to date in the table's `copy_key`.
struct CopyPlanned {
    std::size_t table = 0;
    CopyKey plan;
};

/// Every row of a table has been sent.
struct CopyComplete {
    std::size_t table = 0;
    std::int64_t rows = 0;
};

/// A source commit: every change of the transaction has been handed over.
struct SourceCommit {
    schema::Lsn end_lsn;
    std::int64_t commit_time = 0; ///< PostgreSQL clock (µs since 2000-01-01)
};

/// Stream changes in source order, possibly of several source transactions. `commit` is set
/// when the batch ends exactly at a source commit (then every transaction in it is whole);
/// otherwise its last transaction continues in the next batch.
struct ChangeBatch {
    std::vector<Change> changes;
    std::optional<SourceCommit> commit;
    std::int64_t transactions = 0; ///< source commits inside the batch
    /// Changes of tables copied beside the stream, read by the catch-up stream from the copy's
    /// own slot: applied, but no position of the main stream (commit, checkpoint).
    bool catch_up = false;
};

/// A copy beside the stream starts: `tables` (CopyRows and CopyComplete refer to them by index
/// from now on) are emptied and copying at `version`, the consistent LSN of the copy's snapshot,
/// inside the destination transaction of the stream.
struct StartCopy {
    std::vector<std::shared_ptr<const schema::Table>> tables;
    schema::Lsn version;
};

/// The catch-up of the tables copied beside the stream has applied every of their transactions
/// committed below `handoff`; the main stream applies the rest. The tables become ready.
struct CatchUpDone {
    schema::Lsn handoff;
};

/// Nothing is open and the server has sent everything before `position`.
struct SourceIdle {
    schema::Lsn position;
};

/// The reader is stopping (--once target reached, or a signal): commit what is complete.
struct Finish {};

/// Time passed: renew the lease, flush a stale destination transaction.
struct Tick {};

/// The source table's columns changed (a Relation message): the destination table must follow
/// before the next change of that table is applied.
struct SchemaChange {
    std::shared_ptr<const schema::Table> table;
};

using ApplyWork = std::variant<CopyRows, CopyComplete, ChangeBatch, SourceIdle, Finish, Tick,
                               SchemaChange, StartCopy, CatchUpDone, CopyPlanned>;

} // namespace pgtide::replicate
