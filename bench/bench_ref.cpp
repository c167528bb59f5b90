// bench_ref: the plain reference clients that bench/run measures pgtide against.
//
//   bench_ref copy-drain DSN TABLE...
//       One connection and one thread per table (as pgtide's parallel readers), each draining
//       `COPY "TABLE" TO STDOUT (FORMAT binary)` and throwing the bytes away: the source ceiling.
//   bench_ref sqlite-insert DSN SQLITE_PATH TABLE...
//       For every TABLE, which must already exist in SQLITE_PATH (bench/run creates it with the
//       DDL pgtide itself made), reads the source rows through a cursor in chunks (text format)
//       and inserts them with one prepared INSERT in transactions of 100,000 rows, with
//       pgtide's pragmas (WAL, synchronous=FULL). Only the SQLite work is timed (binding,
//       stepping, committing): the destination ceiling. A column `_pgtide_lsn` gets a constant.
//
// Both print one JSON object on stdout: {"rows":…, "bytes":…, "seconds":…}.
// Blocking libpq is fine here: this is a benchmark client, not part of pgtide.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <libpq-fe.h>
#include <sqlite3.h>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string quote_ident(const std::string& name) {
    std::string out = "\"";
    for (char c : name) {
        if (c == '"') {
            out += '"';
        }
        out += c;
    }
    return out + "\"";
}

PGconn* connect_or_die(const std::string& dsn) {
    PGconn* conn = PQconnectdb(dsn.c_str());
    if (PQstatus(conn) != CONNECTION_OK) {
        throw std::runtime_error(std::string("connect: ") + PQerrorMessage(conn));
    }
    return conn;
}

void exec_or_die(PGconn* conn, const std::string& sql) {
    PGresult* r = PQexec(conn, sql.c_str());
    const auto st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        std::string msg = PQresultErrorMessage(r);
        PQclear(r);
        throw std::runtime_error(msg + " while running: " + sql);
    }
    PQclear(r);
}

int copy_drain(const std::string& dsn, const std::vector<std::string>& tables) {
    std::atomic<std::uint64_t> total_rows{0};
    std::atomic<std::uint64_t> total_bytes{0};
    std::vector<std::string> errors(tables.size());
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < tables.size(); ++i) {
        threads.emplace_back([&, i] {
            try {
                PGconn* conn = connect_or_die(dsn);
                const std::string sql =
                    "COPY " + quote_ident(tables[i]) + " TO STDOUT (FORMAT binary)";
                PGresult* r = PQexec(conn, sql.c_str());
                if (PQresultStatus(r) != PGRES_COPY_OUT) {
                    std::string msg = PQresultErrorMessage(r);
                    PQclear(r);
                    PQfinish(conn);
                    throw std::runtime_error(msg);
                }
                PQclear(r);
                std::uint64_t messages = 0;
                std::uint64_t bytes = 0;
                for (;;) {
                    char* buf = nullptr;
                    const int n = PQgetCopyData(conn, &buf, 0);
                    if (n < 0) {
                        break;
                    }
                    bytes += static_cast<std::uint64_t>(n);
                    ++messages;
                    PQfreemem(buf);
                }
                r = PQgetResult(conn);
                if (PQresultStatus(r) != PGRES_COMMAND_OK) {
                    std::string msg = PQresultErrorMessage(r);
                    PQclear(r);
                    PQfinish(conn);
                    throw std::runtime_error(msg);
                }
                // The server sends one CopyData per row; the header rides on the first row
                // and the trailer is a message of its own.
                const char* tag = PQcmdTuples(r);
                const std::uint64_t rows = tag != nullptr && *tag != '\0'
                                               ? std::strtoull(tag, nullptr, 10)
                                               : (messages > 0 ? messages - 1 : 0);
                PQclear(r);
                PQfinish(conn);
                total_rows += rows;
                total_bytes += bytes;
            } catch (const std::exception& e) {
                errors[i] = tables[i] + ": " + e.what();
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    const double secs = seconds_since(t0);
    for (const auto& e : errors) {
        if (!e.empty()) {
            std::fprintf(stderr, "copy-drain: %s\n", e.c_str());
            return 1;
        }
    }
    std::printf("{\"rows\":%llu,\"bytes\":%llu,\"seconds\":%.6f}\n",
                static_cast<unsigned long long>(total_rows.load()),
                static_cast<unsigned long long>(total_bytes.load()), secs);
    return 0;
}

void sqlite_check(sqlite3* db, int rc, const char* what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        throw std::runtime_error(std::string(what) + ": " + sqlite3_errmsg(db));
    }
}

void sqlite_exec(sqlite3* db, const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err != nullptr ? err : "?";
        sqlite3_free(err);
        throw std::runtime_error(msg + " while running: " + sql);
    }
}

enum class Bind { Integer, Real, Text, Blob, Lsn };

struct DestColumn {
    std::string name;
    Bind bind;
};

std::vector<DestColumn> sqlite_columns(sqlite3* db, const std::string& table) {
    sqlite3_stmt* st = nullptr;
    sqlite_check(
        db,
        sqlite3_prepare_v2(db, "SELECT name, type FROM pragma_table_info(?1)", -1, &st, nullptr),
        "prepare pragma_table_info");
    sqlite3_bind_text(st, 1, table.c_str(), -1, SQLITE_TRANSIENT);
    std::vector<DestColumn> cols;
    while (sqlite3_step(st) == SQLITE_ROW) {
        std::string name = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
        std::string type = reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
        Bind b = Bind::Text;
        if (name == "_pgtide_lsn") {
            b = Bind::Lsn;
        } else if (type == "INTEGER") {
            b = Bind::Integer;
        } else if (type == "REAL") {
            b = Bind::Real;
        } else if (type == "BLOB") {
            b = Bind::Blob;
        }
        cols.push_back({name, b});
    }
    sqlite3_finalize(st);
    if (cols.empty()) {
        throw std::runtime_error("table " + table + " does not exist in the SQLite file");
    }
    return cols;
}

int sqlite_insert(const std::string& dsn, const std::string& path,
                  const std::vector<std::string>& tables) {
    constexpr int kFetchRows = 20000;
    constexpr std::uint64_t kTxnRows = 100000;
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
        throw std::runtime_error("open " + path + ": " + sqlite3_errmsg(db));
    }
    sqlite_exec(db, "PRAGMA journal_mode=WAL");
    sqlite_exec(db, "PRAGMA synchronous=FULL");
    sqlite_exec(db, "PRAGMA cache_size=-16384");
    PGconn* conn = connect_or_die(dsn);
    exec_or_die(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    double sqlite_secs = 0;
    std::uint64_t rows = 0;
    std::uint64_t bytes = 0;
    for (const auto& table : tables) {
        const auto cols = sqlite_columns(db, table);
        std::string select = "SELECT ";
        std::string insert = "INSERT INTO " + quote_ident(table) + " (";
        std::string values = ") VALUES (";
        int n_source = 0;
        for (std::size_t i = 0; i < cols.size(); ++i) {
            insert += (i > 0 ? ", " : "") + quote_ident(cols[i].name);
            values += (i > 0 ? ", ?" : "?") + std::to_string(i + 1);
            if (cols[i].bind != Bind::Lsn) {
                select += (n_source++ > 0 ? ", " : "") + quote_ident(cols[i].name) +
                          (cols[i].bind == Bind::Integer ? "::text" : "");
            }
        }
        insert += values + ")";
        select += " FROM " + quote_ident(table);
        exec_or_die(conn, "DECLARE bench_cur NO SCROLL CURSOR FOR " + select);

        auto t0 = Clock::now();
        sqlite3_stmt* ins = nullptr;
        sqlite_check(db, sqlite3_prepare_v2(db, insert.c_str(), -1, &ins, nullptr),
                     "prepare insert");
        sqlite_exec(db, "BEGIN");
        sqlite_secs += seconds_since(t0);
        std::uint64_t in_txn = 0;
        const std::string fetch = "FETCH " + std::to_string(kFetchRows) + " FROM bench_cur";
        for (;;) {
            PGresult* r = PQexec(conn, fetch.c_str());
            if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                std::string msg = PQresultErrorMessage(r);
                PQclear(r);
                throw std::runtime_error(msg);
            }
            const int nt = PQntuples(r);
            if (nt == 0) {
                PQclear(r);
                break;
            }
            for (int t = 0; t < nt; ++t) {
                for (int f = 0; f < n_source; ++f) {
                    bytes += static_cast<std::uint64_t>(PQgetlength(r, t, f));
                }
            }
            t0 = Clock::now();
            for (int t = 0; t < nt; ++t) {
                int f = 0;
                for (std::size_t i = 0; i < cols.size(); ++i) {
                    const int p = static_cast<int>(i) + 1;
                    if (cols[i].bind == Bind::Lsn) {
                        sqlite3_bind_int64(ins, p, 1);
                        continue;
                    }
                    if (PQgetisnull(r, t, f)) {
                        sqlite3_bind_null(ins, p);
                        ++f;
                        continue;
                    }
                    const char* v = PQgetvalue(r, t, f);
                    const int len = PQgetlength(r, t, f);
                    switch (cols[i].bind) {
                    case Bind::Integer:
                        sqlite3_bind_int64(ins, p,
                                           v[0] == 't'   ? 1
                                           : v[0] == 'f' ? 0
                                                         : std::strtoll(v, nullptr, 10));
                        break;
                    case Bind::Real:
                        sqlite3_bind_double(ins, p, std::strtod(v, nullptr));
                        break;
                    case Bind::Blob:
                        sqlite3_bind_blob(ins, p, v, len, SQLITE_STATIC);
                        break;
                    default:
                        sqlite3_bind_text(ins, p, v, len, SQLITE_STATIC);
                        break;
                    }
                    ++f;
                }
                sqlite_check(db, sqlite3_step(ins), "insert");
                sqlite3_reset(ins);
                if (++in_txn == kTxnRows) {
                    sqlite_exec(db, "COMMIT");
                    sqlite_exec(db, "BEGIN");
                    in_txn = 0;
                }
            }
            sqlite_secs += seconds_since(t0);
            rows += static_cast<std::uint64_t>(nt);
            PQclear(r);
        }
        t0 = Clock::now();
        sqlite_exec(db, "COMMIT");
        sqlite3_finalize(ins);
        sqlite_secs += seconds_since(t0);
        exec_or_die(conn, "CLOSE bench_cur");
    }
    exec_or_die(conn, "COMMIT");
    PQfinish(conn);
    sqlite3_close(db);
    std::printf("{\"rows\":%llu,\"bytes\":%llu,\"seconds\":%.6f}\n",
                static_cast<unsigned long long>(rows), static_cast<unsigned long long>(bytes),
                sqlite_secs);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    try {
        const std::string cmd = argc > 1 ? argv[1] : "";
        if (cmd == "copy-drain" && argc >= 4) {
            return copy_drain(argv[2], std::vector<std::string>(argv + 3, argv + argc));
        }
        if (cmd == "sqlite-insert" && argc >= 5) {
            return sqlite_insert(argv[2], argv[3], std::vector<std::string>(argv + 4, argv + argc));
        }
        std::fprintf(stderr, "usage: bench_ref copy-drain DSN TABLE...\n"
                             "       bench_ref sqlite-insert DSN SQLITE_PATH TABLE...\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_ref: %s\n", e.what());
        return 1;
    }
}
