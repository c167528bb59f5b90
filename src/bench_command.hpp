// `pgtide bench`: bench/run's snapshot and stream scenarios on a user's own server, in a schema
// of their own that is dropped afterwards.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace pgtide::app {

/// What `pgtide bench` was asked for: the words after `bench`.
struct BenchOptions {
    std::string source_dsn;
    double scale = 0.1;
    /// "sqlite:PATH" (a new file) or "postgresql://..." (another database); nullopt: a temporary
    /// SQLite file in $TMPDIR, removed afterwards.
    std::optional<std::string> to = std::nullopt;
    bool json = false;
    bool help = false;
};

/// Parses the words after `bench`: --source DSN (required), --scale F (0 < F <= 100, default
/// 0.1), --to URL, --json, -h/--help; `--flag=value` too. Throws UsageError (exit 2).
BenchOptions parse_bench_args(const std::vector<std::string>& args);

/// The help text of `pgtide bench`.
std::string bench_usage_text();

/// Runs the bench and prints its tables (or, with --json, one JSON object) on stdout; progress
/// goes to the log on stderr. Blocks for as long as the bench takes: it is a measuring tool and
/// runs its steps one after another on the calling thread (see bench_command.cpp). Whatever
/// happens, also on SIGINT/SIGTERM, it drops what it created before returning. Returns 0, or 1
/// when pgtide replicated wrongly (the tables are printed first). Throws
/// replicate::DefiniteError: Usage (2) when a pgtide_bench schema, publication or slot exists
/// that it did not create or the destination cannot be used, SourceNotReady (3) when the source
/// cannot run pgtide (settings, privileges, free slots), Other (1) when interrupted; other
/// exceptions for failures on the way (exit 1).
int run_bench(const BenchOptions& options);

} // namespace pgtide::app
