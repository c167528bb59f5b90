// SlotInfo: a read-only look at one replication slot and the source's WAL position.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "io/pg_connection.hpp"
#include "io/task.hpp"
#include "replicate/checkpoint.hpp"
#include "schema/lsn.hpp"

namespace pgtide::replicate {

/// One row of pg_replication_slots, with the WAL it retains.
struct SlotInfo {
    std::string name;
    std::string slot_type; ///< "logical" or "physical"
    std::string plugin;    ///< "" for a physical slot
    std::string database;  ///< "" for a physical slot
    bool temporary = false;
    bool active = false;
    std::optional<std::int64_t> active_pid;
    std::optional<schema::Lsn> restart_lsn;
    std::optional<schema::Lsn> confirmed_flush;
    std::string wal_status;          ///< reserved, extended, unreserved, lost; "" when unknown
    std::string invalidation_reason; ///< PostgreSQL 17+ (16: "conflicting"); "" when valid
    /// The source's WAL position minus restart_lsn: the WAL this slot keeps from recycling.
    std::optional<std::int64_t> retained_bytes;
    /// The source's WAL position that retained_bytes was measured against (read in the same
    /// statement, so the two agree while the server writes WAL).
    std::optional<schema::Lsn> current_lsn;
};

/// Whether the destination's checkpoint proves that this destination created `slot` (the caller
/// checks its name, type, plugin and database):
/// - streaming: the slot never confirmed past the checkpoint;
/// - snapshot of a started epoch: the slot's consistent point is the recorded one;
/// - snapshot announced but not started (checkpoint lsn unset, consistent_lsn = the WAL insert
///   position read just before CREATE_REPLICATION_SLOT): a slot created since then, whose
///   consistent point is at or after that position. This covers a crash between creating the
///   slot and recording its consistent point.
bool slot_proven_ours(const Checkpoint& checkpoint, const SlotInfo& slot);

/// The slot named `slot`, or nullopt when the source has none. Suspends; throws io::PgError.
io::Task<std::optional<SlotInfo>> read_slot_info(io::PgConnection& conn, std::string slot);

/// The source's current WAL position: pg_current_wal_lsn(), or pg_last_wal_replay_lsn() on a
/// standby. Suspends; throws io::PgError.
io::Task<schema::Lsn> current_wal_lsn(io::PgConnection& conn);

/// Why streaming from `slot` cannot go on, as the message of a SlotLost error (exit 5): the
/// slot is missing (`info` nullopt: dropped, or not carried over by a failover), or the server
/// invalidated it (`wal_status` lost, or an `invalidation_reason`). The message names the
/// cause: for removed WAL, max_slot_wal_keep_size and its value `max_slot_wal_keep_size` ("" when
/// unknown); for PostgreSQL 18's idle timeout, idle_replication_slot_timeout. It ends with the
/// way out, `pgtide run --resnapshot`. nullopt when the slot exists and is not invalidated.
std::optional<std::string> slot_lost_message(const std::string& slot,
                                             const std::optional<SlotInfo>& info,
                                             const std::string& max_slot_wal_keep_size = "");

/// slot_lost_message for what the source says now: reads the slot and, when it is invalidated,
/// the server's max_slot_wal_keep_size. Suspends; throws io::PgError.
io::Task<std::optional<std::string>> check_slot_lost(io::PgConnection& conn, std::string slot);

} // namespace pgtide::replicate
