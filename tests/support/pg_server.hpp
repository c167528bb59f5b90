// PgServer: a throw-away PostgreSQL cluster for tests (initdb into a temp dir, wal_level=logical,
// a free port, a private unix socket), and the helpers that decide whether tests may run at all.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/rows.hpp"

namespace pgtide::testing {

/// The directory holding initdb, pg_ctl and postgres: $PGTIDE_PG_BIN, else Debian's PostgreSQL 15.
std::string pg_bin_dir();

/// The first of initdb, pg_ctl, postgres that is missing from pg_bin_dir() (its full path), or
/// nullopt when all are there.
std::optional<std::string> missing_pg_binary();
/// The same for the binaries of `dir`.
std::optional<std::string> missing_pg_binary(const std::string& dir);
/// $PGTIDE_PG_BIN_OTHER: the binaries of a second PostgreSQL major version, for cross-version
/// tests (scripts/test sets it to 18 while testing on 15 and the other way round); "" if unset.
std::string other_pg_bin_dir();

/// True when the environment says CI=true: missing binaries are then a failure, never a skip.
bool running_in_ci();

/// A cluster of its own. Construction runs initdb and starts the server (blocking, seconds);
/// throws std::runtime_error naming the missing binary or carrying the initdb/pg_ctl output and
/// the server log tail. Destruction stops it (immediate) and removes its directory; a watchdog
/// process does the same if the test process dies without running destructors (abort, signal).
/// When the test runs as root, the server runs as the unprivileged user `pgtide_test`.
class PgServer {
public:
    /// The server shared by every test of this process, started on first use and torn down at
    /// process exit. Use a fresh create_database() per test.
    static PgServer& shared();

    /// A private server; extra_settings are postgresql.conf lines ("max_wal_senders = 4") that
    /// override the defaults.
    explicit PgServer(std::vector<std::string> extra_settings = {});
    /// The same, with the binaries of `bin_dir` (another PostgreSQL version).
    PgServer(std::vector<std::string> extra_settings, std::string bin_dir);
    ~PgServer();
    PgServer(const PgServer&) = delete;
    PgServer& operator=(const PgServer&) = delete;

    /// libpq conninfo for a superuser connection over the private unix socket.
    std::string dsn(const std::string& dbname = "postgres") const;
    /// Same, over TCP to localhost.
    std::string tcp_dsn(const std::string& dbname = "postgres") const;

    /// Creates a fresh database "t_<counter>_<pid>" and returns its name.
    std::string create_database();

    /// Runs one or more statements on a new connection (blocking). Throws std::runtime_error
    /// carrying the server message and the SQL.
    void exec(const std::string& dbname, const std::string& sql) const;
    /// The text result of the last statement of sql; NULL is nullopt.
    Rows query(const std::string& dbname, const std::string& sql) const;
    /// The single value of a one-row, one-column result; throws otherwise (and on NULL).
    std::string query_value(const std::string& dbname, const std::string& sql) const;
    /// pg_current_wal_lsn() as PostgreSQL prints it ("0/1A2B3C4").
    std::string current_wal_lsn() const;

    /// pg_ctl stop -m mode (smart, fast, immediate). Throws with the log tail on failure.
    void stop(const std::string& mode = "fast");
    /// pg_ctl start -w on the same port and socket. Throws with the log tail on failure.
    void start();
    void restart(const std::string& mode = "fast");
    bool is_running() const { return running_; }

    int port() const { return port_; }
    const std::string& socket_dir() const { return dir_; }
    const std::string& data_dir() const { return data_dir_; }
    const std::string& bin_dir() const { return bin_dir_; }
    /// The server's major version (15, 18, ...).
    int major_version() const { return major_version_; }
    /// The last `lines` lines of the server log.
    std::string log_tail(int lines = 40) const;

private:
    void start_watchdog();
    void run_pg(const std::vector<std::string>& argv, const std::string& what) const;

    std::string bin_dir_;
    std::string dir_;      // temp dir: socket, server.log, data/
    std::string data_dir_; // dir_/data
    std::string log_file_;
    int port_ = 0;
    int major_version_ = 0;
    bool running_ = false;
    int watchdog_fd_ = -1; // write end; the watchdog cleans up when it reads EOF
    int watchdog_pid_ = -1;
    int owner_pid_ = -1; // a forked child that exits must not tear down its parent's server
};

/// Base fixture for tests on the shared server: a fresh database per test. Skips on a
/// developer's machine without PostgreSQL, fails under CI=true.
class PgTest : public ::testing::Test {
protected:
    void SetUp() override;

    PgServer& pg() const { return PgServer::shared(); }
    const std::string& dbname() const { return dbname_; }
    std::string dsn() const { return pg().dsn(dbname_); }
    void exec(const std::string& sql) const { pg().exec(dbname_, sql); }
    Rows query(const std::string& sql) const { return pg().query(dbname_, sql); }
    std::string query_value(const std::string& sql) const { return pg().query_value(dbname_, sql); }

private:
    std::string dbname_;
};

} // namespace pgtide::testing

/// For a test body, SetUp or SetUpTestSuite: returns early (skip) when the PostgreSQL binaries
/// are missing on a developer's machine; fails the test naming the missing path under CI=true.
#define PGTIDE_REQUIRE_PG()                                                                        \
    do {                                                                                           \
        if (const auto pgtide_missing_ = ::pgtide::testing::missing_pg_binary()) {                 \
            if (::pgtide::testing::running_in_ci()) {                                              \
                FAIL() << "PostgreSQL binary missing: " << *pgtide_missing_                        \
                       << " (set PGTIDE_PG_BIN; CI=true never skips)";                             \
            }                                                                                      \
            GTEST_SKIP() << "PostgreSQL binary missing: " << *pgtide_missing_                      \
                         << " (set PGTIDE_PG_BIN)";                                                \
        }                                                                                          \
    } while (0)
