// Self-tests of the test fixtures: PgServer, SqliteFile, PgtideProcess.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/command.hpp"
#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

using FixtureOnShared = PgTest;

TEST_F(FixtureOnShared, StartsAndAnswers) {
    EXPECT_EQ(query_value("SELECT 1 + 1"), "2");
    EXPECT_GT(pg().port(), 0);
    EXPECT_TRUE(pg().is_running());
    EXPECT_TRUE(
        std::filesystem::exists(pg().socket_dir() + "/.s.PGSQL." + std::to_string(pg().port())));
}

TEST_F(FixtureOnShared, WalLevelIsLogical) {
    EXPECT_EQ(query_value("SHOW wal_level"), "logical");
    EXPECT_EQ(query_value("SHOW max_replication_slots"), "20");
    EXPECT_EQ(query_value("SHOW max_wal_senders"), "20");
    EXPECT_EQ(query_value("SHOW fsync"), "off");
    EXPECT_EQ(query_value("SHOW server_encoding"), "UTF8");
    EXPECT_EQ(query_value("SELECT datcollate FROM pg_database WHERE datname = current_database()"),
              "C");
}

TEST_F(FixtureOnShared, MajorVersionMatchesServer) {
    EXPECT_EQ(std::to_string(pg().major_version()),
              query_value("SELECT current_setting('server_version_num')::int / 10000"));
    EXPECT_GE(pg().major_version(), 15);
}

TEST_F(FixtureOnShared, ExecAndQueryKeepNullsAndOrder) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v text); "
         "INSERT INTO t VALUES (2, NULL), (1, 'a'), (3, '')");
    EXPECT_EQ(query("SELECT id, v FROM t ORDER BY id"), (Rows{{"1", "a"}, {"2", null}, {"3", ""}}));
    EXPECT_EQ(query("SELECT id FROM t WHERE false"), Rows{});
}

TEST_F(FixtureOnShared, ErrorCarriesServerMessage) {
    try {
        exec("SELECT * FROM no_such_table");
        FAIL() << "expected an error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("no_such_table\" does not exist"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(query_value("SELECT 1 WHERE false"), std::runtime_error);
}

TEST_F(FixtureOnShared, CreateDatabaseGivesDistinctDatabases) {
    const std::string other = pg().create_database();
    ASSERT_NE(other, dbname());
    exec("CREATE TABLE only_here (x int)");
    EXPECT_EQ(query_value("SELECT count(*) FROM pg_class WHERE relname = 'only_here'"), "1");
    EXPECT_EQ(pg().query_value(other, "SELECT count(*) FROM pg_class WHERE relname = 'only_here'"),
              "0");
    EXPECT_EQ(pg().query_value(other, "SELECT current_database()"), other);
}

TEST_F(FixtureOnShared, TcpDsnConnects) {
    PGconn* conn = PQconnectdb(pg().tcp_dsn(dbname()).c_str());
    EXPECT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
    PQfinish(conn);
}

TEST_F(FixtureOnShared, ReplicationConnectionIdentifiesSystem) {
    const std::string dsn = pg().dsn(dbname()) + " replication=database";
    PGconn* conn = PQconnectdb(dsn.c_str());
    ASSERT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
    PGresult* res = PQexec(conn, "IDENTIFY_SYSTEM");
    ASSERT_EQ(PQresultStatus(res), PGRES_TUPLES_OK) << PQerrorMessage(conn);
    ASSERT_EQ(PQntuples(res), 1);
    ASSERT_GE(PQnfields(res), 4);
    EXPECT_EQ(std::string(PQfname(res, 0)), "systemid");
    EXPECT_EQ(std::string(PQgetvalue(res, 0, 3)), dbname());
    EXPECT_NE(std::string(PQgetvalue(res, 0, 2)).find('/'), std::string::npos); // xlogpos
    PQclear(res);
    PQfinish(conn);
}

TEST_F(FixtureOnShared, CurrentWalLsnAdvances) {
    const std::string before = pg().current_wal_lsn();
    exec("CREATE TABLE w (x int); INSERT INTO w SELECT generate_series(1, 1000)");
    const std::string after = pg().current_wal_lsn();
    EXPECT_EQ(query_value("SELECT '" + after + "'::pg_lsn > '" + before + "'::pg_lsn"), "t");
}

TEST(FixturePrivateServer, RestartKeepsDataAndExtraSettings) {
    PGTIDE_REQUIRE_PG();
    PgServer server({"max_wal_senders = 7"});
    const std::string db = server.create_database();
    server.exec(db, "CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2)");
    EXPECT_EQ(server.query_value(db, "SHOW max_wal_senders"), "7");
    const int port = server.port();

    server.restart();
    EXPECT_EQ(server.query_value(db, "SELECT sum(id) FROM t"), "3");

    // An immediate stop is a crash: committed data survives recovery (fsync=off only risks a
    // machine crash, not a server one).
    server.exec(db, "INSERT INTO t VALUES (3)");
    server.stop("immediate");
    EXPECT_FALSE(server.is_running());
    EXPECT_THROW(server.exec(db, "SELECT 1"), std::runtime_error);
    server.start();
    EXPECT_EQ(server.port(), port);
    EXPECT_EQ(server.query_value(db, "SELECT sum(id) FROM t"), "6");
}

TEST(FixturePrivateServer, DestructorRemovesDirectory) {
    PGTIDE_REQUIRE_PG();
    std::string dir;
    {
        PgServer server;
        dir = server.socket_dir();
        EXPECT_TRUE(std::filesystem::exists(dir + "/data/PG_VERSION"));
        EXPECT_NE(server.log_tail().find("ready to accept connections"), std::string::npos)
            << server.log_tail();
    }
    EXPECT_FALSE(std::filesystem::exists(dir));
}

// A test process that dies without destructors must not leave a server behind: the watchdog
// stops it and removes the directory.
TEST(FixturePrivateServer, WatchdogCleansUpAfterAbruptExit) {
    PGTIDE_REQUIRE_PG();
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        close(fds[0]);
        try {
            PgServer server;
            const std::string line = server.socket_dir() + "\n" + server.data_dir() + "\n";
            (void)!write(fds[1], line.data(), line.size());
        } catch (...) {
        }
        _exit(0); // skips every destructor, as a crash would (the one above never runs)
    }
    close(fds[1]);
    std::string text;
    char buf[512];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) {
        text.append(buf, size_t(n));
    }
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    const auto nl = text.find('\n');
    ASSERT_NE(nl, std::string::npos) << "child did not start a server";
    const std::string dir = text.substr(0, nl);

    // The watchdog works asynchronously; bound the wait rather than pace the test.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::filesystem::exists(dir) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " left behind";
}

TEST(FixtureSqliteFile, CanonicalSpelling) {
    const std::string dir = make_temp_dir("pgtide-sqlite-selftest");
    const std::string path = dir + "/d.db";
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE t (id INTEGER PRIMARY KEY, r REAL, s TEXT, b BLOB);"
                           "INSERT INTO t VALUES (1, 1.1, 'a', x'00ff10');"
                           "INSERT INTO t VALUES (2, 1e300, '', x'');"
                           "INSERT INTO t VALUES (3, 9e999, NULL, NULL);"
                           "INSERT INTO t VALUES (4, -9e999, '1.50', NULL);"
                           "INSERT INTO t VALUES (-9223372036854775808, 0.1, 'é', NULL);"
                           "INSERT INTO t VALUES (9223372036854775807, 2.0, NULL, NULL);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_close(db);

    SqliteFile file(path);
    EXPECT_EQ(file.rows("SELECT id, r, s, b FROM t ORDER BY id"),
              (Rows{{"-9223372036854775808", "0.1", "é", null},
                    {"1", "1.1", "a", "\\x00ff10"},
                    {"2", "1e+300", "", "\\x"},
                    {"3", "Infinity", null, null},
                    {"4", "-Infinity", "1.50", null},
                    {"9223372036854775807", "2", null, null}}));
    EXPECT_EQ(file.type_of("SELECT r FROM t WHERE id = 9223372036854775807"), "real");
    EXPECT_EQ(file.types("SELECT id, s, b, s FROM t WHERE id = 1"),
              (std::vector<std::vector<std::string>>{{"integer", "text", "blob", "text"}}));
    EXPECT_EQ(file.value("SELECT count(*) FROM t"), "6");
    EXPECT_EQ(file.tables(), std::vector<std::string>{"t"});
    EXPECT_THROW(file.rows("SELECT nope FROM t"), std::runtime_error);
    EXPECT_THROW(file.rows("INSERT INTO t (id) VALUES (99)"), std::runtime_error); // read-only
    EXPECT_THROW(SqliteFile(dir + "/missing.db"), std::runtime_error);
    std::filesystem::remove_all(dir);
}

// PgtideProcess is exercised on /bin/sh so that it does not depend on pgtide's own behaviour.
class FixturePgtideProcess : public ::testing::Test {
protected:
    void SetUp() override { setenv("PGTIDE_BINARY_OVERRIDE", "/bin/sh", 1); }
    void TearDown() override { unsetenv("PGTIDE_BINARY_OVERRIDE"); }
};

TEST_F(FixturePgtideProcess, CapturesOutputAndExitCode) {
    std::string out;
    std::string err;
    EXPECT_EQ(PgtideProcess::run({"-c", "echo out; echo err >&2; exit 3"}, &out, &err), 3);
    EXPECT_EQ(out, "out\n");
    EXPECT_EQ(err, "err\n");
}

TEST_F(FixturePgtideProcess, ExtraEnvironmentOverrides) {
    PgtideProcess p({"-c", "printf %s \"$PGTIDE_SELFTEST\""}, {"PGTIDE_SELFTEST=yes"});
    EXPECT_EQ(p.wait(), 0);
    EXPECT_EQ(p.stdout_text(), "yes");
}

TEST_F(FixturePgtideProcess, KillReportsSignal) {
    PgtideProcess p({"-c", "exec sleep 100"});
    EXPECT_TRUE(p.running());
    p.kill(SIGTERM);
    EXPECT_EQ(p.wait(), 128 + SIGTERM);
    EXPECT_FALSE(p.running());
    EXPECT_EQ(p.wait(), 128 + SIGTERM);
}

TEST_F(FixturePgtideProcess, WaitForTimesOut) {
    PgtideProcess p({"-c", "exec sleep 100"});
    EXPECT_EQ(p.wait_for(std::chrono::milliseconds(20)), std::nullopt);
    // the destructor kills and reaps it
}

TEST(FixturePgtideBinary, BuiltBinaryExists) {
    EXPECT_TRUE(std::filesystem::exists(PGTIDE_BINARY)) << PGTIDE_BINARY;
}

} // namespace
} // namespace pgtide::testing
