// What `check`, `status` and `drop` share: a read-only look at the SQLite destination, and JSON
// text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/task.hpp"
#include "replicate/checkpoint.hpp"
#include "replicate/source_catalog.hpp"
#include "src/config.hpp"

namespace pgtide::app {

/// One `_pgtide_tables` row with the number of rows its target table holds now.
struct DestinationTable {
    replicate::TableProgress progress;
    std::optional<std::int64_t> rows; ///< count(*) of the target table; nullopt when it is missing
    /// Of `rows`, those marked `_pgtide_deleted = 1`; nullopt when the table has no such column
    /// (hard deletes) or is missing.
    std::optional<std::int64_t> rows_deleted;
    /// The target table has `_pgtide_deleted`: it was written with soft deletes.
    bool keeps_deleted = false;
};

/// What a destination file holds for one slot, read in one read transaction.
struct DestinationView {
    std::string path;
    bool file_exists = false;
    bool has_metadata = false; ///< the file has a `_pgtide_checkpoint` table
    std::optional<replicate::Checkpoint> checkpoint;
    std::vector<DestinationTable> tables;
};

/// Reads the checkpoint row and table states of `slot` through a read-only connection (never
/// creates the file, never takes the write lock, so it works while `pgtide run` holds the
/// destination). With `count_rows`, counts each target table's rows too. Blocks: call it on an
/// io::WorkerThread. Throws std::runtime_error naming the path and SQLite's message when the
/// file exists but cannot be read.
DestinationView read_destination(const std::string& path, const std::string& slot, bool count_rows);

/// "sqlite:PATH", or the PostgreSQL destination URL with its password hidden: for messages.
std::string destination_name(const Config& config);

/// read_destination for either kind of destination: SQLite on a worker thread, PostgreSQL
/// through an async connection (in one REPEATABLE READ, READ ONLY transaction; `file_exists`
/// then means the database answered). Suspends. Throws DefiniteError(Usage) when a PostgreSQL
/// destination cannot be reached, naming it.
io::Task<DestinationView> load_destination(Config config, bool count_rows);

/// Whether pgtide could open and write the SQLite destination at `path`.
struct DestinationProbe {
    bool ok = false;
    bool file_exists = false;
    std::string message; ///< what was found
    std::string fix;     ///< what to do when !ok
};

/// Checks, without creating or changing anything, that `path`'s directory exists and is writable
/// (SQLite puts PATH-wal and PATH-shm beside the file) and that an existing file is a readable,
/// writable SQLite database. Blocks: call it on an io::WorkerThread.
DestinationProbe probe_destination(const std::string& path);

/// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

/// Unix milliseconds as UTC ISO 8601 ("2024-05-01T12:00:00.123Z").
std::string format_unix_ms(std::int64_t unix_ms);

/// Milliseconds since the Unix epoch, now.
std::int64_t unix_ms_now();

/// The [[tables]] entries of `config` as the catalog takes them.
std::vector<replicate::TableOverride> table_overrides(const Config& config);

} // namespace pgtide::app
