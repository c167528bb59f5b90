// `pgtide status`: checkpoint, lag, slot health and table states, as text or one JSON object.
#include "src/status_command.hpp"

#include <cstdio>
#include <utility>
#include <vector>

#include "io/pg_connection.hpp"
#include "io/worker_thread.hpp"
#include "replicate/checkpoint.hpp"
#include "replicate/errors.hpp"
#include "replicate/session.hpp"

namespace pgtide::app {

namespace {

using replicate::DefiniteError;
using replicate::ExitCode;

std::string json_opt_int(const std::optional<std::int64_t>& v) {
    return v ? std::to_string(*v) : "null";
}

std::string json_opt_lsn(const std::optional<schema::Lsn>& v) {
    return v ? json_quote(v->str()) : "null";
}

std::string json_opt_str(const std::optional<std::string>& v) {
    return v ? json_quote(*v) : "null";
}

// How far an unfinished copy has got, from its copy_key: {key ranges done, key ranges}.
std::optional<std::pair<std::int64_t, std::int64_t>> ranges_done(const std::string& copy_key) {
    const std::optional<replicate::CopyKey> key = replicate::parse_copy_key(copy_key);
    if (!key || key->ranges.empty()) {
        return std::nullopt;
    }
    std::int64_t done = 0;
    for (const auto& r : key->ranges) {
        done += r.done ? 1 : 0;
    }
    return std::pair{done, std::int64_t(key->ranges.size())};
}

std::string format_seconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", s);
    return buf;
}

} // namespace

io::Task<StatusReport> run_status(Config config) {
    StatusReport report;
    report.slot = config.source.slot;
    report.destination_url = config.destination.url;
    report.destination = co_await load_destination(config, true);
    if (!report.destination.file_exists) {
        throw DefiniteError(ExitCode::Usage, "the destination " + destination_name(config) +
                                                 " does not exist; check destination.url, or "
                                                 "run `pgtide run` to create it");
    }

    try {
        io::PgConnection conn = co_await io::PgConnection::connect(
            config.source.dsn, replicate::sql_connection_params(), std::chrono::seconds(10));
        io::PgResult id = co_await conn.exec(
            "SELECT (SELECT system_identifier::text FROM pg_control_system()), current_database()");
        report.source_system = std::string(id.get(0, 0));
        report.source_database = std::string(id.get(0, 1));
        report.slot_info = co_await replicate::read_slot_info(conn, config.source.slot);
        // The position the slot's retained WAL was measured against, so that lag and retention
        // describe one moment of a server that keeps writing WAL.
        if (report.slot_info && report.slot_info->current_lsn) {
            report.source_lsn = *report.slot_info->current_lsn;
        } else {
            report.source_lsn = co_await replicate::current_wal_lsn(conn);
        }
        const auto& cp = report.destination.checkpoint;
        if (cp && cp->lsn.valid()) {
            const auto src = report.source_lsn->value();
            const auto dst = cp->lsn.value();
            report.lag_bytes = src > dst ? std::int64_t(src - dst) : 0;
            if (*report.lag_bytes == 0) {
                report.lag_seconds = 0.0;
            } else if (report.slot_info && report.slot_info->active_pid) {
                // pgtide reports its durable checkpoint as the flush position, so the
                // walsender's flush_lag is the age of the oldest change not yet checkpointed.
                std::vector<std::optional<std::string>> params{
                    std::to_string(*report.slot_info->active_pid)};
                io::PgResult lag = co_await conn.exec_params(
                    "SELECT extract(epoch FROM flush_lag)::float8 FROM pg_stat_replication "
                    "WHERE pid = $1::int",
                    std::move(params));
                if (lag.rows() == 1 && !lag.is_null(0, 0)) {
                    report.lag_seconds = std::stod(std::string(lag.get(0, 0)));
                }
            }
        }
        report.source_reachable = true;
    } catch (const io::PgError& e) {
        report.source_error = e.what();
    }
    co_return report;
}

int status_exit_code(const StatusReport& report) {
    return report.source_reachable ? int(ExitCode::Ok) : int(ExitCode::Other);
}

std::string format_status(const StatusReport& r, bool json) {
    const auto& cp = r.destination.checkpoint;
    const std::int64_t now = unix_ms_now();
    if (json) {
        std::string o = "{\"slot\":" + json_quote(r.slot) +
                        ",\"destination\":" + json_quote(r.destination_url) + ",\"checkpoint\":";
        if (cp) {
            o += "{\"lsn\":" + json_quote(cp->lsn.str()) +
                 ",\"consistent_lsn\":" + json_quote(cp->consistent_lsn.str()) +
                 ",\"epoch\":" + std::to_string(cp->epoch) +
                 ",\"phase\":" + json_quote(replicate::to_string(cp->phase)) +
                 ",\"system_identifier\":" + json_quote(cp->system_identifier) +
                 ",\"timeline\":" + std::to_string(cp->timeline) +
                 ",\"database\":" + json_quote(cp->database) +
                 ",\"owner\":" + json_quote(cp->owner) + ",\"lease_until\":" +
                 (cp->lease_until_unix_ms > 0 ? json_quote(format_unix_ms(cp->lease_until_unix_ms))
                                              : std::string("null")) +
                 ",\"lease_held\":" + (cp->lease_until_unix_ms > now ? "true" : "false") +
                 ",\"updated_at\":" + json_quote(format_unix_ms(cp->updated_at_unix_ms)) + "}";
        } else {
            o += "null";
        }
        o += ",\"source\":{\"reachable\":" + std::string(r.source_reachable ? "true" : "false") +
             ",\"error\":" +
             (r.source_reachable ? std::string("null") : json_quote(r.source_error)) +
             ",\"system_identifier\":" + json_opt_str(r.source_system) +
             ",\"database\":" + json_opt_str(r.source_database) +
             ",\"current_lsn\":" + json_opt_lsn(r.source_lsn) + "}";
        o += ",\"lag\":{\"bytes\":" + json_opt_int(r.lag_bytes) + ",\"seconds\":" +
             (r.lag_seconds ? format_seconds(*r.lag_seconds) : std::string("null")) + "}";
        o += ",\"replication_slot\":";
        if (r.slot_info) {
            const auto& s = *r.slot_info;
            o += "{\"name\":" + json_quote(s.name) +
                 ",\"exists\":true,\"active\":" + (s.active ? "true" : "false") +
                 ",\"active_pid\":" + json_opt_int(s.active_pid) +
                 ",\"wal_status\":" + (s.wal_status.empty() ? "null" : json_quote(s.wal_status)) +
                 ",\"invalidation_reason\":" +
                 (s.invalidation_reason.empty() ? "null" : json_quote(s.invalidation_reason)) +
                 ",\"restart_lsn\":" + json_opt_lsn(s.restart_lsn) +
                 ",\"confirmed_flush_lsn\":" + json_opt_lsn(s.confirmed_flush) +
                 ",\"retained_wal_bytes\":" + json_opt_int(s.retained_bytes) + "}";
        } else if (r.source_reachable) {
            o += "{\"name\":" + json_quote(r.slot) + ",\"exists\":false}";
        } else {
            o += "null";
        }
        o += ",\"tables\":[";
        for (std::size_t i = 0; i < r.destination.tables.size(); ++i) {
            const auto& t = r.destination.tables[i];
            o += (i > 0 ? "," : "");
            o += "{\"source_table\":" + json_quote(t.progress.source_table) +
                 ",\"target_table\":" + json_quote(t.progress.target_table) +
                 ",\"state\":" + json_quote(replicate::to_string(t.progress.state)) +
                 ",\"epoch\":" + std::to_string(t.progress.epoch) +
                 ",\"copy_lsn\":" + json_quote(t.progress.copy_lsn.str()) +
                 ",\"rows_copied\":" + std::to_string(t.progress.rows_copied) +
                 ",\"rows\":" + json_opt_int(t.rows) +
                 ",\"rows_deleted\":" + json_opt_int(t.rows_deleted);
            const auto ranges = ranges_done(t.progress.copy_key);
            o += ",\"key_ranges_done\":" +
                 json_opt_int(ranges ? std::optional(ranges->first) : std::nullopt) +
                 ",\"key_ranges\":" +
                 json_opt_int(ranges ? std::optional(ranges->second) : std::nullopt) + "}";
        }
        o += "]}\n";
        return o;
    }

    std::string o;
    o += "destination:  " + r.destination_url + "\n";
    if (!cp) {
        o += "checkpoint:   none for slot " + r.slot +
             " (pgtide has not run into this destination with this slot yet)\n";
    } else {
        o += "checkpoint:   " + cp->lsn.str() + " in epoch " + std::to_string(cp->epoch) +
             ", phase " + replicate::to_string(cp->phase) + " (consistent point " +
             cp->consistent_lsn.str() + "), updated " + format_unix_ms(cp->updated_at_unix_ms) +
             "\n";
        o += "source id:    system " + cp->system_identifier + ", timeline " +
             std::to_string(cp->timeline) + ", database " + cp->database + "\n";
        o += "owner:        " + cp->owner + ", lease " +
             (cp->lease_until_unix_ms <= 0 ? std::string("released (no pgtide holds it)")
              : cp->lease_until_unix_ms > now
                  ? "held until " + format_unix_ms(cp->lease_until_unix_ms)
                  : "expired at " + format_unix_ms(cp->lease_until_unix_ms)) +
             "\n";
    }
    if (!r.source_reachable) {
        o += "source:       unreachable: " + r.source_error + "\n";
    } else {
        o += "source:       current WAL " + r.source_lsn->str() + "\n";
        if (r.lag_bytes) {
            o += "lag:          " + std::to_string(*r.lag_bytes) + " bytes";
            o += r.lag_seconds ? ", " + format_seconds(*r.lag_seconds) + " s\n"
                               : " (seconds unknown: no pgtide is streaming)\n";
        }
        if (!r.slot_info) {
            o += "slot:         " + r.slot + " does not exist on the source\n";
        } else {
            const auto& s = *r.slot_info;
            o += "slot:         " + s.name + ", " +
                 (s.active ? "active (pid " + std::to_string(s.active_pid.value_or(0)) + ")"
                           : std::string("inactive")) +
                 ", wal_status " + (s.wal_status.empty() ? "unknown" : s.wal_status);
            if (!s.invalidation_reason.empty()) {
                o += ", invalidated: " + s.invalidation_reason;
            }
            if (s.restart_lsn) {
                o += ", restart " + s.restart_lsn->str();
            }
            if (s.confirmed_flush) {
                o += ", confirmed " + s.confirmed_flush->str();
            }
            if (s.retained_bytes) {
                o += ", retains " + std::to_string(*s.retained_bytes) + " bytes of WAL";
            }
            o += "\n";
        }
    }
    if (!r.destination.tables.empty()) {
        o += "tables:\n";
        for (const auto& t : r.destination.tables) {
            const auto ranges = ranges_done(t.progress.copy_key);
            o += "  " + t.progress.source_table + " -> " + t.progress.target_table + ": " +
                 replicate::to_string(t.progress.state) + ", epoch " +
                 std::to_string(t.progress.epoch) + ", copied " +
                 std::to_string(t.progress.rows_copied) + " rows at " + t.progress.copy_lsn.str() +
                 ", " +
                 (ranges ? std::to_string(ranges->first) + " of " + std::to_string(ranges->second) +
                               " key ranges done, "
                         : std::string()) +
                 (t.rows ? std::to_string(*t.rows) + " rows now" : std::string("table missing")) +
                 (t.rows_deleted ? " (" + std::to_string(*t.rows_deleted) + " marked deleted)"
                                 : std::string()) +
                 "\n";
        }
    }
    return o;
}

} // namespace pgtide::app
