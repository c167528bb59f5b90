// The configuration (DESIGN §6): TOML with ${ENV} interpolation into plain structs, and its checks.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "replicate/errors.hpp"

namespace pgtide::app {

inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * kKiB;
inline constexpr std::uint64_t kGiB = 1024 * kMiB;

struct SourceConfig {
    /// Anything libpq accepts: key=value or URI. May hold a password: log only `redact_dsn(dsn)`.
    std::string dsn;
    std::vector<std::string> publications;
    std::string slot = "pgtide";
    bool temporary_slot = false;
    /// What to do when the slot already exists and cannot be resumed from.
    enum class ExistingSlot { Fail, RestartSnapshot } existing_slot = ExistingSlot::Fail;
    /// How long to keep reconnecting after a transient error; unset = unlimited.
    std::optional<std::chrono::milliseconds> reconnect_deadline;

    bool operator==(const SourceConfig&) const = default;
};

struct DestinationConfig {
    /// "sqlite:PATH" (PATH as written, relative to the working directory) or "postgresql://...".
    std::string url;
    enum class Deletes { Hard, Soft } deletes = Deletes::Hard;
    /// PostgreSQL: how long to keep reconnecting after the connection was lost while
    /// streaming; unset = unlimited.
    std::optional<std::chrono::milliseconds> reconnect_deadline = std::nullopt;

    bool is_sqlite() const;
    /// The PATH of "sqlite:PATH". Precondition: is_sqlite().
    std::string sqlite_path() const;
    /// "postgresql://..." or "postgres://...".
    bool is_postgresql() const;

    bool operator==(const DestinationConfig&) const = default;
};

struct ApplyConfig;

struct SnapshotConfig {
    int parallel_tables = 4;
    std::int64_t page_rows = 2048;
    std::int64_t batch_rows = 4096;
    std::uint64_t batch_bytes = 4 * kMiB;
    std::uint64_t max_row_bytes = 64 * kMiB;
    int max_attempts = 3;
    /// A table estimated to hold more rows is copied as key ranges by several readers at once.
    /// Unset: split_rows_for() decides by destination.
    std::optional<std::int64_t> split_rows;
    /// Into PostgreSQL, a table whose first key column is an integer is read as unordered
    /// chunks of about this many rows instead of keyset pages of page_rows rows.
    std::int64_t chunk_rows = 65536;
    /// Rows of a copy per destination transaction. Unset: commit_rows_for() decides.
    std::optional<std::int64_t> commit_rows;

    /// split_rows, else 1,000,000 into PostgreSQL and 0 (never split) into SQLite: SQLite has
    /// one writer, which inserts fastest in key order, and one reader per table keeps up with
    /// it; ranges copied at once would only interleave its inserts across the table's B-tree.
    std::int64_t split_rows_for(const DestinationConfig& destination) const;

    /// commit_rows, else 1,000,000 into PostgreSQL and 5 × apply.batch_rows into SQLite. Into
    /// PostgreSQL, each commit of a copy stalls its table's COPY for a round of statements and
    /// a WAL flush: at every 50,000 rows that cost about a tenth of the bootstrap's wall time
    /// (bench/RESULTS.md, 2026-12-07); a copy cut short reads again at most this many rows per
    /// table.
    std::int64_t commit_rows_for(const DestinationConfig& destination,
                                 const ApplyConfig& apply) const;

    bool operator==(const SnapshotConfig&) const = default;
};

struct StreamConfig {
    std::chrono::milliseconds heartbeat_interval{10000};
    std::chrono::milliseconds status_interval{10000};
    /// How often the running stream looks for tables the publications gained (they are also
    /// found at their first change).
    std::chrono::milliseconds publication_poll_interval{10000};
    /// Silence from the source this long means a dead connection (a partition drops packets
    /// without a reset); at half of it pgtide asks the walsender for a reply.
    std::chrono::milliseconds receive_timeout{30000};
    enum class LargeTransactions { Stream, Off } large_transactions = LargeTransactions::Stream;
    /// Ask pgoutput for binary column values when every published type has a binary decoder.
    bool binary = false;
    /// Where streamed transactions are spooled (in its subdirectory pgtide-spool-<slot>); empty
    /// means $TMPDIR, else /tmp.
    std::string spool_dir = {};

    bool operator==(const StreamConfig&) const = default;
};

struct ApplyConfig {
    std::chrono::milliseconds flush_interval{100};
    std::int64_t batch_rows = 10000;
    std::uint64_t batch_bytes = 16 * kMiB;

    bool operator==(const ApplyConfig&) const = default;
};

struct MetricsConfig {
    /// "HOST:PORT" to serve Prometheus text at /metrics; off when unset.
    std::optional<std::string> listen;

    bool operator==(const MetricsConfig&) const = default;
};

struct LogConfig {
    enum class Format { Text, Json } format = Format::Text;
    enum class Level { Debug, Info, Warn, Error } level = Level::Info;

    bool operator==(const LogConfig&) const = default;
};

struct TableConfig {
    /// "schema.table" as the source names it; a bare name is completed to "public.name".
    std::string name;
    std::optional<std::string> target = std::nullopt;
    std::optional<std::vector<std::string>> columns = std::nullopt;
    std::optional<std::vector<std::string>> key = std::nullopt;

    bool operator==(const TableConfig&) const = default;
};

struct Config {
    SourceConfig source;
    DestinationConfig destination;
    SnapshotConfig snapshot;
    StreamConfig stream;
    ApplyConfig apply;
    MetricsConfig metrics;
    LogConfig log;
    std::vector<TableConfig> tables;

    bool operator==(const Config&) const = default;
};

/// A configuration that cannot be used. Exit code 2 (usage/config). The message names the file,
/// line and key and says what is allowed; it never contains a password.
class ConfigError : public replicate::DefiniteError {
public:
    explicit ConfigError(const std::string& message)
        : replicate::DefiniteError(replicate::ExitCode::Usage, message) {}
};

/// Reads and parses the file at `path` (messages name it as given). Does not validate().
/// Throws ConfigError, also when the file cannot be read.
Config load_config_file(const std::string& path);

/// Parses TOML text; `origin_name` stands for the file in messages. Does not validate().
/// Throws ConfigError.
Config parse_config(std::string_view toml_text, const std::string& origin_name);

/// The checks that need the whole configuration, after command-line flags are merged: source DSN,
/// publications and destination URL present, URL scheme, slot name, positive numbers, tables.
/// Throws ConfigError.
void validate(const Config& config);

/// "4MiB", "512KiB", "1GiB", "100B", "4MB" (= 4,000,000), or a plain integer of bytes. Units:
/// B, KiB, MiB, GiB, TiB, kB/KB, MB, GB, TB; one optional space between number and unit.
/// Throws std::invalid_argument on anything else, including overflow.
std::uint64_t parse_size(std::string_view text);

/// "100ms", "10s", "5m", "1h", "1m30s": integers with units h, m, s, ms, largest first, each
/// unit at most once. Throws std::invalid_argument on anything else, including a bare number.
std::chrono::milliseconds parse_duration(std::string_view text);

/// A table name as the source names it, "schema.table"; a bare name gets "public." (a dot inside
/// double quotes does not count).
std::string qualify_table_name(std::string_view name);

/// The DSN or URL with passwords masked as "***": `password` and `sslpassword` of key=value
/// strings (quoted values included), and the password of `user:password@` and of `?password=`
/// in URIs. Safe for logs and errors.
std::string redact_dsn(std::string_view dsn);

} // namespace pgtide::app
