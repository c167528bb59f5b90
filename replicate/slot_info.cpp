// SlotInfo: a read-only look at one replication slot and the source's WAL position.
#include "replicate/slot_info.hpp"

#include <vector>

#include "replicate/errors.hpp"

namespace pgtide::replicate {

bool slot_proven_ours(const Checkpoint& checkpoint, const SlotInfo& slot) {
    if (!slot.confirmed_flush) {
        return false;
    }
    const schema::Lsn confirmed = *slot.confirmed_flush;
    if (checkpoint.phase == Phase::Streaming) {
        return !(checkpoint.lsn < confirmed);
    }
    if (!checkpoint.consistent_lsn.valid()) {
        return false;
    }
    if (!checkpoint.lsn.valid()) { // announced: created at or after the recorded position
        return !(confirmed < checkpoint.consistent_lsn);
    }
    return confirmed == checkpoint.consistent_lsn;
}

namespace {

constexpr const char* kCurrentLsn =
    "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END";

std::optional<schema::Lsn> optional_lsn(const io::PgResult& r, int row, int col) {
    if (r.is_null(row, col)) {
        return std::nullopt;
    }
    return schema::Lsn::parse(r.get(row, col));
}

} // namespace

io::Task<std::optional<SlotInfo>> read_slot_info(io::PgConnection& conn, std::string slot) {
    const int v = conn.server_version();
    const std::string invalidation = v >= 170000 ? "coalesce(invalidation_reason, '')"
                                     : v >= 160000
                                         ? "CASE WHEN conflicting THEN 'conflicting' ELSE '' END"
                                         : "''";
    std::vector<std::optional<std::string>> params{slot};
    io::PgResult r = co_await conn.exec_params(
        std::string("SELECT slot_type, coalesce(plugin, ''), coalesce(database, ''), temporary, "
                    "active, active_pid, restart_lsn::text, confirmed_flush_lsn::text, "
                    "coalesce(wal_status, ''), ") +
            invalidation +
            ", pg_wal_lsn_diff(pos.lsn, restart_lsn)::bigint, pos.lsn::text "
            "FROM pg_replication_slots, (SELECT " +
            kCurrentLsn + " AS lsn) pos WHERE slot_name = $1",
        std::move(params));
    if (r.rows() == 0) {
        co_return std::nullopt;
    }
    SlotInfo s;
    s.name = slot;
    s.slot_type = std::string(r.get(0, 0));
    s.plugin = std::string(r.get(0, 1));
    s.database = std::string(r.get(0, 2));
    s.temporary = r.get(0, 3) == "t";
    s.active = r.get(0, 4) == "t";
    if (!r.is_null(0, 5)) {
        s.active_pid = std::stoll(std::string(r.get(0, 5)));
    }
    s.restart_lsn = optional_lsn(r, 0, 6);
    s.confirmed_flush = optional_lsn(r, 0, 7);
    s.wal_status = std::string(r.get(0, 8));
    s.invalidation_reason = std::string(r.get(0, 9));
    if (!r.is_null(0, 10)) {
        s.retained_bytes = std::stoll(std::string(r.get(0, 10)));
    }
    s.current_lsn = optional_lsn(r, 0, 11);
    co_return s;
}

io::Task<schema::Lsn> current_wal_lsn(io::PgConnection& conn) {
    io::PgResult r = co_await conn.exec(std::string("SELECT (") + kCurrentLsn + ")::text");
    const auto lsn = schema::Lsn::parse(r.get(0, 0));
    if (!lsn) {
        throw InternalError("the source's WAL position '" + std::string(r.get(0, 0)) +
                            "' is not an LSN");
    }
    co_return *lsn;
}

std::optional<std::string> slot_lost_message(const std::string& slot,
                                             const std::optional<SlotInfo>& info,
                                             const std::string& max_slot_wal_keep_size) {
    const std::string way_out =
        "; run `pgtide run --resnapshot` to copy everything again into a new epoch";
    if (!info) {
        return "replication slot " + slot +
               " no longer exists on the source (dropped, or not carried over by a failover to "
               "a standby), so the changes since the destination's checkpoint cannot be "
               "streamed" +
               way_out;
    }
    const std::string& reason = info->invalidation_reason;
    if (info->wal_status != "lost" && reason.empty()) {
        return std::nullopt;
    }
    std::string cause;
    if (reason.empty() || reason == "wal_removed") {
        // PostgreSQL 15 and 16 give no reason; wal_status lost means removed WAL there.
        cause =
            "it kept more WAL than max_slot_wal_keep_size" +
            (max_slot_wal_keep_size.empty() ? std::string() : " (" + max_slot_wal_keep_size + ")") +
            " allows while pgtide was behind or stopped, and the WAL it needed was removed "
            "(wal_status = " +
            info->wal_status + (reason.empty() ? "" : ", invalidation_reason = " + reason) +
            "); raise max_slot_wal_keep_size (-1: unlimited) or keep pgtide running so that "
            "it does not happen again";
    } else if (reason == "idle_timeout") {
        cause = "it stayed inactive longer than idle_replication_slot_timeout "
                "(invalidation_reason = idle_timeout)";
    } else {
        cause = "invalidation_reason = " + reason +
                (reason == "rows_removed" || reason == "conflicting" ||
                         reason == "wal_level_insufficient"
                     ? ": a conflict with recovery on a standby"
                     : "");
    }
    return "replication slot " + slot + " was invalidated by the server: " + cause + way_out;
}

io::Task<std::optional<std::string>> check_slot_lost(io::PgConnection& conn, std::string slot) {
    std::optional<SlotInfo> info = co_await read_slot_info(conn, slot);
    std::string keep;
    if (info && (info->wal_status == "lost" || !info->invalidation_reason.empty())) {
        io::PgResult r = co_await conn.exec("SHOW max_slot_wal_keep_size");
        keep = std::string(r.get(0, 0));
    }
    co_return slot_lost_message(slot, info, keep);
}

} // namespace pgtide::replicate
