// `pgtide check`: is the source ready and the destination writable? One verdict per line.
//
// The checks run in the order a first `pgtide run` would meet them: destination (and, into
// PostgreSQL, whether its sessions can write pgtide's tables), connection, server settings, role,
// replication connection, publications, privileges, keys, replica identities, then the
// destination's identity and the slot, and (into PostgreSQL) whether the role can create or
// change the published tables' destination tables. A check whose premise failed (no
// connection, a missing publication) is skipped rather than reported as a second failure.
#include "src/check_command.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "io/pg_connection.hpp"
#include "io/worker_thread.hpp"
#include "replicate/postgres_destination.hpp"
#include "replicate/replication_connection.hpp"
#include "replicate/session.hpp"
#include "replicate/slot_info.hpp"
#include "replicate/source_catalog.hpp"
#include "schema/sql_quote.hpp"
#include "src/command_support.hpp"

namespace pgtide::app {

namespace {

using replicate::ExitCode;
using Status = CheckVerdict::Status;

// What the destination looked like, read on the worker thread.
struct DestinationFacts {
    DestinationProbe probe;
    std::optional<replicate::Checkpoint> checkpoint;
    std::string read_error;
    /// Target tables that have `_pgtide_deleted` (written with soft deletes).
    std::vector<std::string> soft_tables;
};

std::vector<std::string> soft_tables(const DestinationView& view) {
    std::vector<std::string> out;
    for (const auto& t : view.tables) {
        if (t.keeps_deleted) {
            out.push_back(t.progress.target_table);
        }
    }
    return out;
}

DestinationFacts inspect_destination(const std::string& path, const std::string& slot) {
    DestinationFacts f;
    f.probe = probe_destination(path);
    if (f.probe.ok && f.probe.file_exists) {
        try {
            const DestinationView view = read_destination(path, slot, false);
            f.checkpoint = view.checkpoint;
            f.soft_tables = soft_tables(view);
        } catch (const std::exception& e) {
            f.read_error = e.what();
        }
    }
    return f;
}

// One verdict, one line: libpq's messages span lines ("...failed: Connection refused\n\tIs the
// server running..."); fold each line break and the indentation after it into one space.
std::string one_line(std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '\n') {
            out += text[i];
            continue;
        }
        while (i + 1 < text.size() && (text[i + 1] == '\t' || text[i + 1] == ' ')) {
            ++i;
        }
        if (i + 1 < text.size()) {
            out += ' ';
        }
    }
    return out;
}

CheckVerdict ok(std::string check, std::string message) {
    return CheckVerdict{std::move(check), Status::Ok, std::move(message), {}, ExitCode::Ok};
}

CheckVerdict warn(std::string check, std::string message, std::string fix = {}) {
    return CheckVerdict{std::move(check), Status::Warn, one_line(message), std::move(fix),
                        ExitCode::Ok};
}

CheckVerdict fail(std::string check, std::string message, std::string fix = {},
                  ExitCode code = ExitCode::SourceNotReady) {
    return CheckVerdict{std::move(check), Status::Fail, one_line(message), std::move(fix), code};
}

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
        out += (i > 0 ? sep : "") + items[i];
    }
    return out;
}

std::string qualified_sql(const std::string& schema_name, const std::string& table) {
    return schema::quote_identifier(schema_name) + "." + schema::quote_identifier(table);
}

// A published table's replica identity, as the catalog states it.
struct IdentityRow {
    std::string schema_name;
    std::string table;
    char ident = 'd';
    bool has_primary_key = false;
    std::string index_name;                 ///< the REPLICA IDENTITY USING INDEX index
    std::vector<std::string> identity_cols; ///< columns the old tuple of a delete carries
    bool publishes_delete = false;
    bool publishes_update = false;
};

io::Task<std::vector<IdentityRow>> read_identities(io::PgConnection& conn,
                                                   std::vector<std::string> publications) {
    std::vector<std::optional<std::string>> params{schema::text_array_literal(publications)};
    io::PgResult r = co_await conn.exec_params(
        "SELECT n.nspname, c.relname, c.relreplident::text, c.oid::text, "
        "  EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), "
        "  coalesce((SELECT ir.relname FROM pg_index i JOIN pg_class ir ON ir.oid = i.indexrelid "
        "            WHERE i.indrelid = c.oid AND i.indisreplident), ''), "
        "  bool_or(p.pubdelete), bool_or(p.pubupdate) "
        "FROM pg_publication_tables pt "
        "JOIN pg_publication p ON p.pubname = pt.pubname "
        "JOIN pg_namespace n ON n.nspname = pt.schemaname "
        "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename "
        "WHERE pt.pubname = ANY($1::text[]) "
        "GROUP BY n.nspname, c.relname, c.relreplident, c.oid ORDER BY 1, 2",
        std::move(params));
    std::vector<IdentityRow> out;
    std::map<std::string, std::size_t> by_oid;
    std::string oids;
    for (int i = 0; i < r.rows(); ++i) {
        IdentityRow row;
        row.schema_name = std::string(r.get(i, 0));
        row.table = std::string(r.get(i, 1));
        row.ident = r.get(i, 2).empty() ? 'd' : r.get(i, 2)[0];
        row.has_primary_key = r.get(i, 4) == "t";
        row.index_name = std::string(r.get(i, 5));
        row.publishes_delete = r.get(i, 6) == "t";
        row.publishes_update = r.get(i, 7) == "t";
        by_oid.emplace(std::string(r.get(i, 3)), out.size());
        oids += (oids.empty() ? "" : ",") + std::string(r.get(i, 3));
        out.push_back(std::move(row));
    }
    // The identity's columns of every table in one query (a round trip per table would make
    // `check` of a thousand tables slow): the primary key's with REPLICA IDENTITY DEFAULT, the
    // index's with USING INDEX, in the index's order.
    std::vector<std::optional<std::string>> cols_params{"{" + oids + "}"};
    io::PgResult cols = co_await conn.exec_params(
        "SELECT i.indrelid::text, a.attname FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid "
        "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = ANY($1::oid[]) AND CASE c.relreplident "
        "  WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END "
        "ORDER BY i.indrelid, k.ord",
        std::move(cols_params));
    for (int c = 0; c < cols.rows(); ++c) {
        out[by_oid.at(std::string(cols.get(c, 0)))].identity_cols.emplace_back(cols.get(c, 1));
    }
    co_return out;
}

// One table's replica identity verdict, and what it says without naming the table's own
// columns or index (`shared`; empty when only the table's own line can say it): with many
// tables, one line stands for all whose verdicts share it.
struct IdentityVerdict {
    CheckVerdict verdict;
    std::string shared;
};

// The verdict on one table's replica identity, given the key pgtide uses for it (empty when
// the keys check failed).
IdentityVerdict identity_verdict(const IdentityRow& t, const std::vector<std::string>& pgtide_key) {
    const std::string name = t.schema_name + "." + t.table;
    const std::string check = "replica identity " + name;
    const std::string alter = "ALTER TABLE " + qualified_sql(t.schema_name, t.table);
    const bool no_identity = t.ident == 'n' || (t.ident == 'd' && !t.has_primary_key) ||
                             (t.ident == 'i' && t.index_name.empty());
    if (no_identity) {
        if (t.publishes_delete || t.publishes_update) {
            return {fail(check,
                         std::string("REPLICA IDENTITY ") +
                             (t.ident == 'n' ? "NOTHING" : "DEFAULT without a primary key") +
                             ": PostgreSQL refuses UPDATE and DELETE on this table while a "
                             "publication publishes them",
                         alter + " REPLICA IDENTITY FULL (or USING INDEX a unique index on NOT "
                                 "NULL columns)"),
                    {}};
        }
        const std::string what =
            "no replica identity, but no publication publishes its updates or deletes";
        return {ok(check, what), what};
    }
    std::string what;
    std::string shared;
    switch (t.ident) {
    case 'f':
        what = "REPLICA IDENTITY FULL: deletes and key changes carry the whole old row (more WAL "
               "per update and delete)";
        shared = what;
        break;
    case 'i':
        what = "REPLICA IDENTITY USING INDEX " + t.index_name +
               ": deletes and key changes carry (" + join(t.identity_cols) + ")";
        shared = "REPLICA IDENTITY USING INDEX: deletes and key changes carry the index's columns";
        break;
    default:
        what = "REPLICA IDENTITY DEFAULT: deletes and key changes carry the primary key (" +
               join(t.identity_cols) + ")";
        shared = "REPLICA IDENTITY DEFAULT: deletes and key changes carry the primary key";
        break;
    }
    if (t.ident != 'f' && !pgtide_key.empty()) {
        std::vector<std::string> missing;
        for (const auto& k : pgtide_key) {
            if (std::find(t.identity_cols.begin(), t.identity_cols.end(), k) ==
                t.identity_cols.end()) {
                missing.push_back(k);
            }
        }
        if (!missing.empty()) {
            return {fail(check,
                         what + ", but pgtide keys the table on (" + join(pgtide_key) +
                             "): deletes and key changes would arrive without " + join(missing) +
                             " and could not be applied",
                         alter + " REPLICA IDENTITY FULL, or set key = [" + join(t.identity_cols) +
                             "] in its [[tables]] entry"),
                    {}};
        }
    }
    if (!t.publishes_delete) {
        const std::string no_deletes = "; no publication publishes its deletes, so rows deleted "
                                       "on the source stay in the destination";
        return {warn(check, what + no_deletes,
                     "ALTER PUBLICATION ... SET (publish = 'insert, update, delete, truncate') if "
                     "deletes should replicate"),
                shared + no_deletes};
    }
    return {ok(check, what), shared};
}

// With more published tables than this, `check` lists this many of them where it names tables
// in one line, and sums up tables whose verdicts say the same in one line.
constexpr std::size_t kListedTables = 10;

// "a, b, c" or, for a long list, its first kListedTables items "… and N more".
std::string join_some(const std::vector<std::string>& items) {
    if (items.size() <= kListedTables) {
        return join(items);
    }
    const std::vector<std::string> first(items.begin(),
                                         items.begin() + std::ptrdiff_t(kListedTables));
    return join(first) + " and " + std::to_string(items.size() - kListedTables) + " more";
}

// The identity verdicts as lines: one per table for up to kListedTables tables, else one per
// shared text (naming its tables) and one per table whose verdict only it can say.
std::vector<CheckVerdict> identity_lines(std::vector<IdentityVerdict> verdicts) {
    std::vector<CheckVerdict> own; // tables' own lines
    if (verdicts.size() <= kListedTables) {
        for (auto& v : verdicts) {
            own.push_back(std::move(v.verdict));
        }
        return own;
    }
    struct Group {
        CheckVerdict verdict; ///< the shared line
        CheckVerdict first;   ///< its first table's own line, shown when the group has one table
        std::vector<std::string> tables;
    };
    std::vector<Group> groups; // in the order of their first table
    const std::string prefix = "replica identity ";
    for (auto& v : verdicts) {
        if (v.shared.empty()) {
            own.push_back(std::move(v.verdict));
            continue;
        }
        auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) {
            return x.verdict.status == v.verdict.status && x.verdict.message == v.shared;
        });
        if (g == groups.end()) {
            CheckVerdict shared = v.verdict;
            shared.message = v.shared;
            groups.push_back(Group{std::move(shared), v.verdict, {}});
            g = groups.end() - 1;
        }
        g->tables.push_back(v.verdict.check.substr(prefix.size()));
    }
    std::vector<CheckVerdict> lines;
    for (auto& g : groups) {
        if (g.tables.size() == 1) {
            lines.push_back(std::move(g.first));
            continue;
        }
        g.verdict.check = "replica identity";
        g.verdict.message = std::to_string(g.tables.size()) + " tables (" + join_some(g.tables) +
                            "): " + g.verdict.message;
        lines.push_back(std::move(g.verdict));
    }
    lines.insert(lines.end(), std::make_move_iterator(own.begin()),
                 std::make_move_iterator(own.end()));
    return lines;
}

io::Task<void> check_source(Config config, std::optional<replicate::Checkpoint> checkpoint,
                            std::vector<CheckVerdict>* out, std::vector<schema::Table>* published) {
    const std::string shown_dsn = redact_dsn(config.source.dsn);
    io::PgConnection conn;
    try {
        conn = co_await io::PgConnection::connect(
            config.source.dsn, replicate::sql_connection_params(), std::chrono::seconds(10));
    } catch (const io::PgError& e) {
        out->push_back(fail("source", "cannot connect (" + shown_dsn + "): " + e.what(),
                            "check source.dsn, that PostgreSQL runs and listens there, and that "
                            "pg_hba.conf lets this role in"));
        co_return;
    }
    const int version = conn.server_version();
    io::PgResult ver = co_await conn.exec("SELECT current_setting('server_version')");
    if (version < 150000) {
        out->push_back(fail("server version",
                            "PostgreSQL " + std::string(ver.get(0, 0)) +
                                " is too old: pgtide needs 15 or newer (publication column "
                                "lists and row filters)",
                            "upgrade the source to PostgreSQL 15 or newer"));
        co_return;
    }
    out->push_back(ok("source", "connected to PostgreSQL " + std::string(ver.get(0, 0)) + " (" +
                                    shown_dsn + ")"));

    io::PgResult s = co_await conn.exec(
        "SELECT current_setting('wal_level'), current_setting('max_replication_slots')::int, "
        "(SELECT count(*) FROM pg_replication_slots)::int, "
        "current_setting('max_wal_senders')::int, "
        "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender')::int, "
        "current_user, r.rolsuper, r.rolreplication, current_database(), "
        "(SELECT system_identifier::text FROM pg_control_system()) "
        "FROM pg_roles r WHERE r.rolname = current_user");
    const std::string wal_level(s.get(0, 0));
    const int max_slots = std::stoi(std::string(s.get(0, 1)));
    const int used_slots = std::stoi(std::string(s.get(0, 2)));
    const int max_senders = std::stoi(std::string(s.get(0, 3)));
    const int used_senders = std::stoi(std::string(s.get(0, 4)));
    const std::string role(s.get(0, 5));
    const bool superuser = s.get(0, 6) == "t";
    const bool replication = s.get(0, 7) == "t";
    const std::string database(s.get(0, 8));
    const std::string system(s.get(0, 9));

    if (wal_level == "logical") {
        out->push_back(ok("wal_level", "wal_level = logical"));
    } else {
        out->push_back(fail("wal_level", "wal_level is " + wal_level + ", not logical",
                            "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"));
    }

    std::optional<replicate::SlotInfo> slot =
        co_await replicate::read_slot_info(conn, config.source.slot);
    const int slots_needed = slot ? 0 : 1;
    const std::string slots_msg = std::to_string(used_slots) + " of max_replication_slots " +
                                  std::to_string(max_slots) + " in use; pgtide needs " +
                                  std::to_string(slots_needed) + " more";
    if (max_slots - used_slots >= slots_needed) {
        out->push_back(ok("max_replication_slots", slots_msg));
    } else {
        out->push_back(fail("max_replication_slots", slots_msg,
                            "ALTER SYSTEM SET max_replication_slots = " +
                                std::to_string(used_slots + slots_needed) +
                                "; then restart PostgreSQL (or drop unused slots: SELECT "
                                "slot_name FROM pg_replication_slots WHERE NOT active)"));
    }
    const int senders_needed = slot && slot->active ? 0 : 1;
    const std::string senders_msg = std::to_string(used_senders) + " of max_wal_senders " +
                                    std::to_string(max_senders) + " in use; pgtide needs " +
                                    std::to_string(senders_needed) + " more";
    if (max_senders - used_senders >= senders_needed) {
        out->push_back(ok("max_wal_senders", senders_msg));
    } else {
        out->push_back(fail(
            "max_wal_senders", senders_msg,
            "ALTER SYSTEM SET max_wal_senders = " + std::to_string(used_senders + senders_needed) +
                "; then restart PostgreSQL"));
    }

    const bool role_ok = superuser || replication;
    if (role_ok) {
        out->push_back(ok("role", "role " + role + " has " +
                                      (superuser ? "SUPERUSER" : std::string("REPLICATION"))));
    } else {
        out->push_back(fail("role", "role " + role + " has neither REPLICATION nor SUPERUSER",
                            "ALTER ROLE " + schema::quote_identifier(role) + " REPLICATION"));
    }
    if (role_ok && senders_needed > 0 && max_senders - used_senders >= 1) {
        try {
            replicate::ReplicationConnection rc =
                co_await replicate::ReplicationConnection::connect(config.source.dsn,
                                                                   "pgtide check");
            const replicate::SourceIdentity id = co_await rc.identify_system();
            rc.connection().close();
            out->push_back(ok("replication connection", "IDENTIFY_SYSTEM works (system " +
                                                            id.system_identifier + ", timeline " +
                                                            std::to_string(id.timeline) +
                                                            ", database " + id.database + ")"));
        } catch (const io::PgError& e) {
            out->push_back(fail("replication connection",
                                std::string("a replication=database connection fails: ") + e.what(),
                                "pg_hba.conf must let role " + role + " into database " + database +
                                    " (logical replication connections match the database, "
                                    "not the `replication` keyword)"));
        }
    }

    // Publications.
    bool publications_ok = true;
    for (const auto& pub : config.source.publications) {
        const std::string check = "publication " + pub;
        std::vector<std::optional<std::string>> params{pub};
        io::PgResult p = co_await conn.exec_params(
            "SELECT p.puballtables, "
            "(SELECT count(*) FROM pg_publication_tables t WHERE t.pubname = p.pubname), "
            "concat_ws(', ', CASE WHEN p.pubinsert THEN 'insert' END, "
            "  CASE WHEN p.pubupdate THEN 'update' END, CASE WHEN p.pubdelete THEN 'delete' END, "
            "  CASE WHEN p.pubtruncate THEN 'truncate' END) "
            "FROM pg_publication p WHERE p.pubname = $1",
            std::move(params));
        if (p.rows() == 0) {
            publications_ok = false;
            out->push_back(fail(check, "publication \"" + pub + "\" does not exist",
                                "CREATE PUBLICATION " + schema::quote_identifier(pub) +
                                    " FOR TABLE ...; or fix source.publications"));
            continue;
        }
        const std::string count(p.get(0, 1));
        if (count == "0") {
            publications_ok = false;
            out->push_back(
                fail(check, "publication \"" + pub + "\" lists no tables",
                     "ALTER PUBLICATION " + schema::quote_identifier(pub) + " ADD TABLE ..."));
            continue;
        }
        out->push_back(ok(check, "publication \"" + pub + "\" lists " + count + " table" +
                                     (count == "1" ? "" : "s") +
                                     (p.get(0, 0) == "t" ? " (FOR ALL TABLES)" : "") +
                                     " and publishes " + std::string(p.get(0, 2))));
    }
    if (!publications_ok) {
        co_return; // the checks below are about the publications' tables
    }

    {
        std::vector<std::optional<std::string>> params{
            schema::text_array_literal(config.source.publications)};
        io::PgResult denied = co_await conn.exec_params(
            "SELECT DISTINCT format('%I.%I', schemaname, tablename) FROM pg_publication_tables "
            "WHERE pubname = ANY($1::text[]) AND NOT has_table_privilege("
            "format('%I.%I', schemaname, tablename), 'SELECT') ORDER BY 1",
            std::move(params));
        if (denied.rows() == 0) {
            out->push_back(
                ok("select privilege", "role " + role + " can SELECT from every published table"));
        } else {
            std::vector<std::string> names;
            for (int i = 0; i < denied.rows(); ++i) {
                names.emplace_back(denied.get(i, 0));
            }
            out->push_back(
                fail("select privilege", "role " + role + " cannot SELECT from " + join(names),
                     "GRANT SELECT ON " + join(names) + " TO " + schema::quote_identifier(role)));
        }
    }

    std::map<std::string, std::vector<std::string>> keys; // qualified name → pgtide's key
    try {
        replicate::SourceCatalog catalog;
        std::vector<replicate::SourceTable> tables = co_await catalog.published_tables(
            conn, config.source.publications, table_overrides(config));
        std::vector<std::string> described;
        for (const auto& t : tables) {
            published->push_back(t.table);
            std::vector<std::string> names;
            for (auto k : t.table.key_columns) {
                names.push_back(t.table.columns[k].name);
            }
            described.push_back(t.table.qualified() + " (" + join(names) + ")");
            keys[t.table.qualified()] = std::move(names);
        }
        out->push_back(ok("keys", (described.size() > kListedTables
                                       ? "every one of the " + std::to_string(described.size()) +
                                             " published tables has a usable key: "
                                       : std::string("every published table has a usable key: ")) +
                                      join_some(described)));
    } catch (const replicate::DefiniteError& e) {
        out->push_back(fail("keys", e.what(), {}, e.code()));
    }

    std::vector<IdentityRow> identities =
        co_await read_identities(conn, config.source.publications);
    std::vector<IdentityVerdict> verdicts;
    for (const auto& t : identities) {
        const auto it = keys.find(t.schema_name + "." + t.table);
        verdicts.push_back(
            identity_verdict(t, it == keys.end() ? std::vector<std::string>{} : it->second));
    }
    for (auto& line : identity_lines(std::move(verdicts))) {
        out->push_back(std::move(line));
    }

    // The destination's identity and the slot.
    if (checkpoint) {
        if (checkpoint->system_identifier != system || checkpoint->database != database) {
            out->push_back(fail("destination identity",
                                "the destination was filled from system " +
                                    checkpoint->system_identifier + ", database " +
                                    checkpoint->database + ", but the source is system " + system +
                                    ", database " + database,
                                "use a new destination or fix source.dsn", ExitCode::Fenced));
            co_return; // the slot of that name is not this destination's
        }
        out->push_back(ok("destination identity",
                          "the destination follows this source (system " + system + ", database " +
                              database + ") in epoch " + std::to_string(checkpoint->epoch) +
                              ", phase " + replicate::to_string(checkpoint->phase) + ", at " +
                              checkpoint->lsn.str()));
    }
    const std::string slot_name = config.source.slot;
    const std::string slot_check = "slot " + slot_name;
    if (!slot) {
        if (checkpoint && checkpoint->phase == replicate::Phase::Streaming) {
            out->push_back(fail(slot_check,
                                "replication slot " + slot_name +
                                    " no longer exists, but the destination streamed from it",
                                "`pgtide run --resnapshot` copies everything again into a new "
                                "epoch",
                                ExitCode::SlotLost));
        } else {
            out->push_back(ok(slot_check, "replication slot " + slot_name +
                                              " does not exist yet; `pgtide run` creates it"));
        }
        co_return;
    }
    const std::string drop_sql = "SELECT pg_drop_replication_slot('" + slot_name + "')";
    if (slot->slot_type != "logical" || slot->plugin != "pgoutput" || slot->database != database) {
        out->push_back(fail(slot_check,
                            "replication slot " + slot_name + " is a " + slot->slot_type + " slot" +
                                (slot->plugin.empty() ? "" : " of plugin " + slot->plugin) +
                                (slot->database.empty() ? "" : " in database " + slot->database) +
                                ", not a pgoutput slot of " + database,
                            "choose another source.slot"));
        co_return;
    }
    const bool lost = slot->wal_status == "lost" || !slot->invalidation_reason.empty();
    std::string state =
        std::string(slot->active ? "active (walsender pid " +
                                       std::to_string(slot->active_pid.value_or(0)) + ")"
                                 : "inactive") +
        ", wal_status " + (slot->wal_status.empty() ? "unknown" : slot->wal_status);
    if (slot->retained_bytes) {
        state += ", retains " + std::to_string(*slot->retained_bytes) + " bytes of WAL";
    }
    bool ours = false;
    if (checkpoint) {
        ours = replicate::slot_proven_ours(*checkpoint, *slot);
    }
    if (!ours) {
        if (config.source.existing_slot == SourceConfig::ExistingSlot::RestartSnapshot &&
            !slot->active) {
            out->push_back(
                warn(slot_check, "replication slot " + slot_name + " exists (" + state +
                                     ") and this destination cannot prove it created it; "
                                     "existing_slot = \"restart_snapshot\" will replace it and "
                                     "copy everything again"));
        } else {
            out->push_back(fail(slot_check,
                                "replication slot " + slot_name + " exists (" + state +
                                    ") and this destination cannot prove it created it",
                                "drop it (" + drop_sql +
                                    "), choose another source.slot, or set existing_slot = "
                                    "\"restart_snapshot\""));
        }
        co_return;
    }
    if (lost) {
        out->push_back(fail(
            slot_check,
            "replication slot " + slot_name + " was invalidated by the server (" + state +
                (slot->invalidation_reason.empty() ? "" : ", reason " + slot->invalidation_reason) +
                ")",
            "`pgtide run --resnapshot` copies everything again into a new epoch",
            ExitCode::SlotLost));
    } else if (slot->wal_status == "unreserved") {
        out->push_back(warn(slot_check,
                            "replication slot " + slot_name + " is this destination's (" + state +
                                "); its WAL is past max_slot_wal_keep_size and will be removed "
                                "at the next checkpoint",
                            "run pgtide now, or raise max_slot_wal_keep_size"));
    } else {
        out->push_back(ok(slot_check, "replication slot " + slot_name + " is this destination's (" +
                                          state + ")"));
    }
}

// Into PostgreSQL: can this role's sessions write there, and create pgtide's metadata tables
// (every start runs CREATE TABLE IF NOT EXISTS for them, which needs CREATE on schema public
// even when they exist) and write them? CASE, not AND, guards the privilege functions, which
// fail on a schema or table that does not exist: SQL does not promise AND's order.
io::Task<void> check_destination_writes(Config config, io::PgConnection* conn,
                                        std::vector<CheckVerdict>* out) {
    const std::vector<std::string>& metadata = replicate::PostgresDestination::metadata_tables();
    const std::string sql =
        "SELECT pg_catalog.pg_is_in_recovery(), "
        "pg_catalog.current_setting('transaction_read_only') = 'on', current_user, "
        "CASE WHEN pg_catalog.to_regnamespace('public') IS NOT NULL THEN "
        "pg_catalog.has_schema_privilege('public', 'CREATE') END, "
        "coalesce((SELECT pg_catalog.string_agg('public.' || m.name, ', ' ORDER BY m.ord) "
        "FROM unnest($1::text[]) WITH ORDINALITY AS m(name, ord) "
        "WHERE CASE WHEN pg_catalog.to_regclass('public.' || m.name) IS NOT NULL THEN NOT ("
        "pg_catalog.has_table_privilege('public.' || m.name, 'SELECT') AND "
        "pg_catalog.has_table_privilege('public.' || m.name, 'INSERT') AND "
        "pg_catalog.has_table_privilege('public.' || m.name, 'UPDATE') AND "
        "pg_catalog.has_table_privilege('public.' || m.name, 'DELETE')) END), ''), "
        "pg_catalog.to_regnamespace('public') IS NOT NULL";
    std::vector<std::optional<std::string>> params{schema::text_array_literal(metadata)};
    io::PgResult r = co_await conn->exec_params(sql, std::move(params));
    const std::string role(r.get(0, 2));
    const std::string quoted_role = schema::quote_identifier(role);
    if (r.get(0, 0) == "t") {
        out->push_back(fail("destination writes",
                            "the destination " + destination_name(config) +
                                " is a standby (in recovery): nothing can be written there",
                            "point destination.url at the primary", ExitCode::Usage));
        co_return;
    }
    if (r.get(0, 1) == "t") {
        out->push_back(fail("destination writes",
                            "the sessions of role " + role + " on the destination " +
                                destination_name(config) +
                                " are read-only (default_transaction_read_only = on)",
                            "ALTER ROLE " + quoted_role +
                                " SET default_transaction_read_only = off, or the same for the "
                                "database",
                            ExitCode::Usage));
        co_return;
    }
    if (r.get(0, 5) != "t") {
        out->push_back(fail("destination writes",
                            "the destination " + destination_name(config) +
                                " has no schema public, where pgtide keeps its tables",
                            "CREATE SCHEMA public AUTHORIZATION " + quoted_role, ExitCode::Usage));
        co_return;
    }
    if (r.get(0, 3) != "t") {
        out->push_back(fail("destination writes",
                            "role " + role +
                                " cannot create tables in schema public of the destination: "
                                "pgtide keeps its tables there (" +
                                join(metadata) +
                                ") and creates them at every start where missing, which takes "
                                "CREATE there even when they exist",
                            "GRANT CREATE ON SCHEMA public TO " + quoted_role, ExitCode::Usage));
        co_return;
    }
    if (const std::string denied(r.get(0, 4)); !denied.empty()) {
        out->push_back(
            fail("destination writes",
                 "role " + role + " cannot read and write pgtide's tables " + denied +
                     " in the destination",
                 "GRANT SELECT, INSERT, UPDATE, DELETE ON " + denied + " TO " + quoted_role,
                 ExitCode::Usage));
        co_return;
    }
    out->push_back(ok("destination writes", "role " + role +
                                                " can write the destination and create and "
                                                "write pgtide's tables in schema public"));
}

// Into PostgreSQL: can this role create the destination tables that are missing (and their
// schemas), and change those that exist? pgtide alters them (their key during a copy, columns
// the source adds) and empties them for a copy, which takes their owner.
io::Task<void> check_destination_tables(std::vector<schema::Table> tables, io::PgConnection* conn,
                                        std::vector<CheckVerdict>* out) {
    std::vector<std::string> schemas;
    std::vector<std::string> names;
    for (const auto& t : tables) {
        const auto target = replicate::PostgresDestination::target_name(t);
        schemas.push_back(target.schema);
        names.push_back(target.name);
    }
    // Per target: its schema exists, the role may create there (in the schema, or a schema in
    // the database), the table exists, and the role owns it (directly or through a role it is a
    // member of; a superuser owns every table).
    const std::string sql =
        "SELECT n.oid IS NOT NULL, CASE WHEN n.oid IS NULL THEN "
        "pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE') ELSE "
        "pg_catalog.has_schema_privilege(n.oid, 'CREATE') END, c.oid IS NOT NULL, "
        "c.oid IS NULL OR pg_catalog.pg_has_role(c.relowner, 'USAGE'), current_user, "
        "pg_catalog.current_database() "
        "FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(schema_name, name, ord) "
        "LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = t.schema_name "
        "LEFT JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.name "
        "ORDER BY t.ord";
    std::vector<std::optional<std::string>> params{schema::text_array_literal(schemas),
                                                   schema::text_array_literal(names)};
    io::PgResult r = co_await conn->exec_params(sql, std::move(params));
    const std::string role(r.get(0, 4));
    const std::string database(r.get(0, 5));
    std::set<std::string> no_schema;    // schemas to create, without CREATE on the database
    std::set<std::string> no_create;    // schemas to create tables in, without CREATE there
    std::vector<std::string> not_owned; // existing tables the role does not own
    std::size_t existing = 0;
    for (int i = 0; i < r.rows(); ++i) {
        const auto at = std::size_t(i);
        const std::string table = qualified_sql(schemas[at], names[at]);
        if (r.get(i, 2) == "t") {
            ++existing;
            if (r.get(i, 3) != "t") {
                not_owned.push_back(table);
            }
        } else if (r.get(i, 1) != "t") {
            (r.get(i, 0) == "t" ? no_create : no_schema).insert(schemas[at]);
        }
    }
    const std::string quoted_role = schema::quote_identifier(role);
    const auto listed = [](const std::set<std::string>& s) {
        std::vector<std::string> quoted;
        for (const auto& name : s) {
            quoted.push_back(schema::quote_identifier(name));
        }
        return quoted;
    };
    if (!no_schema.empty()) {
        const std::vector<std::string> quoted = listed(no_schema);
        out->push_back(fail("destination tables",
                            "role " + role + " cannot create schema" +
                                (quoted.size() == 1 ? " " : "s ") + join(quoted) +
                                " in the destination for the published tables that go there",
                            "GRANT CREATE ON DATABASE " + schema::quote_identifier(database) +
                                " TO " + quoted_role + ", or CREATE SCHEMA " + quoted.front() +
                                " AUTHORIZATION " + quoted_role,
                            ExitCode::Usage));
    }
    if (!no_create.empty()) {
        const std::vector<std::string> quoted = listed(no_create);
        out->push_back(fail(
            "destination tables",
            "role " + role + " cannot create tables in schema" + (quoted.size() == 1 ? " " : "s ") +
                join(quoted) + " of the destination, where published tables go",
            "GRANT CREATE ON SCHEMA " + join(quoted) + " TO " + quoted_role, ExitCode::Usage));
    }
    if (!not_owned.empty()) {
        out->push_back(fail("destination tables",
                            "role " + role + " does not own the destination table" +
                                (not_owned.size() == 1 ? " " : "s ") + join_some(not_owned) +
                                ": pgtide alters the tables it copies into and follows",
                            "ALTER TABLE " + not_owned.front() + " OWNER TO " + quoted_role +
                                (not_owned.size() > 1 ? ", and the same for the others" : ""),
                            ExitCode::Usage));
    }
    if (no_schema.empty() && no_create.empty() && not_owned.empty()) {
        const std::size_t missing = tables.size() - existing;
        const auto count = [](std::size_t n) {
            return std::to_string(n) + (n == 1 ? " destination table" : " destination tables");
        };
        out->push_back(ok("destination tables",
                          "role " + role +
                              (existing == 0  ? " can create the " + count(missing)
                               : missing == 0 ? " owns the " + count(existing)
                                              : " can create the " + count(missing) +
                                                    " that are missing and owns the " +
                                                    std::to_string(existing) + " that exist")));
    }
}

} // namespace

io::Task<CheckReport> run_check(Config config) {
    CheckReport report;
    const std::string path = config.destination.sqlite_path();
    const std::string slot = config.source.slot;
    DestinationFacts dest;
    if (config.destination.is_postgresql()) {
        // Reachable and readable; pgtide creates its tables (and needs CREATE there) itself.
        std::exception_ptr error;
        try {
            DestinationView view = co_await load_destination(config, false);
            dest.probe.ok = true;
            dest.probe.file_exists = view.has_metadata;
            dest.probe.message = "the postgresql destination " + destination_name(config) +
                                 (view.has_metadata ? " answers and holds pgtide's tables"
                                                    : " answers; pgtide will create its tables");
            dest.checkpoint = view.checkpoint;
            dest.soft_tables = soft_tables(view);
        } catch (...) {
            error = std::current_exception();
        }
        if (error) {
            try {
                std::rethrow_exception(error);
            } catch (const std::exception& e) {
                dest.probe.ok = false;
                dest.probe.message = e.what();
                dest.probe.fix = "check destination.url (host, port, database, user) and that "
                                 "the database exists";
            }
        }
    } else {
        io::WorkerThread worker("sqlite-check");
        auto job = [path, slot]() { return inspect_destination(path, slot); };
        dest = co_await worker.run(std::move(job));
    }
    if (!dest.probe.ok) {
        report.verdicts.push_back(
            fail("destination", dest.probe.message, dest.probe.fix, ExitCode::Usage));
    } else if (!dest.read_error.empty()) {
        report.verdicts.push_back(fail("destination", dest.read_error,
                                       "point destination.url at a file pgtide created, or at a "
                                       "new path",
                                       ExitCode::Usage));
    } else {
        std::string message = dest.probe.message;
        if (dest.probe.file_exists) {
            message += dest.checkpoint ? "; it has a checkpoint for slot " + slot
                                       : "; it has no checkpoint for slot " + slot + " yet";
        }
        report.verdicts.push_back(ok("destination", message));
        const bool soft = config.destination.deletes == DestinationConfig::Deletes::Soft;
        if (!soft && !dest.soft_tables.empty()) {
            report.verdicts.push_back(fail(
                "deletes",
                "destination tables " + join(dest.soft_tables) +
                    " keep rows deleted on the source, marked in _pgtide_deleted (written with "
                    "deletes = \"soft\"); with deletes = \"hard\", pgtide run refuses them",
                "set destination.deletes = \"soft\", or drop those tables to copy them anew with "
                "hard deletes",
                ExitCode::Usage));
        } else if (soft) {
            report.verdicts.push_back(ok("deletes", "soft: rows deleted on the source stay in the "
                                                    "destination, marked _pgtide_deleted = 1"));
        }
    }
    // Into PostgreSQL, one more connection for what the destination's role may do there.
    std::optional<io::PgConnection> writes;
    if (config.destination.is_postgresql() && dest.probe.ok) {
        try {
            writes = co_await io::PgConnection::connect(config.destination.url,
                                                        replicate::sql_connection_params(),
                                                        std::chrono::seconds(10));
        } catch (const io::PgError& e) {
            report.verdicts.push_back(fail("destination writes",
                                           "cannot connect to the destination " +
                                               destination_name(config) + ": " + e.what(),
                                           "check destination.url", ExitCode::Usage));
        }
    }
    if (writes) {
        co_await check_destination_writes(config, &*writes, &report.verdicts);
    }
    std::vector<schema::Table> published;
    co_await check_source(config, dest.checkpoint, &report.verdicts, &published);
    if (writes && !published.empty()) {
        co_await check_destination_tables(std::move(published), &*writes, &report.verdicts);
    }
    co_return report;
}

int check_exit_code(const CheckReport& report) {
    std::optional<ExitCode> first;
    bool usage = false;
    bool not_ready = false;
    for (const auto& v : report.verdicts) {
        if (v.status != Status::Fail) {
            continue;
        }
        first = first.value_or(v.code);
        usage = usage || v.code == ExitCode::Usage;
        not_ready = not_ready || v.code == ExitCode::SourceNotReady;
    }
    if (!first) {
        return int(ExitCode::Ok);
    }
    if (usage) {
        return int(ExitCode::Usage);
    }
    if (not_ready) {
        return int(ExitCode::SourceNotReady);
    }
    return int(*first);
}

std::string format_check(const CheckReport& report, bool json) {
    int passed = 0;
    int warnings = 0;
    int failed = 0;
    for (const auto& v : report.verdicts) {
        (v.status == Status::Ok ? passed : v.status == Status::Warn ? warnings : failed) += 1;
    }
    if (json) {
        std::string o = "{\"ok\":" + std::string(failed == 0 ? "true" : "false") +
                        ",\"exit_code\":" + std::to_string(check_exit_code(report)) +
                        ",\"checks\":[";
        for (std::size_t i = 0; i < report.verdicts.size(); ++i) {
            const auto& v = report.verdicts[i];
            o += (i > 0 ? "," : "");
            o += "{\"check\":" + json_quote(v.check) + ",\"status\":" +
                 json_quote(v.status == Status::Ok     ? "ok"
                            : v.status == Status::Warn ? "warn"
                                                       : "fail") +
                 ",\"message\":" + json_quote(v.message) +
                 ",\"fix\":" + (v.fix.empty() ? std::string("null") : json_quote(v.fix)) + "}";
        }
        return o + "]}\n";
    }
    std::string o;
    for (const auto& v : report.verdicts) {
        o += v.status == Status::Ok ? "ok   " : v.status == Status::Warn ? "warn " : "FAIL ";
        o += v.check + ": " + v.message;
        if (!v.fix.empty()) {
            o += "; fix: " + v.fix;
        }
        o += "\n";
    }
    o += "pgtide check: " + std::to_string(passed) + " passed, " + std::to_string(warnings) +
         " warning" + (warnings == 1 ? "" : "s") + ", " + std::to_string(failed) + " failed\n";
    return o;
}

} // namespace pgtide::app
