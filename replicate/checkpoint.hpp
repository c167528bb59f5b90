// Destination metadata rows (DESIGN §5): the checkpoint, per-table copy progress, tombstone keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "schema/lsn.hpp"
#include "schema/value.hpp"

namespace pgtide::replicate {

/// Where a slot's epoch stands: still copying its snapshot, or following the stream.
enum class Phase { Snapshot, Streaming };

/// "snapshot", "streaming": the text stored in `_pgtide_checkpoint.phase`.
const char* to_string(Phase phase);
/// The inverse of to_string(Phase); nullopt for any other text.
std::optional<Phase> parse_phase(std::string_view text);

/// One row of `_pgtide_checkpoint`.
struct Checkpoint {
    std::string slot_name;
    std::string system_identifier;
    std::int64_t timeline = 0;
    std::string database;
    std::int64_t epoch = 0;
    Phase phase = Phase::Snapshot;
    schema::Lsn consistent_lsn; ///< C: the slot's consistent point, the version of copied rows
    schema::Lsn lsn;            ///< end LSN of the last applied source transaction
    std::string owner;          ///< token of the process holding the lease
    std::int64_t lease_until_unix_ms = 0;
    std::int64_t updated_at_unix_ms = 0;
    friend bool operator==(const Checkpoint&, const Checkpoint&) = default;
};

/// A table's copy state within an epoch: init → copying → copied → ready.
enum class TableState { Init, Copying, Copied, Ready };

/// "init", "copying", "copied", "ready": the text stored in `_pgtide_tables.state`.
const char* to_string(TableState state);
/// The inverse of to_string(TableState); nullopt for any other text.
std::optional<TableState> parse_table_state(std::string_view text);

/// One row of `_pgtide_tables` (its `updated_at` is stamped by the destination when written).
struct TableProgress {
    std::string source_table; ///< "schema.name"
    std::string target_table;
    TableState state = TableState::Init;
    std::int64_t epoch = 0;
    schema::Lsn copy_lsn; ///< version of the rows this copy writes
    std::int64_t rows_copied = 0;
    /// pg_class.oid of the source table the rows were copied from: a table dropped and created
    /// again under its name has another, and is copied again. 0: not recorded (a destination
    /// written before pgtide recorded it; the next copy records it).
    std::uint32_t source_oid = 0;
    /// schema::Table::publication_membership when the table was last copied or found published:
    /// a table whose membership today shares none of it left the publications meanwhile, and is
    /// copied again. Empty: not recorded (recorded when the table is next seen).
    std::string membership;
    /// schema::Table::source_columns when the table was copied: a column whose number differs
    /// today was dropped and added again, and the table is copied again. Empty: not recorded.
    std::string source_columns;
    /// How far an unfinished copy has got (encode_copy_key); empty: unknown, or whole.
    std::string copy_key = {};
    friend bool operator==(const TableProgress&, const TableProgress&) = default;
};

/// One key range of a table's copy: its half-open bounds on the first key column and the key of
/// the last row copied into the destination, every value as the source prints it (its text
/// output), so that a later copy under another snapshot can go on after it.
struct RangeProgress {
    /// Absent: open. A range read as unordered chunks moves it up to the next chunk's start as
    /// chunks are done; rows at or above it may be in the destination already (a chunk cut
    /// short), which a copy going on discards first (Destination::discard_unfinished_chunks).
    std::optional<std::string> lower;
    std::optional<std::string> upper; ///< absent: open
    /// One value per key column; empty: no row copied yet, or the range is read as chunks.
    std::vector<std::string> after;
    bool done = false; ///< every row of the range is copied
    friend bool operator==(const RangeProgress&, const RangeProgress&) = default;
};

/// `_pgtide_tables.copy_key`: how far a table's copy has got, range by range, and the shape of
/// the table it was copied as (columns, types, key, row filter): a copy goes on from it only
/// while the table still has that shape.
struct CopyKey {
    std::string shape;
    std::vector<RangeProgress> ranges;
    friend bool operator==(const CopyKey&, const CopyKey&) = default;
};

/// The stored text of a CopyKey: a version tag, then every string as its byte length, ':' and
/// its bytes (an absent bound as '-'), so that no value needs escaping.
std::string encode_copy_key(const CopyKey& key);
/// The inverse of encode_copy_key; nullopt for an empty or malformed text (then the copy starts
/// over, which is always right).
std::optional<CopyKey> parse_copy_key(std::string_view text);

/// The `_pgtide_tombstones.key` of a table-wide tombstone (a truncate). No encoded key equals it.
inline constexpr std::string_view kTableTombstoneKey = "*";

/// The `_pgtide_tombstones.key` of one key (values in key-column order). Each value is written
/// as a storage-class tag (n, i, r, t, b), the byte length of its payload in decimal, ':', and
/// the payload (decimal integer; shortest round-trip double; UTF-8 text; lower-case hex bytes),
/// so that no two distinct keys share an encoding ('1' TEXT ≠ 1 INTEGER, no separator can
/// collide) and the result is valid UTF-8 whenever the text values are.
/// Throws InternalError for an UnchangedToast value (never part of a key).
std::string encode_tombstone_key(const schema::Row& key);

/// encode_tombstone_key of the values of `row` at `columns` (a full row's key), without copying.
std::string encode_tombstone_key(const schema::Row& row, const std::vector<std::size_t>& columns);

} // namespace pgtide::replicate
