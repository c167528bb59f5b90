// Applier: the only writer of the destination and the only place that advances the checkpoint.
//
// Order of every destination transaction (DESIGN §1.3): the rows, then the compare-and-swap of
// the checkpoint row, then COMMIT on the writer thread, and only after COMMIT returns, the
// standby status update to PostgreSQL. A crash anywhere before COMMIT loses the destination
// transaction and the source resends it (the slot never moved past the last durable
// checkpoint); a crash after COMMIT and before feedback makes the source resend transactions
// the destination already has, which the versioned upsert absorbs and the end-LSN skip avoids.
//
// Source transactions are grouped: a destination transaction only ever ends at a source commit
// (never in the middle of a source transaction), once it holds batch_rows rows or has been
// open for flush_interval (the stream's Ticks bring that moment when the source goes quiet).
// Committing whenever the input runs dry would commit once per small source transaction
// whenever the applier keeps up, which leaves SQLite bound by fsync. A failed CAS means another
// process took the destination: stop at once with exit code 4, without committing.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/channel.hpp"
#include "io/task.hpp"
#include "replicate/apply_work.hpp"
#include "replicate/checkpoint.hpp"
#include "replicate/destination.hpp"

namespace pgtide::replicate {

class ReplicationConnection;
struct Metrics;

struct ApplierOptions {
    std::int64_t batch_rows = 10000;
    std::int64_t copy_commit_rows = 50000; ///< rows of a copy per destination transaction
    std::chrono::milliseconds flush_interval{100};
    std::chrono::milliseconds lease{30000};
    std::chrono::milliseconds lease_renewal{10000};
    std::chrono::milliseconds idle_checkpoint_interval{10000};
    std::chrono::milliseconds progress_interval{10000}; ///< between progress log lines
    Metrics* metrics = nullptr;                         ///< counters to bump, if any
    /// While streaming, at most this often (after a commit) the table states are read: a table
    /// whose state is init (`pgtide resync`) ends the run with CopyRequested. Zero: never.
    std::chrono::milliseconds copy_request_interval{0};
};

struct ApplyStats {
    std::int64_t rows_copied = 0;
    std::int64_t tables_copied = 0;
    std::int64_t transactions = 0;
    std::int64_t changes = 0;
};

/// How the stream's batches waited behind a copy beside the stream: the copy's batches (and
/// their rows) the applier applied between the moment a stream batch was queued and the moment
/// it was applied. The copy hands its work over one batch at a time (Channel::send_and_wait),
/// so no stream batch waits behind more than one (issue 9: no other table pauses longer).
struct StreamWaits {
    std::int64_t stream_batches = 0;  ///< stream batches applied while the copy ran
    std::int64_t batches_waited = 0;  ///< of those, the ones that waited behind the copy's work
    std::int64_t longest_batches = 0; ///< the most copy batches one stream batch waited behind
    std::int64_t longest_rows = 0;    ///< the most copy rows one stream batch waited behind
};

class Applier {
public:
    Applier(Destination& destination, Checkpoint durable, ApplierOptions options);

    /// Tables CopyRows/CopyComplete refer to by index; target tables must exist.
    void set_tables(std::vector<std::shared_ptr<const schema::Table>> tables);
    /// Where feedback goes once a checkpoint is durable (nullptr: nowhere, during the copy).
    void set_stream(ReplicationConnection* stream) { stream_ = stream; }

    /// Applies work until Finish arrives or the channel closes, then commits what is complete.
    /// Suspends. Throws DefiniteError(Fenced) when the checkpoint CAS fails, and whatever the
    /// destination throws (the open destination transaction is rolled back by abort()).
    io::Task<void> run(io::Channel<ApplyWork>& input);

    /// Starts a new epoch: empties every target table and its state, records the slot's
    /// consistent LSN, phase snapshot. Commits. Suspends.
    io::Task<void> start_epoch(std::int64_t epoch, schema::Lsn consistent_lsn);
    /// Records, before CREATE_REPLICATION_SLOT, that epoch `epoch` is about to create its slot at
    /// or after WAL position `from` (phase snapshot, lsn unset, consistent_lsn = from), so that
    /// a crash before start_epoch leaves a slot this destination can prove its own
    /// (slot_proven_ours). The previous epoch is abandoned from here on.
    io::Task<void> announce_slot(std::int64_t epoch, schema::Lsn from);
    /// Every table is copied: tables ready, tombstones gone, phase streaming at the consistent
    /// LSN. Commits. Suspends.
    io::Task<void> complete_snapshot();
    /// Ends an epoch whose snapshot a killed process left unfinished: the tables of `copied`
    /// (copied whole in it) become ready, their tombstones go, and the phase becomes streaming
    /// at the consistent LSN; the other tables are left to start_table_copies(). Commits.
    /// Suspends.
    io::Task<void> resume_snapshot(std::vector<TableProgress> copied);
    /// Starts copies of `tables` alone while the epoch streams (tables that joined the
    /// publications, DESIGN §4 "Copy ranges"), read under a snapshot of their own whose
    /// consistent LSN `version` becomes the version of their rows: empties them, records them
    /// copying at `version`, commits. CopyRows and CopyComplete then refer to `tables` by index
    /// until complete_table_copies(). (A copy beside the stream starts with StartCopy instead,
    /// inside the stream's destination transaction; its tables are copied, not ready, until
    /// CatchUpDone.) A table among `resumed` (its state row, as an earlier copy left it) is
    /// not emptied: its copy goes on from its copy_key (SnapshotCopier::resume), and it keeps
    /// that copy's copy_lsn. Suspends.
    io::Task<void> start_table_copies(std::vector<std::shared_ptr<const schema::Table>> tables,
                                      schema::Lsn version, std::vector<TableProgress> resumed = {});
    /// The copies started by start_table_copies() are whole (each table became ready, at the
    /// copy's version, with its CopyComplete). Commits what is left (the checkpoint LSN does
    /// not move). Suspends.
    io::Task<void> complete_table_copies();
    /// Writes `states` as they are (a ready table's new publication membership). Commits
    /// when there are any. Suspends.
    io::Task<void> record_tables(std::vector<TableProgress> states);
    /// Deletes the state rows of tables that left the publications. Commits. Suspends.
    io::Task<void> forget_tables(std::vector<std::string> source_tables);
    /// Takes ownership of the checkpoint row with a fresh owner token and lease. Suspends.
    io::Task<void> take_over(std::string owner);
    /// Gives the lease up (clean exit), so the next process need not wait for it. Suspends.
    io::Task<void> release_lease();
    /// Rolls back an open destination transaction (after a failure). Suspends.
    io::Task<void> abort();
    /// Goes on from `durable`, the checkpoint as the destination holds it after its connection
    /// was lost and made again (after abort()): the last commit may have been made without
    /// pgtide hearing of it.
    void resume_from(Checkpoint durable);

    const Checkpoint& checkpoint() const { return checkpoint_; }
    const ApplyStats& stats() const { return stats_; }

private:
    /// A batch of a copy beside the stream, applied while `sent` values had been queued.
    struct CopyBatchApplied {
        std::uint64_t sent = 0;
        std::int64_t rows = 0;
    };

    io::Task<void> apply(ApplyWork work);
    /// When `work` is a value of a copy beside the stream (its plans, rows and ends, or the
    /// catch-up's batches): its rows or changes. Else nullopt.
    std::optional<std::int64_t> beside_copy_value(const ApplyWork& work) const;
    /// Value `number` of the input, just applied: a stream batch waited behind the copy
    /// batches of copy_batches_ applied after it was queued; a copy batch may hold up the
    /// stream batches queued after `number` and before it ended.
    void note_waits(std::uint64_t number, std::uint64_t sent, std::optional<std::int64_t> copy_rows,
                    bool stream_batch);
    /// start_table_copies() without its commit.
    io::Task<void> prepare_table_copies(std::vector<std::shared_ptr<const schema::Table>> tables,
                                        schema::Lsn version, bool beside_stream,
                                        std::vector<TableProgress> resumed = {});
    /// The copy_lsn to record for table `table`: that of the copy it goes on from, if any.
    schema::Lsn recorded_copy_lsn(std::size_t table) const;
    io::Task<void> commit(schema::Lsn lsn);
    Checkpoint next_checkpoint(schema::Lsn lsn) const;
    void note_progress(TableProgress progress);
    /// A progress line (copy or stream) when progress_interval has passed since the last.
    void log_progress(std::chrono::steady_clock::time_point now);
    io::Task<void> replace_checkpoint(std::string owner, std::int64_t lease_until);

    Destination& destination_;
    Checkpoint checkpoint_;
    ApplierOptions options_;
    ReplicationConnection* stream_ = nullptr;
    std::vector<std::shared_ptr<const schema::Table>> tables_;
    std::vector<std::int64_t> rows_per_table_;
    /// By table: its copy's ranges and how far each has got (CopyPlanned), while it copies.
    std::vector<std::optional<CopyKey>> copy_plans_;
    /// By table: the version of an earlier copy this one goes on from (kept rows are that old).
    std::vector<std::optional<schema::Lsn>> copied_since_;
    /// Set between start_table_copies() and complete_table_copies(): the version of the rows
    /// copied then (else copied rows carry the epoch's consistent LSN).
    std::optional<schema::Lsn> copy_version_;
    bool beside_stream_ = false; ///< the copy of copy_version_ runs while the stream applies
    /// The copy batches applied that ended after a value still queued was sent.
    std::deque<CopyBatchApplied> copy_batches_;
    StreamWaits stream_waits_;
    std::map<std::string, TableProgress>
        progress_; ///< by source table: written with the next commit

    bool in_transaction_ = false;
    std::int64_t rows_in_transaction_ = 0;
    std::chrono::steady_clock::time_point transaction_started_;
    std::chrono::steady_clock::time_point last_commit_;
    schema::Lsn complete_lsn_; ///< end LSN of the last whole source transaction applied
    bool source_open_ = false; ///< changes of an uncommitted source transaction are applied
    std::int64_t pending_transactions_ = 0;
    std::int64_t pending_changes_ = 0;
    std::int64_t pending_commit_time_ = 0; ///< of the last source commit not yet durable
    ApplyStats stats_;
    ApplyStats logged_; ///< stats_ at the last progress line
    std::chrono::steady_clock::time_point last_progress_log_;
    std::chrono::steady_clock::time_point last_request_check_;
};

} // namespace pgtide::replicate
