// Coordinator: the order of phases, from the destination's checkpoint to a running stream.
//
// 1. Open the destination and read its checkpoint row; connect to the source, IDENTIFY_SYSTEM,
//    and refuse a different cluster or database (exit 4), or a destination whose lease another
//    process holds (exit 4).
// 2. No checkpoint, an unfinished snapshot, or --resnapshot: start a new epoch. The slot is
//    created with an exported snapshot, and the slot name, its consistent LSN C and the epoch
//    are committed to the destination BEFORE any row is copied, so that a crash during the
//    copy leaves a row that proves which slot is ours (and may be dropped) and says that the
//    copy must start over. Readers copy every table under the snapshot; then every table is
//    marked ready and the phase becomes streaming at C, in one commit.
// 3. Stream from the checkpoint LSN on the same slot. A lost connection after the snapshot is
//    an ordinary reconnect (backoff with jitter, capped at 10 s): the destination transaction
//    in progress is rolled back and the stream restarts at the durable checkpoint. The spool
//    directory of streamed transactions is cleared of a crashed run's files only now, once
//    this process is known to own the slot, and emptied again when the run ends.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/task.hpp"
#include "replicate/destination.hpp"
#include "replicate/metrics.hpp"
#include "replicate/source_catalog.hpp"
#include "schema/lsn.hpp"

namespace pgtide::replicate {

struct RunOptions {
    std::string source_dsn;
    std::vector<std::string> publications;
    std::string slot = "pgtide";
    bool temporary_slot = false;
    bool existing_slot_restart = false; ///< existing_slot = "restart_snapshot"
    std::optional<std::chrono::milliseconds> reconnect_deadline;
    std::string sqlite_path;         ///< the destination when postgres_url is empty
    std::string postgres_url;        ///< a PostgreSQL destination (postgresql://…)
    Deletes deletes = Deletes::Hard; ///< destination.deletes
    /// destination.reconnect_deadline (PostgreSQL); unset = unlimited.
    std::optional<std::chrono::milliseconds> destination_reconnect_deadline;
    // [snapshot]
    int parallel_tables = 4;
    std::int64_t page_rows = 2048;
    std::int64_t batch_rows = 512;
    std::uint64_t batch_bytes = 4u << 20;
    std::uint64_t max_row_bytes = 64u << 20;
    int max_attempts = 3;
    std::int64_t split_rows = 1000000;     ///< a table estimated larger is copied as key ranges
    std::int64_t chunk_rows = 65536;       ///< rows per unordered chunk (PostgreSQL destinations)
    std::int64_t copy_commit_rows = 50000; ///< rows of a copy per destination commit
    // [stream], [apply]
    std::chrono::milliseconds status_interval{10000};
    std::chrono::milliseconds receive_timeout{30000}; ///< stream.receive_timeout
    bool stream_binary = false;
    /// stream.large_transactions = "stream": ask for streaming 'on' and spool in-progress
    /// transactions to files until they end; false ("off"): the source sends them at commit.
    bool stream_large_transactions = true;
    /// stream.spool_dir: the spool files live in its subdirectory pgtide-spool-<slot>; empty
    /// means $TMPDIR, else /tmp.
    std::string spool_dir;
    std::chrono::milliseconds heartbeat_interval{10000};
    /// How often the stream looks for tables the publications gained.
    std::chrono::milliseconds publication_poll_interval{10000};
    std::chrono::milliseconds flush_interval{100};
    std::int64_t apply_batch_rows = 10000;
    std::vector<TableOverride> tables;
    bool once = false;
    bool resnapshot = false;
    /// "HOST:PORT" to serve Prometheus metrics at /metrics while the run lasts; off when unset.
    std::optional<std::string> metrics_listen;
};

struct RunSummary {
    std::int64_t tables_copied = 0;
    std::int64_t rows_copied = 0;
    std::int64_t transactions = 0;
    std::int64_t changes = 0;
    std::int64_t commits = 0; ///< destination transactions committed by the applier
    schema::Lsn lsn;
    std::int64_t epoch = 0;
};

class Coordinator {
public:
    explicit Coordinator(RunOptions options);

    /// Runs until --once reaches its target, a stop request is honoured, or a definite error.
    /// With metrics_listen, serves /metrics on the loop for as long (binding first: a busy
    /// address is DefiniteError(Usage) before any replication work).
    /// Suspends. Throws DefiniteError (with its exit code) and whatever cannot be retried.
    io::Task<RunSummary> run();

    /// Asks the run to stop at the next transaction boundary (SIGINT/SIGTERM).
    void request_stop() { stop_requested_ = true; }

    /// The run's counters, for the progress display (read on the loop thread).
    const Metrics& metrics() const { return metrics_; }

private:
    io::Task<RunSummary> run_phases();

    RunOptions options_;
    bool stop_requested_ = false;
    Metrics metrics_;
};

} // namespace pgtide::replicate
