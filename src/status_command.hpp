// `pgtide status`: checkpoint, lag, slot health and table states, as text or one JSON object.
#pragma once

#include <optional>
#include <string>

#include "io/task.hpp"
#include "replicate/slot_info.hpp"
#include "src/command_support.hpp"
#include "src/config.hpp"

namespace pgtide::app {

/// Everything `status` found. The source part is empty when it could not be reached.
struct StatusReport {
    std::string slot;
    std::string destination_url;
    DestinationView destination;
    bool source_reachable = false;
    std::string source_error;              ///< why the source could not be read
    std::optional<schema::Lsn> source_lsn; ///< pg_current_wal_lsn()
    std::optional<std::string> source_system;
    std::optional<std::string> source_database;
    std::optional<replicate::SlotInfo> slot_info;
    std::optional<std::int64_t> lag_bytes; ///< source_lsn - checkpoint lsn
    std::optional<double> lag_seconds;     ///< 0 when caught up; the walsender's flush_lag
};

/// Reads the destination read-only (works while `pgtide run` holds it), then the source: its WAL
/// position, the slot and, when a pgtide streams from it, the walsender's flush lag. A source that
/// cannot be reached is reported, not thrown. Throws replicate::DefiniteError (exit 2) when the
/// destination file does not exist. Suspends.
io::Task<StatusReport> run_status(Config config);

/// The report as text lines, or (json) as one JSON object on one line.
std::string format_status(const StatusReport& report, bool json);

/// 0, or 1 when the source could not be read.
int status_exit_code(const StatusReport& report);

} // namespace pgtide::app
