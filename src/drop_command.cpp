// `pgtide drop --yes`: drop the replication slot this destination proves it owns; keep the rest.
//
// The proof, in order (each refusal exits 4 and leaves everything as it was):
//   1. the destination's checkpoint row names the slot;
//   2. the source is the cluster and database the row recorded (system identifier, database):
//      a DSN pointing elsewhere must never drop a slot another destination streams from;
//   3. no live pgtide holds the destination's lease (a run that is copying or reconnecting;
//      a lease whose owner has no session on the source is stale);
//   4. the slot is logical, `pgoutput`, in that database, and not active;
//   5. the slot has not confirmed past the checkpoint (pgtide never confirms beyond its durable
//      checkpoint, so a slot that has was advanced by someone else).
// The destination file is only read: the next `pgtide run` finds the slot gone and says so.
#include "src/drop_command.hpp"

#include <utility>
#include <vector>

#include "io/pg_connection.hpp"
#include "io/worker_thread.hpp"
#include "replicate/errors.hpp"
#include "replicate/session.hpp"
#include "replicate/slot_info.hpp"
#include "src/command_support.hpp"

namespace pgtide::app {

namespace {

using replicate::DefiniteError;
using replicate::ExitCode;

std::string start_over(const Config& config) {
    return config.destination.is_postgresql()
               ? "drop the destination tables and _pgtide_checkpoint to start over"
               : "delete " + config.destination.sqlite_path() +
                     " (and its -wal, -shm files) to start over";
}

std::string kept_line(const std::string& name, const DestinationView& view) {
    std::string s = "kept: " + name + " with its tables and metadata";
    if (view.checkpoint) {
        s += " (checkpoint " + view.checkpoint->lsn.str() + ", epoch " +
             std::to_string(view.checkpoint->epoch) + ")";
    }
    return s + "\n";
}

} // namespace

io::Task<DropReport> run_drop(Config config) {
    const std::string name = destination_name(config);
    const std::string slot = config.source.slot;
    DestinationView view = co_await load_destination(config, false);
    if (!view.file_exists) {
        throw DefiniteError(ExitCode::Usage,
                            "the destination " + name + " does not exist; check destination.url");
    }

    io::PgConnection conn = co_await io::PgConnection::connect(
        config.source.dsn, replicate::sql_connection_params(), std::chrono::seconds(30));
    io::PgResult id = co_await conn.exec(
        "SELECT (SELECT system_identifier::text FROM pg_control_system()), current_database()");
    const std::string system(id.get(0, 0));
    const std::string database(id.get(0, 1));
    std::optional<replicate::SlotInfo> info = co_await replicate::read_slot_info(conn, slot);

    DropReport report;
    if (!view.checkpoint) {
        if (info) {
            throw DefiniteError(
                ExitCode::Fenced,
                name + " has no checkpoint for slot " + slot +
                    ", so it cannot prove that replication slot " + slot +
                    " on the source is its own; nothing was dropped. If you are sure no one "
                    "needs it: SELECT pg_drop_replication_slot('" +
                    slot + "')");
        }
        report.text = "nothing to drop: " + name + " has no checkpoint for slot " + slot +
                      " and the source has no slot of that name\n" + kept_line(name, view);
        co_return report;
    }
    const replicate::Checkpoint& cp = *view.checkpoint;
    if (cp.system_identifier != system || cp.database != database) {
        throw DefiniteError(ExitCode::Fenced,
                            name + " was filled from system " + cp.system_identifier +
                                ", database " + cp.database + ", but the source is system " +
                                system + ", database " + database +
                                "; refusing to drop replication slot " + slot +
                                " there. Point source.dsn at the database this destination "
                                "replicates");
    }
    if (!info) {
        report.text = "nothing to drop: replication slot " + slot +
                      " does not exist on the source (system " + system + ", database " + database +
                      ")\n" + kept_line(name, view) +
                      "next: `pgtide run --resnapshot` copies everything again into a new slot "
                      "and epoch; or " +
                      start_over(config) + "\n";
        co_return report;
    }
    // A fresh lease whose owner has no session on the source is stale (a killed process): its
    // sessions carry application_name "pgtide/<owner token>".
    std::int64_t owner_sessions = 0;
    if (cp.lease_until_unix_ms > unix_ms_now()) {
        std::vector<std::optional<std::string>> params{"pgtide/" + cp.owner};
        io::PgResult r = co_await conn.exec_params(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", std::move(params));
        owner_sessions = std::stoll(std::string(r.get(0, 0)));
    }
    if (cp.lease_until_unix_ms > unix_ms_now() && owner_sessions > 0) {
        throw DefiniteError(ExitCode::Fenced, "a pgtide process holds " + name + " (lease until " +
                                                  format_unix_ms(cp.lease_until_unix_ms) +
                                                  "); stop it first, then drop the slot");
    }
    if (info->active) {
        throw DefiniteError(ExitCode::Fenced,
                            "replication slot " + slot + " is active (walsender pid " +
                                std::to_string(info->active_pid.value_or(0)) +
                                "); stop the process streaming from it first, then drop it");
    }
    if (info->slot_type != "logical" || info->plugin != "pgoutput" || info->database != database) {
        throw DefiniteError(ExitCode::Fenced,
                            "replication slot " + slot + " is a " + info->slot_type + " slot" +
                                (info->plugin.empty() ? "" : " of plugin " + info->plugin) +
                                (info->database.empty() ? "" : " in database " + info->database) +
                                ", not the logical pgoutput slot pgtide created in " + database +
                                "; nothing was dropped");
    }
    if (!replicate::slot_proven_ours(cp, *info)) {
        throw DefiniteError(
            ExitCode::Fenced,
            "replication slot " + slot + " has confirmed " +
                (info->confirmed_flush ? info->confirmed_flush->str() : std::string("nothing")) +
                " but " + name + " is at " + cp.lsn.str() + " in phase " +
                replicate::to_string(cp.phase) +
                ": another consumer uses this slot, so it is not this destination's to drop; "
                "nothing was dropped");
    }

    try {
        std::vector<std::optional<std::string>> params{slot};
        co_await conn.exec_params("SELECT pg_drop_replication_slot($1)", std::move(params));
    } catch (const io::PgError& e) {
        if (e.sqlstate == "55006") { // object_in_use: a walsender took it meanwhile
            throw DefiniteError(ExitCode::Fenced,
                                "replication slot " + slot +
                                    " became active while dropping it: " + e.what());
        }
        throw;
    }
    report.dropped = true;
    report.text = "dropped: replication slot " + slot + " on the source (system " + system +
                  ", database " + database + "; it held WAL from " +
                  (info->restart_lsn ? info->restart_lsn->str() : std::string("nowhere")) +
                  (info->retained_bytes ? ", " + std::to_string(*info->retained_bytes) + " bytes"
                                        : std::string()) +
                  ")\n" + kept_line(name, view) +
                  "next: the destination no longer follows the source. `pgtide run --resnapshot` "
                  "copies everything again into a new slot and epoch; or " +
                  start_over(config) + "\n";
    co_return report;
}

} // namespace pgtide::app
