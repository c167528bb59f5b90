// Metrics: the counters and gauges of one `pgtide run`, and their Prometheus text rendering.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace pgtide::replicate {

/// Cumulative histogram of durations in seconds, with Prometheus-style `le` buckets.
struct Histogram {
    static constexpr std::array<double, 12> kBounds{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1,   0.25,   0.5,   1.0,  2.5,   5.0};
    std::array<std::uint64_t, kBounds.size()> buckets{}; ///< observations <= bound (not summed)
    std::uint64_t count = 0;
    double sum = 0;

    void observe(double seconds);
};

/// Plain counters and gauges, written by the coordinator, the applier and the stream on the loop
/// thread and read there by the metrics endpoint. Counters only grow during a process's life.
struct Metrics {
    enum class Phase { Starting, Snapshot, Streaming, Reconnecting, Stopping };

    Phase phase = Phase::Starting;
    std::int64_t epoch = 0;
    std::uint64_t checkpoint_lsn = 0; ///< durable checkpoint (bytes)
    std::uint64_t source_wal_end = 0; ///< the source's WAL end from keepalives/XLogData; 0: unknown
    /// Commit time of the last source transaction whose changes are durable, PostgreSQL µs
    /// since 2000-01-01; 0 while none has been applied.
    std::int64_t last_applied_commit_time = 0;

    std::int64_t applied_transactions = 0;
    std::int64_t applied_changes = 0;
    std::int64_t rows_copied = 0;
    std::int64_t tables_copied = 0;
    std::map<std::string, std::int64_t> snapshot_rows;      ///< by source table, this epoch
    std::map<std::string, std::int64_t> snapshot_estimates; ///< pg_class.reltuples by table
    std::set<std::string> snapshot_done; ///< tables whose copy completed, this epoch
    std::int64_t destination_commits = 0;
    Histogram commit_seconds;
    std::int64_t reconnects = 0;
    std::int64_t destination_reconnects = 0; ///< a PostgreSQL destination's lost connections
    std::int64_t last_error_unix_s = 0;      ///< 0: none
    /// Streamed in-progress transactions (stream.large_transactions = "stream") that ended.
    std::int64_t streamed_committed = 0;
    std::int64_t streamed_aborted = 0;
    std::uint64_t spooled_bytes = 0; ///< written to spool files, aborted parts included
};

/// The Prometheus text exposition (version 0.0.4) of `m` at `now`: every metric with HELP and
/// TYPE lines, names prefixed `pgtide_`. Lag in bytes appears once the source's position is
/// known, lag in seconds once a source transaction has been applied.
std::string render_metrics(const Metrics& m, std::chrono::system_clock::time_point now);

/// The Content-Type of render_metrics' output.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

} // namespace pgtide::replicate
