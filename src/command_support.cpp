// What `check`, `status` and `drop` share: a read-only look at the SQLite destination, and JSON
// text.
#include "src/command_support.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <ctime>
#include <sqlite3.h>
#include <unistd.h>

#include "io/log.hpp"
#include "io/pg_connection.hpp"
#include "io/worker_thread.hpp"
#include "replicate/errors.hpp"
#include "replicate/postgres_destination.hpp"
#include "replicate/session.hpp"
#include "schema/sql_quote.hpp"

namespace pgtide::app {

namespace {

struct DbCloser {
    void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
    void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;
using Statement = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// A read-only connection to one file, its errors naming the file.
class Reader {
public:
    explicit Reader(const std::string& path) : path_(path) {
        sqlite3* raw = nullptr;
        const int rc = sqlite3_open_v2(
            path.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
            nullptr);
        db_.reset(raw);
        if (rc != SQLITE_OK) {
            fail(rc, "opening it read-only");
        }
        sqlite3_busy_timeout(db_.get(), 5000);
    }

    Statement prepare(const std::string& sql, const std::string& what) {
        sqlite3_stmt* raw = nullptr;
        const int rc = sqlite3_prepare_v2(db_.get(), sql.c_str(), int(sql.size()), &raw, nullptr);
        Statement s(raw);
        if (rc != SQLITE_OK) {
            fail(rc, what);
        }
        return s;
    }

    // SQLITE_ROW or SQLITE_DONE.
    int step(sqlite3_stmt* s, const std::string& what) {
        const int rc = sqlite3_step(s);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
            fail(rc, what);
        }
        return rc;
    }

    void exec(const std::string& sql, const std::string& what) {
        Statement s = prepare(sql, what);
        while (step(s.get(), what) == SQLITE_ROW) {
        }
    }

    [[noreturn]] void fail(int rc, const std::string& what) const {
        const char* msg = db_ ? sqlite3_errmsg(db_.get()) : sqlite3_errstr(rc);
        throw std::runtime_error("sqlite destination " + path_ + ": " + what + ": " + msg +
                                 " (SQLite code " + std::to_string(rc) + ")");
    }

private:
    std::string path_;
    Db db_;
};

std::string column_text(sqlite3_stmt* s, int col) {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, col));
    return p ? std::string(p, std::size_t(sqlite3_column_bytes(s, col))) : std::string();
}

schema::Lsn column_lsn(sqlite3_stmt* s, int col) {
    const std::int64_t v = sqlite3_column_int64(s, col);
    return schema::Lsn(v < 0 ? 0 : std::uint64_t(v));
}

bool table_exists(Reader& r, const std::string& name) {
    Statement s = r.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1 "
                            "COLLATE NOCASE",
                            "looking for table " + name);
    sqlite3_bind_text(s.get(), 1, name.c_str(), int(name.size()), SQLITE_TRANSIENT);
    return r.step(s.get(), "looking for table " + name) == SQLITE_ROW;
}

} // namespace

DestinationView read_destination(const std::string& path, const std::string& slot,
                                 bool count_rows) {
    DestinationView view;
    view.path = path;
    std::error_code ec;
    view.file_exists = std::filesystem::exists(path, ec);
    if (!view.file_exists) {
        return view;
    }
    Reader r(path);
    // One read transaction: the checkpoint, the table states and the counts agree.
    r.exec("BEGIN", "starting a read transaction");
    view.has_metadata = table_exists(r, "_pgtide_checkpoint");
    if (!view.has_metadata) {
        r.exec("COMMIT", "ending the read transaction");
        return view;
    }
    {
        const std::string what = "reading the checkpoint of slot " + slot;
        Statement s = r.prepare(
            R"(SELECT "slot_name", "system_identifier", "timeline", "database", "epoch", "phase",
                      "consistent_lsn", "lsn", "owner", "lease_until", "updated_at"
               FROM "_pgtide_checkpoint" WHERE "slot_name" = ?1)",
            what);
        sqlite3_bind_text(s.get(), 1, slot.c_str(), int(slot.size()), SQLITE_TRANSIENT);
        if (r.step(s.get(), what) == SQLITE_ROW) {
            replicate::Checkpoint c;
            c.slot_name = column_text(s.get(), 0);
            c.system_identifier = column_text(s.get(), 1);
            c.timeline = sqlite3_column_int64(s.get(), 2);
            c.database = column_text(s.get(), 3);
            c.epoch = sqlite3_column_int64(s.get(), 4);
            const std::string phase = column_text(s.get(), 5);
            const auto parsed = replicate::parse_phase(phase);
            if (!parsed) {
                throw std::runtime_error("sqlite destination " + path + ": " + what +
                                         ": unknown phase '" + phase + "'");
            }
            c.phase = *parsed;
            c.consistent_lsn = column_lsn(s.get(), 6);
            c.lsn = column_lsn(s.get(), 7);
            c.owner = column_text(s.get(), 8);
            c.lease_until_unix_ms = sqlite3_column_int64(s.get(), 9);
            c.updated_at_unix_ms = sqlite3_column_int64(s.get(), 10);
            view.checkpoint = std::move(c);
        }
    }
    if (table_exists(r, "_pgtide_tables")) {
        const std::string what = "reading the table states of slot " + slot;
        // copy_key: '' in a destination written before pgtide recorded it (not migrated here:
        // status only reads).
        bool has_copy_key = false;
        {
            Statement c = r.prepare("SELECT count(*) FROM pragma_table_info('_pgtide_tables') "
                                    "WHERE name = 'copy_key'",
                                    what);
            has_copy_key =
                r.step(c.get(), what) == SQLITE_ROW && sqlite3_column_int64(c.get(), 0) > 0;
        }
        Statement s = r.prepare(
            std::string(R"(SELECT "source_table", "target_table", "state", "epoch", "copy_lsn",
                                  "rows_copied", )") +
                (has_copy_key ? R"("copy_key")" : "''") +
                R"( FROM "_pgtide_tables" WHERE "slot_name" = ?1 ORDER BY "source_table")",
            what);
        sqlite3_bind_text(s.get(), 1, slot.c_str(), int(slot.size()), SQLITE_TRANSIENT);
        while (r.step(s.get(), what) == SQLITE_ROW) {
            DestinationTable t;
            t.progress.source_table = column_text(s.get(), 0);
            t.progress.target_table = column_text(s.get(), 1);
            const std::string state = column_text(s.get(), 2);
            const auto parsed = replicate::parse_table_state(state);
            if (!parsed) {
                throw std::runtime_error("sqlite destination " + path + ": " + what + ": table " +
                                         t.progress.source_table + " has state '" + state + "'");
            }
            t.progress.state = *parsed;
            t.progress.epoch = sqlite3_column_int64(s.get(), 3);
            t.progress.copy_lsn = column_lsn(s.get(), 4);
            t.progress.rows_copied = sqlite3_column_int64(s.get(), 5);
            t.progress.copy_key = column_text(s.get(), 6);
            view.tables.push_back(std::move(t));
        }
    }
    for (auto& t : view.tables) {
        if (!table_exists(r, t.progress.target_table)) {
            continue;
        }
        const std::string what = "reading the columns of " + t.progress.target_table;
        Statement soft = r.prepare("SELECT count(*) FROM pragma_table_info(?1) WHERE name = "
                                   "'_pgtide_deleted'",
                                   what);
        sqlite3_bind_text(soft.get(), 1, t.progress.target_table.c_str(), -1, SQLITE_TRANSIENT);
        const bool marks =
            r.step(soft.get(), what) == SQLITE_ROW && sqlite3_column_int64(soft.get(), 0) == 1;
        t.keeps_deleted = marks;
        if (count_rows) {
            const std::string counting = "counting the rows of " + t.progress.target_table;
            Statement s =
                r.prepare(std::string("SELECT count(*), ") +
                              (marks ? "count(*) FILTER (WHERE \"_pgtide_deleted\" = 1)" : "NULL") +
                              " FROM " + schema::quote_identifier(t.progress.target_table),
                          counting);
            if (r.step(s.get(), counting) == SQLITE_ROW) {
                t.rows = sqlite3_column_int64(s.get(), 0);
                if (marks) {
                    t.rows_deleted = sqlite3_column_int64(s.get(), 1);
                }
            }
        }
    }
    r.exec("COMMIT", "ending the read transaction");
    return view;
}

std::string destination_name(const Config& config) {
    return config.destination.is_postgresql() ? redact_dsn(config.destination.url)
                                              : "sqlite:" + config.destination.sqlite_path();
}

namespace {

io::Task<DestinationView> read_postgres_destination(std::string url, std::string name,
                                                    std::string slot, bool count_rows) {
    DestinationView view;
    view.path = name;
    std::optional<io::PgConnection> conn;
    try {
        conn = co_await io::PgConnection::connect(url, replicate::sql_connection_params(),
                                                  std::chrono::seconds(10));
    } catch (const io::PgError& e) {
        throw replicate::DefiniteError(replicate::ExitCode::Usage,
                                       "cannot connect to the destination " + name + ": " +
                                           e.what() + "; check destination.url");
    }
    view.file_exists = true;
    const auto fail = [&name](const std::string& what, const std::string& detail) {
        return std::runtime_error("postgresql destination " + name + ": " + what + ": " + detail);
    };
    co_await conn->exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    io::PgResult meta =
        co_await conn->exec("SELECT to_regclass('public._pgtide_checkpoint') IS NOT NULL, "
                            "to_regclass('public._pgtide_tables') IS NOT NULL, "
                            "EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "
                            "to_regclass('public._pgtide_tables') AND attname = 'copy_key' AND "
                            "NOT attisdropped)");
    view.has_metadata = meta.get(0, 0) == "t";
    if (!view.has_metadata) {
        co_return view;
    }
    std::vector<std::optional<std::string>> slot_param;
    slot_param.emplace_back(slot);
    io::PgResult cp = co_await conn->exec_params(
        "SELECT slot_name, system_identifier, timeline, database, epoch, phase, consistent_lsn, "
        "lsn, owner, lease_until, updated_at FROM public._pgtide_checkpoint WHERE slot_name = $1",
        slot_param);
    const std::string what = "reading the checkpoint of slot " + slot;
    if (cp.rows() == 1) {
        replicate::Checkpoint c;
        try {
            const auto num = [&cp](int col) { return std::stoll(std::string(cp.get(0, col))); };
            c.slot_name = std::string(cp.get(0, 0));
            c.system_identifier = std::string(cp.get(0, 1));
            c.timeline = num(2);
            c.database = std::string(cp.get(0, 3));
            c.epoch = num(4);
            const auto phase = replicate::parse_phase(cp.get(0, 5));
            if (!phase) {
                throw std::invalid_argument("unknown phase '" + std::string(cp.get(0, 5)) + "'");
            }
            c.phase = *phase;
            c.consistent_lsn = schema::Lsn(std::uint64_t(num(6)));
            c.lsn = schema::Lsn(std::uint64_t(num(7)));
            c.owner = std::string(cp.get(0, 8));
            c.lease_until_unix_ms = num(9);
            c.updated_at_unix_ms = num(10);
        } catch (const std::exception& e) {
            throw fail(what, e.what());
        }
        view.checkpoint = std::move(c);
    }
    if (meta.get(0, 1) == "t") {
        io::PgResult tables = co_await conn->exec_params(
            std::string(
                "SELECT source_table, target_table, state, epoch, copy_lsn, rows_copied, ") +
                (meta.get(0, 2) == "t" ? "copy_key" : "''") +
                " FROM public._pgtide_tables WHERE slot_name = $1 ORDER BY source_table",
            slot_param);
        for (int r = 0; r < tables.rows(); ++r) {
            DestinationTable t;
            t.progress.source_table = std::string(tables.get(r, 0));
            t.progress.target_table = std::string(tables.get(r, 1));
            const auto state = replicate::parse_table_state(tables.get(r, 2));
            if (!state) {
                throw fail("reading the table states of slot " + slot,
                           "table " + t.progress.source_table + " has state '" +
                               std::string(tables.get(r, 2)) + "'");
            }
            t.progress.state = *state;
            t.progress.epoch = std::stoll(std::string(tables.get(r, 3)));
            t.progress.copy_lsn =
                schema::Lsn(std::uint64_t(std::stoll(std::string(tables.get(r, 4)))));
            t.progress.rows_copied = std::stoll(std::string(tables.get(r, 5)));
            t.progress.copy_key = std::string(tables.get(r, 6));
            view.tables.push_back(std::move(t));
        }
    }
    for (auto& t : view.tables) {
        schema::Table probe;
        const auto dot = t.progress.source_table.find('.');
        probe.schema = t.progress.source_table.substr(0, dot);
        probe.name = dot == std::string::npos ? t.progress.source_table
                                              : t.progress.source_table.substr(dot + 1);
        probe.target = t.progress.target_table;
        const std::string target = replicate::PostgresDestination::target_sql(probe);
        std::vector<std::optional<std::string>> target_param;
        target_param.emplace_back(target);
        io::PgResult exists =
            co_await conn->exec_params("SELECT to_regclass($1) IS NOT NULL", target_param);
        if (exists.get(0, 0) != "t") {
            continue;
        }
        io::PgResult soft = co_await conn->exec_params(
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = "
            "'_pgtide_deleted' AND NOT attisdropped",
            target_param);
        const bool marks = soft.rows() == 1;
        t.keeps_deleted = marks;
        if (!count_rows) {
            continue;
        }
        // Named first: GCC 12 mishandles temporaries built inside a co_await expression.
        std::string count_sql =
            std::string("SELECT count(*), ") +
            (marks ? "count(*) FILTER (WHERE \"_pgtide_deleted\" = 1)" : "NULL") + " FROM " +
            target;
        io::PgResult n = co_await conn->exec(std::move(count_sql));
        t.rows = std::stoll(std::string(n.get(0, 0)));
        if (marks) {
            t.rows_deleted = std::stoll(std::string(n.get(0, 1)));
        }
    }
    co_await conn->exec("COMMIT");
    co_return view;
}

} // namespace

io::Task<DestinationView> load_destination(Config config, bool count_rows) {
    if (config.destination.is_postgresql()) {
        co_return co_await read_postgres_destination(
            config.destination.url, destination_name(config), config.source.slot, count_rows);
    }
    io::WorkerThread reader("sqlite-reader");
    const std::string path = config.destination.sqlite_path();
    const std::string slot = config.source.slot;
    auto read_job = [path, slot, count_rows]() { return read_destination(path, slot, count_rows); };
    co_return co_await reader.run(std::move(read_job));
}

DestinationProbe probe_destination(const std::string& path) {
    namespace fs = std::filesystem;
    DestinationProbe p;
    std::error_code ec;
    fs::path file(path);
    fs::path dir = file.parent_path();
    if (dir.empty()) {
        dir = ".";
    }
    if (!fs::exists(dir, ec)) {
        p.message = "directory " + dir.string() + " does not exist";
        p.fix = "create it (mkdir -p " + dir.string() + ") or fix destination.url";
        return p;
    }
    if (!fs::is_directory(dir, ec)) {
        p.message = dir.string() + " is not a directory";
        p.fix = "fix destination.url";
        return p;
    }
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
        p.message = "directory " + dir.string() + " is not writable by this user (SQLite creates " +
                    path + "-wal and " + path + "-shm beside the file)";
        p.fix = "grant write access to the directory or choose another destination.url";
        return p;
    }
    p.file_exists = fs::exists(file, ec);
    if (!p.file_exists) {
        p.ok = true;
        p.message = "sqlite:" + path + " does not exist yet; `pgtide run` creates it (directory " +
                    dir.string() + " is writable)";
        return p;
    }
    if (!fs::is_regular_file(file, ec)) {
        p.message = path + " is not a regular file";
        p.fix = "fix destination.url";
        return p;
    }
    if (::access(path.c_str(), R_OK | W_OK) != 0) {
        p.message = path + " is not readable and writable by this user";
        p.fix = "grant read and write access to the file or choose another destination.url";
        return p;
    }
    try {
        Reader r(path);
        r.exec("SELECT count(*) FROM sqlite_master", "reading its schema");
    } catch (const std::exception& e) {
        p.message = e.what();
        p.fix = "point destination.url at an SQLite file pgtide created, or at a new path";
        return p;
    }
    p.ok = true;
    p.message = "sqlite:" + path + " is an SQLite database this user can write";
    return p;
}

std::string json_quote(std::string_view s) {
    std::string out = "\"";
    io::append_json_string(out, s);
    out += '"';
    return out;
}

std::string format_unix_ms(std::int64_t unix_ms) {
    const std::time_t secs = std::time_t(unix_ms / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[48];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  int(unix_ms % 1000 < 0 ? 0 : unix_ms % 1000));
    return buf;
}

std::int64_t unix_ms_now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::vector<replicate::TableOverride> table_overrides(const Config& config) {
    std::vector<replicate::TableOverride> out;
    for (const auto& t : config.tables) {
        replicate::TableOverride ov;
        const auto dot = t.name.find('.');
        ov.schema = dot == std::string::npos ? "public" : t.name.substr(0, dot);
        ov.name = dot == std::string::npos ? t.name : t.name.substr(dot + 1);
        ov.target = t.target;
        ov.key = t.key;
        out.push_back(std::move(ov));
    }
    return out;
}

} // namespace pgtide::app
