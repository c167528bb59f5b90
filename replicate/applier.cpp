// Applier: destination transactions, checkpoint CAS, feedback.
#include "replicate/applier.hpp"

#include <algorithm>

#include "io/log.hpp"
#include "replicate/errors.hpp"
#include "replicate/metrics.hpp"
#include "replicate/replication_connection.hpp"

namespace pgtide::replicate {

namespace {

std::int64_t unix_ms_now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

void publish_checkpoint(Metrics* metrics, const Checkpoint& checkpoint) {
    if (metrics != nullptr) {
        metrics->checkpoint_lsn = checkpoint.lsn.value();
        metrics->epoch = checkpoint.epoch;
    }
}

} // namespace

Applier::Applier(Destination& destination, Checkpoint durable, ApplierOptions options)
    : destination_(destination), checkpoint_(std::move(durable)), options_(options),
      last_commit_(std::chrono::steady_clock::now()), complete_lsn_(checkpoint_.lsn),
      last_progress_log_(last_commit_), last_request_check_(last_commit_) {
    publish_checkpoint(options_.metrics, checkpoint_);
}

void Applier::set_tables(std::vector<std::shared_ptr<const schema::Table>> tables) {
    tables_ = std::move(tables);
    rows_per_table_.assign(tables_.size(), 0);
    copy_plans_.assign(tables_.size(), std::nullopt);
    copied_since_.assign(tables_.size(), std::nullopt);
}

schema::Lsn Applier::recorded_copy_lsn(std::size_t table) const {
    return copied_since_.at(table).value_or(copy_version_.value_or(checkpoint_.consistent_lsn));
}

void Applier::log_progress(std::chrono::steady_clock::time_point now) {
    if (now - last_progress_log_ < options_.progress_interval) {
        return;
    }
    const double seconds = std::chrono::duration<double>(now - last_progress_log_).count();
    last_progress_log_ = now;
    const auto rate = [seconds](std::int64_t n) {
        return std::to_string(std::int64_t(double(n) / std::max(seconds, 0.001)));
    };
    if (checkpoint_.phase == Phase::Snapshot) {
        io::log_info("copy progress",
                     {{"rows", std::to_string(stats_.rows_copied)},
                      {"rows_per_s", rate(stats_.rows_copied - logged_.rows_copied)},
                      {"tables_copied", std::to_string(stats_.tables_copied)},
                      {"tables", std::to_string(tables_.size())},
                      {"epoch", std::to_string(checkpoint_.epoch)}});
    } else {
        io::log_info("stream progress", {{"transactions", std::to_string(stats_.transactions)},
                                         {"changes", std::to_string(stats_.changes)},
                                         {"changes_per_s", rate(stats_.changes - logged_.changes)},
                                         {"lsn", checkpoint_.lsn.str()}});
    }
    logged_ = stats_;
}

void Applier::note_progress(TableProgress progress) {
    std::string key = progress.source_table;
    progress_.insert_or_assign(std::move(key), std::move(progress));
}

Checkpoint Applier::next_checkpoint(schema::Lsn lsn) const {
    Checkpoint next = checkpoint_;
    next.lsn = std::max(lsn, checkpoint_.lsn);
    next.updated_at_unix_ms = unix_ms_now();
    next.lease_until_unix_ms = next.updated_at_unix_ms + options_.lease.count();
    return next;
}

io::Task<void> Applier::commit(schema::Lsn lsn) {
    Checkpoint next = next_checkpoint(lsn);
    const Checkpoint expected = checkpoint_;
    std::vector<TableProgress> progress;
    for (auto& [name, p] : progress_) {
        progress.push_back(std::move(p));
    }
    progress_.clear();
    const auto commit_started = std::chrono::steady_clock::now();
    const bool ok = co_await destination_.commit(std::move(progress), expected, next);
    const double commit_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - commit_started).count();
    in_transaction_ = false;
    rows_in_transaction_ = 0;
    if (!ok) {
        throw DefiniteError(ExitCode::Fenced,
                            "the checkpoint of slot " + expected.slot_name +
                                " was changed by another process (owner, epoch or LSN differ); "
                                "another pgtide took over this destination, stopping");
    }
    checkpoint_ = next;
    last_commit_ = std::chrono::steady_clock::now();
    stats_.transactions += pending_transactions_;
    stats_.changes += pending_changes_;
    if (Metrics* m = options_.metrics) {
        m->destination_commits += 1;
        m->commit_seconds.observe(commit_seconds);
        m->applied_transactions += pending_transactions_;
        m->applied_changes += pending_changes_;
        if (pending_commit_time_ != 0) {
            m->last_applied_commit_time = pending_commit_time_;
        }
        publish_checkpoint(m, checkpoint_);
    }
    pending_transactions_ = 0;
    pending_changes_ = 0;
    pending_commit_time_ = 0;
    log_progress(last_commit_);
    if (stream_ != nullptr) {
        // Only now is the checkpoint durable: the slot may move up to it, never further.
        co_await stream_->send_status(checkpoint_.lsn, checkpoint_.lsn, false);
        if (options_.copy_request_interval.count() > 0 &&
            last_commit_ - last_request_check_ >= options_.copy_request_interval) {
            last_request_check_ = last_commit_;
            const std::vector<TableProgress> states =
                co_await destination_.table_states(checkpoint_.slot_name);
            for (const TableProgress& p : states) {
                if (p.state == TableState::Init) {
                    throw CopyRequested(p.source_table, "pgtide resync asked for it");
                }
            }
        }
    }
}

io::Task<void> Applier::run(io::Channel<ApplyWork>& input) {
    for (;;) {
        std::optional<ApplyWork> work = co_await input.recv();
        if (!work || std::holds_alternative<Finish>(*work)) {
            break;
        }
        const std::uint64_t number = input.taken(); // values are taken in the order they came
        const std::optional<std::int64_t> copy_rows = beside_copy_value(*work);
        const auto* batch = std::get_if<ChangeBatch>(&*work);
        const bool stream_batch =
            beside_stream_ && batch != nullptr && !batch->catch_up && !batch->changes.empty();
        co_await apply(std::move(*work));
        note_waits(number, input.sent(), copy_rows, stream_batch);
    }
    // Commit what is complete: never a part of a source transaction.
    if (source_open_) {
        co_await abort();
        co_return;
    }
    if (in_transaction_ || complete_lsn_ > checkpoint_.lsn || !progress_.empty()) {
        co_await commit(complete_lsn_);
    }
}

std::optional<std::int64_t> Applier::beside_copy_value(const ApplyWork& work) const {
    if (!beside_stream_) {
        return std::nullopt;
    }
    if (const auto* rows = std::get_if<CopyRows>(&work)) {
        return rows->size();
    }
    if (std::holds_alternative<CopyPlanned>(work) || std::holds_alternative<CopyComplete>(work)) {
        return 0;
    }
    if (const auto* batch = std::get_if<ChangeBatch>(&work); batch != nullptr && batch->catch_up) {
        return std::int64_t(batch->changes.size());
    }
    return std::nullopt;
}

void Applier::note_waits(std::uint64_t number, std::uint64_t sent,
                         std::optional<std::int64_t> copy_rows, bool stream_batch) {
    if (stream_batch) {
        StreamWaits& w = stream_waits_;
        std::int64_t batches = 0;
        std::int64_t rows = 0;
        for (const CopyBatchApplied& c : copy_batches_) {
            if (c.sent >= number) { // it ended after this batch was queued, and went first
                batches += 1;
                rows += c.rows;
            }
        }
        w.stream_batches += 1;
        w.batches_waited += batches > 0 ? 1 : 0;
        w.longest_batches = std::max(w.longest_batches, batches);
        w.longest_rows = std::max(w.longest_rows, rows);
    }
    if (copy_rows) {
        copy_batches_.push_back(CopyBatchApplied{sent, *copy_rows});
    }
    // Values still queued are numbered above `number`: a copy batch that ended before they were
    // sent held none of them up.
    while (!copy_batches_.empty() && copy_batches_.front().sent <= number) {
        copy_batches_.pop_front();
    }
}

io::Task<void> Applier::apply(ApplyWork work) {
    const auto now = std::chrono::steady_clock::now();
    if (auto* planned = std::get_if<CopyPlanned>(&work)) {
        copy_plans_.at(planned->table) = std::move(planned->plan);
        co_return;
    }
    if (auto* rows = std::get_if<CopyRows>(&work)) {
        std::shared_ptr<const schema::Table> table = tables_.at(rows->table);
        const schema::Lsn version = copy_version_.value_or(checkpoint_.consistent_lsn);
        const std::int64_t n = rows->size();
        if (!in_transaction_) {
            transaction_started_ = now;
        }
        in_transaction_ = true;
        // Where the copy has got, committed with these rows: a later copy goes on from there.
        std::string copy_key;
        if (auto& plan = copy_plans_.at(rows->table); plan && rows->range < plan->ranges.size()) {
            RangeProgress& range = plan->ranges[rows->range];
            if (!rows->reached.empty()) {
                range.after = std::move(rows->reached);
            }
            if (rows->chunks_done_below) {
                // Read as unordered chunks: the range goes on from the next chunk's start.
                range.lower = std::move(rows->chunks_done_below);
                range.after.clear();
            }
            range.done = range.done || rows->range_done;
            copy_key = encode_copy_key(*plan);
        }
        rows_in_transaction_ += n;
        rows_per_table_.at(rows->table) += n;
        stats_.rows_copied += n;
        const auto& t = *table;
        TableProgress progress{t.qualified(),
                               t.target,
                               TableState::Copying,
                               checkpoint_.epoch,
                               recorded_copy_lsn(rows->table),
                               rows_per_table_.at(rows->table),
                               t.source_oid,
                               t.publication_membership,
                               t.source_columns,
                               std::move(copy_key)};
        // A copy beside the stream emptied its tables inside the stream's open transaction: its
        // rows go with that transaction.
        std::optional<TableProgress> apart;
        if (!beside_stream_) {
            apart = progress;
        }
        if (!rows->tuples.version_at.empty()) {
            co_await destination_.copy_tuples(table, std::move(rows->tuples), version,
                                              std::move(apart));
        } else if (n > 0) {
            co_await destination_.copy_rows(table, std::move(rows->rows), version,
                                            std::move(apart));
        }
        if (Metrics* m = options_.metrics) {
            m->rows_copied += n;
            m->snapshot_rows[t.qualified()] = rows_per_table_.at(rows->table);
        }
        note_progress(std::move(progress));
        log_progress(now);
        // Never inside a source transaction of the stream beside (a copy beside the stream).
        // At least every lease_renewal too: a copy's commits renew the lease.
        if ((rows_in_transaction_ >= options_.copy_commit_rows ||
             now - transaction_started_ >= options_.lease_renewal) &&
            !source_open_) {
            co_await commit(complete_lsn_);
        }
        co_return;
    }
    if (auto* done = std::get_if<CopyComplete>(&work)) {
        const auto& t = *tables_.at(done->table);
        if (!in_transaction_) {
            transaction_started_ = now;
        }
        in_transaction_ = true;
        co_await destination_.table_copied(tables_.at(done->table));
        // A table copied alone is ready as soon as it is whole: the stream applies its changes
        // from its copy's version on (DESIGN §4 "Copy ranges"), and a kill now does not copy
        // it again.
        // Copied beside the stream, it is ready once the catch-up has applied its changes since
        // the copy (CatchUpDone).
        note_progress(TableProgress{
            t.qualified(), t.target,
            copy_version_ && !beside_stream_ ? TableState::Ready : TableState::Copied,
            checkpoint_.epoch, recorded_copy_lsn(done->table), rows_per_table_.at(done->table),
            t.source_oid, t.publication_membership, t.source_columns});
        copy_plans_.at(done->table).reset();
        stats_.tables_copied += 1;
        if (options_.metrics != nullptr) {
            options_.metrics->tables_copied += 1;
            options_.metrics->snapshot_done.insert(t.qualified());
        }
        io::log_info("table copied", {{"table", t.qualified()},
                                      {"rows", std::to_string(rows_per_table_.at(done->table))},
                                      {"rows_now", std::to_string(done->rows)}});
        co_return;
    }
    if (auto* start = std::get_if<StartCopy>(&work)) {
        stream_waits_ = StreamWaits{};
        copy_batches_.clear();
        co_await prepare_table_copies(std::move(start->tables), start->version, true);
        co_return;
    }
    if (auto* done = std::get_if<CatchUpDone>(&work)) {
        // The stream skips these tables' changes committed below the hand-off (the catch-up
        // applied them), also after a restart from an older checkpoint.
        for (std::size_t i = 0; i < tables_.size(); ++i) {
            const auto& t = *tables_[i];
            note_progress(TableProgress{t.qualified(), t.target, TableState::Ready,
                                        checkpoint_.epoch, done->handoff, rows_per_table_.at(i),
                                        t.source_oid, t.publication_membership, t.source_columns});
            const StreamWaits& w = stream_waits_;
            io::log_info("table copied beside the stream is ready",
                         {{"table", t.qualified()},
                          {"handoff", done->handoff.str()},
                          {"stream_batches", std::to_string(w.stream_batches)},
                          {"stream_batches_behind_copy", std::to_string(w.batches_waited)},
                          {"longest_wait_batches", std::to_string(w.longest_batches)},
                          {"longest_wait_rows", std::to_string(w.longest_rows)}});
        }
        if (!in_transaction_) {
            transaction_started_ = now;
        }
        in_transaction_ = true;
        copy_version_.reset();
        beside_stream_ = false;
        co_return;
    }
    if (auto* batch = std::get_if<ChangeBatch>(&work)) {
        const auto n = std::int64_t(batch->changes.size());
        if (n > 0) {
            if (!in_transaction_) {
                transaction_started_ = now;
            }
            in_transaction_ = true;
            co_await destination_.apply_changes(std::move(batch->changes));
        }
        rows_in_transaction_ += n;
        pending_changes_ += n;
        if (batch->catch_up) {
            // Inside the destination transaction of the main stream, whose commits alone move
            // the checkpoint: a catch-up cut short leaves its tables copying, copied again by
            // the next session.
            co_return;
        }
        pending_transactions_ += batch->transactions;
        source_open_ = !batch->commit;
        if (batch->commit) {
            complete_lsn_ = std::max(complete_lsn_, batch->commit->end_lsn);
            pending_commit_time_ = batch->commit->commit_time;
            if (rows_in_transaction_ >= options_.batch_rows ||
                now - transaction_started_ >= options_.flush_interval) {
                co_await commit(complete_lsn_);
            }
        }
        co_return;
    }
    if (auto* idle = std::get_if<SourceIdle>(&work)) {
        // Everything before `position` has been received and applied: it may be confirmed
        // once the checkpoint says so.
        if (source_open_) {
            co_return;
        }
        complete_lsn_ = std::max(complete_lsn_, idle->position);
        if (in_transaction_ || (complete_lsn_ > checkpoint_.lsn &&
                                now - last_commit_ >= options_.idle_checkpoint_interval)) {
            co_await commit(complete_lsn_);
        }
        co_return;
    }
    if (auto* change = std::get_if<SchemaChange>(&work)) {
        // The table follows inside the destination transaction, so that the new column commits
        // with the changes using it. The name is taken first: the table moves into the call.
        const std::string name = change->table->qualified();
        if (!in_transaction_) {
            transaction_started_ = now;
        }
        in_transaction_ = true;
        co_await destination_.follow_schema(std::move(change->table));
        io::log_info("table schema changed", {{"table", name}});
        co_return;
    }
    if (std::holds_alternative<Tick>(work)) {
        if (!source_open_ && in_transaction_ &&
            now - transaction_started_ >= options_.flush_interval) {
            co_await commit(complete_lsn_);
        } else if (!in_transaction_ && now - last_commit_ >= options_.lease_renewal) {
            co_await commit(complete_lsn_); // renews the lease
        }
        co_return;
    }
}

io::Task<void> Applier::announce_slot(std::int64_t epoch, schema::Lsn from) {
    Checkpoint next = next_checkpoint(checkpoint_.lsn);
    next.epoch = epoch;
    next.phase = Phase::Snapshot;
    next.consistent_lsn = from;
    next.lsn = schema::Lsn{};
    const Checkpoint expected = checkpoint_;
    std::vector<TableProgress> no_progress;
    const bool ok = co_await destination_.commit(std::move(no_progress), expected, next);
    if (!ok) {
        throw DefiniteError(ExitCode::Fenced, "the checkpoint of slot " + expected.slot_name +
                                                  " was changed by another process");
    }
    checkpoint_ = next;
    complete_lsn_ = next.lsn;
    publish_checkpoint(options_.metrics, checkpoint_);
}

io::Task<void> Applier::start_epoch(std::int64_t epoch, schema::Lsn consistent_lsn) {
    Checkpoint next = next_checkpoint(consistent_lsn);
    next.epoch = epoch;
    next.phase = Phase::Snapshot;
    next.consistent_lsn = consistent_lsn;
    next.lsn = consistent_lsn;
    const Checkpoint expected = checkpoint_;
    std::vector<schema::Table> tables;
    for (const auto& t : tables_) {
        tables.push_back(*t);
    }
    std::vector<TableProgress> progress;
    for (const auto& t : tables) {
        progress.push_back(TableProgress{t.qualified(), t.target, TableState::Init, next.epoch,
                                         next.consistent_lsn, 0, t.source_oid,
                                         t.publication_membership, t.source_columns});
    }
    co_await destination_.reset_tables(next.slot_name, std::move(tables));
    const bool ok = co_await destination_.commit(std::move(progress), expected, next);
    if (!ok) {
        throw DefiniteError(ExitCode::Fenced, "the checkpoint of slot " + expected.slot_name +
                                                  " was changed by another process");
    }
    checkpoint_ = next;
    complete_lsn_ = consistent_lsn;
    rows_per_table_.assign(tables_.size(), 0);
    publish_checkpoint(options_.metrics, checkpoint_);
    if (Metrics* m = options_.metrics) {
        m->snapshot_rows.clear();
        m->snapshot_done.clear();
        for (const auto& t : tables_) {
            m->snapshot_rows[t->qualified()] = 0;
        }
    }
}

io::Task<void> Applier::complete_snapshot() {
    for (std::size_t i = 0; i < tables_.size(); ++i) {
        const auto& t = *tables_[i];
        note_progress(TableProgress{t.qualified(), t.target, TableState::Ready, checkpoint_.epoch,
                                    checkpoint_.consistent_lsn, rows_per_table_.at(i), t.source_oid,
                                    t.publication_membership, t.source_columns});
    }
    std::vector<std::string> targets;
    for (const auto& t : tables_) {
        targets.push_back(t->target);
    }
    co_await destination_.clear_tombstones(std::move(targets));
    in_transaction_ = true;
    // The CAS compares slot, epoch, owner and lsn, not the phase, so the phase written by
    // this commit can be set before it.
    checkpoint_.phase = Phase::Streaming;
    co_await commit(checkpoint_.consistent_lsn);
}

io::Task<void> Applier::resume_snapshot(std::vector<TableProgress> copied) {
    std::vector<std::string> targets;
    for (TableProgress& p : copied) {
        targets.push_back(p.target_table);
        p.state = TableState::Ready;
        note_progress(std::move(p));
    }
    co_await destination_.clear_tombstones(std::move(targets));
    in_transaction_ = true;
    checkpoint_.phase = Phase::Streaming; // see complete_snapshot
    co_await commit(checkpoint_.consistent_lsn);
}

io::Task<void> Applier::start_table_copies(std::vector<std::shared_ptr<const schema::Table>> tables,
                                           schema::Lsn version,
                                           std::vector<TableProgress> resumed) {
    co_await prepare_table_copies(std::move(tables), version, false, std::move(resumed));
    co_await commit(checkpoint_.lsn);
}

io::Task<void>
Applier::prepare_table_copies(std::vector<std::shared_ptr<const schema::Table>> tables,
                              schema::Lsn version, bool beside_stream,
                              std::vector<TableProgress> resumed) {
    set_tables(std::move(tables));
    copy_version_ = version;
    beside_stream_ = beside_stream;
    if (!in_transaction_) {
        transaction_started_ = std::chrono::steady_clock::now();
    }
    in_transaction_ = true;
    std::vector<schema::Table> copies;
    for (std::size_t i = 0; i < tables_.size(); ++i) {
        const auto& t = tables_[i];
        const auto going_on =
            std::find_if(resumed.begin(), resumed.end(),
                         [&t](const TableProgress& p) { return p.source_table == t->qualified(); });
        if (going_on != resumed.end()) {
            // Kept as the earlier copy left it; recorded with that copy's version, the older
            // one, so that the stream applies every change since (DESIGN §5's versions keep
            // the newer rows of this copy as they are).
            // Rows of a chunk it was cut short in are read again: gone first where they would
            // be there twice.
            std::int64_t discarded = 0;
            if (std::optional<CopyKey> key = parse_copy_key(going_on->copy_key)) {
                schema::Table table = *t;
                CopyKey progress = std::move(*key);
                discarded = co_await destination_.discard_unfinished_chunks(std::move(table),
                                                                            std::move(progress));
            }
            if (discarded > 0) {
                io::log_info(
                    "removed the rows of the chunks its copy was cut short in, which it "
                    "reads again",
                    {{"table", t->qualified()}, {"rows_removed", std::to_string(discarded)}});
            }
            TableProgress kept = *going_on;
            kept.rows_copied -= discarded;
            rows_per_table_[i] = kept.rows_copied;
            copied_since_[i] = kept.copy_lsn;
            note_progress(std::move(kept));
            continue;
        }
        copies.push_back(*t);
        note_progress(TableProgress{t->qualified(), t->target, TableState::Copying,
                                    checkpoint_.epoch, version, 0, t->source_oid,
                                    t->publication_membership, t->source_columns});
        if (Metrics* m = options_.metrics) {
            m->snapshot_rows[t->qualified()] = 0;
            m->snapshot_done.erase(t->qualified());
        }
    }
    co_await destination_.empty_tables(std::move(copies));
}

io::Task<void> Applier::complete_table_copies() {
    if (!copy_version_) {
        throw InternalError("complete_table_copies without start_table_copies");
    }
    // Each table became ready with its CopyComplete; no stream change was applied meanwhile, so
    // none left a tombstone.
    if (in_transaction_ || !progress_.empty()) {
        co_await commit(checkpoint_.lsn);
    }
    copy_version_.reset();
}

io::Task<void> Applier::record_tables(std::vector<TableProgress> states) {
    if (states.empty()) {
        co_return;
    }
    for (TableProgress& p : states) {
        note_progress(std::move(p));
    }
    in_transaction_ = true;
    co_await commit(checkpoint_.lsn);
}

io::Task<void> Applier::forget_tables(std::vector<std::string> source_tables) {
    if (source_tables.empty()) {
        co_return;
    }
    co_await destination_.forget_tables(checkpoint_.slot_name, std::move(source_tables));
    in_transaction_ = true;
    co_await commit(checkpoint_.lsn);
}

io::Task<void> Applier::release_lease() {
    co_await replace_checkpoint(checkpoint_.owner, 0);
}

io::Task<void> Applier::take_over(std::string owner) {
    co_await replace_checkpoint(std::move(owner), unix_ms_now() + options_.lease.count());
}

io::Task<void> Applier::replace_checkpoint(std::string owner, std::int64_t lease_until) {
    Checkpoint next = next_checkpoint(checkpoint_.lsn);
    next.owner = std::move(owner);
    next.lease_until_unix_ms = lease_until;
    const Checkpoint expected = checkpoint_;
    std::vector<TableProgress> no_progress;
    const bool ok = co_await destination_.commit(std::move(no_progress), expected, next);
    if (!ok) {
        throw DefiniteError(ExitCode::Fenced, "another pgtide took over slot " +
                                                  expected.slot_name + " at the same moment");
    }
    checkpoint_ = next;
    last_commit_ = std::chrono::steady_clock::now();
    publish_checkpoint(options_.metrics, checkpoint_);
}

void Applier::resume_from(Checkpoint durable) {
    checkpoint_ = std::move(durable);
    complete_lsn_ = checkpoint_.lsn;
    publish_checkpoint(options_.metrics, checkpoint_);
}

io::Task<void> Applier::abort() {
    // Also when in_transaction_ is false: a failed start_epoch may leave one open.
    co_await destination_.rollback();
    in_transaction_ = false;
    source_open_ = false;
    rows_in_transaction_ = 0;
    progress_.clear();
    copy_version_.reset();
    beside_stream_ = false;
    complete_lsn_ = checkpoint_.lsn;
    pending_changes_ = 0;
    pending_transactions_ = 0;
    pending_commit_time_ = 0;
}

} // namespace pgtide::replicate
