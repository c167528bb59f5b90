// Destination and source faults (issue 10 items 2, 4 and 6), SQLite destination: a full file
// system, a read-only file or directory, a destination locked by another writer, a role's
// statement_timeout, and a replication slot lost (dropped, or invalidated by
// max_slot_wal_keep_size) while pgtide is stopped or cut off from the source. Each test clears
// the fault, runs pgtide again and compares the destination with the source row by row; where
// a write failed, it checks that neither the destination's checkpoint nor the slot's
// confirmed_flush_lsn moved past it.
//
// Covered elsewhere, not repeated here: PostgreSQL restarted (fast and immediate) while pgtide
// streams (stream_scenarios_test.cpp, ReconnectsAfterPostgresRestartsFastAndImmediate), and a
// snapshot reader terminated mid-copy (snapshot_test.cpp,
// ReaderTerminatedMidCopyFinishesOnANewEpoch).
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "tests/integration/enospc_env.hpp"
#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/replication_test.hpp"
#include "tests/support/sqlite_file.hpp"
#include "tests/support/tcp_proxy.hpp"

namespace pgtide::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

// Runs `fn` on a thread of its own whose capability bounding set lacks CAP_DAC_OVERRIDE and
// CAP_DAC_READ_SEARCH: a pgtide forked there is held to file permissions even when the tests
// run as root (the set is per thread and inherited across fork and exec). False, without
// running fn, when the set cannot be changed.
bool held_to_file_permissions(const std::function<void()>& fn) {
    bool ok = true;
    std::thread t([&] {
        if (::geteuid() == 0) {
            ok = ::prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) == 0 &&
                 ::prctl(PR_CAPBSET_DROP, CAP_DAC_READ_SEARCH, 0, 0, 0) == 0;
        }
        if (ok) {
            fn();
        }
    });
    t.join();
    return ok;
}

// Runs a clean-up when the scope ends, however it ends; its failure is ignored.
class OnExit {
public:
    explicit OnExit(std::function<void()> fn) : fn_(std::move(fn)) {}
    ~OnExit() {
        try {
            fn_();
        } catch (const std::exception&) {
        }
    }
    OnExit(const OnExit&) = delete;
    OnExit& operator=(const OnExit&) = delete;

private:
    std::function<void()> fn_;
};

// A server setting changed with ALTER SYSTEM for the length of a test; reset() (or the
// destructor) puts it back. Both reload the configuration.
class ServerSetting {
public:
    ServerSetting(PgServer& pg, std::string name, const std::string& value)
        : pg_(pg), name_(std::move(name)) {
        pg_.exec("postgres", "ALTER SYSTEM SET " + name_ + " = " + value);
        pg_.exec("postgres", "SELECT pg_reload_conf()");
    }
    ~ServerSetting() {
        try {
            reset();
        } catch (const std::exception&) {
        }
    }
    ServerSetting(const ServerSetting&) = delete;
    ServerSetting& operator=(const ServerSetting&) = delete;

    void reset() {
        if (!active_) {
            return;
        }
        active_ = false;
        pg_.exec("postgres", "ALTER SYSTEM RESET " + name_);
        pg_.exec("postgres", "SELECT pg_reload_conf()");
    }

private:
    PgServer& pg_;
    std::string name_;
    bool active_ = true;
};

class Faults : public ReplicationTest {
protected:
    void TearDown() override {
        // Whatever a test left read-only must be removable.
        std::error_code ec;
        if (!dir_.empty() && fs::exists(dir_, ec)) {
            fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
            for (const auto& f : sqlite_files()) {
                fs::permissions(f, fs::perms::owner_read | fs::perms::owner_write,
                                fs::perm_options::add, ec);
            }
        }
        ReplicationTest::TearDown();
    }

    /// The destination file and, when they exist, its -wal and -shm files.
    std::vector<fs::path> sqlite_files() const {
        std::vector<fs::path> files;
        for (const char* suffix : {"", "-wal", "-shm"}) {
            const fs::path p = sqlite_path_ + suffix;
            std::error_code ec;
            if (fs::exists(p, ec)) {
                files.push_back(p);
            }
        }
        return files;
    }

    void create_t(int rows = 1000) const {
        exec("CREATE TABLE t (id int PRIMARY KEY, v bigint, note text)");
        exec("INSERT INTO t SELECT g, g, 'snap' FROM generate_series(1, " + std::to_string(rows) +
             ") g");
        exec("CREATE PUBLICATION pub FOR TABLE t");
    }

    /// Inserts, updates and deletes a few rows of t (any time, pgtide running or not).
    void change_t(int round) const {
        const std::string base = std::to_string(100000 + round * 100);
        exec("INSERT INTO t SELECT g, g, 'round " + std::to_string(round) +
             "' FROM generate_series(" + base + ", " + base + " + 49) g");
        exec("UPDATE t SET v = v + 1000 WHERE id % 13 = " + std::to_string(round % 13));
        exec("DELETE FROM t WHERE id % 17 = " + std::to_string(round % 17));
    }

    void expect_t_equal() const {
        expect_equal("SELECT id::text, v::text, note FROM t ORDER BY t.id",
                     "SELECT id, v, note FROM t ORDER BY id");
    }

    /// Bounded wait (60 s) until the destination's count and sum of t.v equal the source's.
    bool wait_for_t() const {
        const std::string sql = "SELECT count(*) || ':' || coalesce(sum(v), 0) FROM t";
        return wait_for_dest(sql, query_value(sql));
    }

    /// An LSN expression of the source as a byte position.
    std::int64_t lsn_bytes(const std::string& expr) const {
        return std::stoll(query_value("SELECT (" + expr + " - '0/0'::pg_lsn)::bigint"));
    }

    /// One value of the destination read as an immutable file (no locks, no -wal or -shm
    /// created), which is exact only while no -wal file exists: after a clean stop.
    std::string immutable_value(const std::string& sql) const {
        EXPECT_FALSE(fs::exists(sqlite_path_ + "-wal")) << "immutable read of a WAL database";
        sqlite3* db = nullptr;
        const std::string uri = "file:" + sqlite_path_ + "?immutable=1";
        std::string value;
        if (sqlite3_open_v2(uri.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) ==
            SQLITE_OK) {
            sqlite3_stmt* stmt = nullptr;
            if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
                sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
                value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
            }
            sqlite3_finalize(stmt);
        }
        const std::string error = sqlite3_errmsg(db);
        sqlite3_close_v2(db);
        EXPECT_FALSE(value.empty()) << sql << ": " << error;
        return value;
    }

    std::int64_t checkpoint_lsn() const {
        return std::stoll(SqliteFile(sqlite_path_).value("SELECT lsn FROM _pgtide_checkpoint"));
    }

    std::string epoch() const {
        return SqliteFile(sqlite_path_).value("SELECT epoch FROM _pgtide_checkpoint");
    }

    /// The slot's confirmed_flush_lsn as a byte position; nullopt when the slot or it is absent.
    std::optional<std::int64_t> confirmed_flush() const {
        const Rows r = query("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint FROM "
                             "pg_replication_slots WHERE slot_name = '" +
                             slot() + "'");
        if (r.empty() || !r[0][0]) {
            return std::nullopt;
        }
        return std::stoll(*r[0][0]);
    }

    std::string wal_status() const {
        const Rows r = query("SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE "
                             "slot_name = '" +
                             slot() + "'");
        return r.empty() ? std::string("(no slot)") : r[0][0].value_or("");
    }

    /// Bounded wait until this pgtide streams: its walsender holds the slot (so it has opened
    /// the destination) and the destination has the source's rows of t.
    void wait_streaming(PgtideProcess& pgtide) const {
        ASSERT_TRUE(wait_for([&] {
            return !pgtide.running() ||
                   query_value("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" +
                               slot() + "' AND active") == "1";
        }));
        ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
        ASSERT_TRUE(wait_for_dest("SELECT phase FROM _pgtide_checkpoint", "streaming"))
            << pgtide.stderr_text();
        ASSERT_TRUE(wait_for_t()) << pgtide.stderr_text();
    }

    /// The destination's checkpoint is below `failed_end` (the end of the source transaction
    /// whose destination write failed), and the slot was never confirmed past the checkpoint.
    void expect_checkpoint_before(std::int64_t failed_end) const {
        const std::int64_t checkpoint = checkpoint_lsn();
        EXPECT_LT(checkpoint, failed_end) << "the checkpoint advanced past a failed write";
        if (const auto confirmed = confirmed_flush()) {
            EXPECT_LE(*confirmed, checkpoint) << "the slot was confirmed past the checkpoint";
        }
    }

    /// Waits up to `bound` for pgtide to exit on its own and returns its exit code. A pgtide
    /// still running then is a failure; it is stopped with SIGTERM so the test can go on.
    static int wait_exit(PgtideProcess& pgtide, std::chrono::seconds bound, const char* fault) {
        if (const auto code = pgtide.wait_for(bound)) {
            return *code;
        }
        ADD_FAILURE() << "pgtide still runs " << bound.count() << " s after " << fault
                      << "; it must stop by itself\n"
                      << pgtide.stderr_text();
        pgtide.kill(SIGTERM);
        return pgtide.wait();
    }

    /// Extra environment for a pgtide whose destination files may not grow past `bytes`
    /// (tests/preload/enospc_preload.cpp).
    std::vector<std::string> full_disk_env(long bytes) const {
        return enospc_env((fs::canonical(dir_) / "replica.db").string(), bytes);
    }

    /// `pgtide run --once --json` with the test's flags and `extra` arguments.
    int run_once_with(const std::vector<std::string>& extra, std::string* out,
                      std::string* err) const {
        auto args = run_args(true);
        args.insert(args.end(), extra.begin(), extra.end());
        return PgtideProcess::run(args, out, err);
    }
};

// (1) The file system fills up while pgtide streams one large transaction (6 MB of rows, with 2
// MiB of room for each destination file). Fails if a destination error while streaming leaves
// pgtide running (the stream must stop once the applier has failed), if the applier advances the
// checkpoint after a failed commit, or if feedback confirms the slot past the checkpoint.
//
// Broken on purpose once, then reverted: SqliteDestination::commit
// (replicate/sqlite_destination.cpp) ignored a failed COMMIT: `sqlite3_step(commit_.get());`
// instead of `step(commit_.get(), "COMMIT")`. pgtide exited 4 ("... was changed by another
// process"), not 1 with "database or disk is full"; "the slot was confirmed past the checkpoint"
// (35381088 vs 26513256); the final comparison: source 19812 rows, destination 2438.
TEST_F(Faults, DiskFullWhileStreamingStopsAtTheCheckpointAndLosesNothing) {
    create_t();
    PgtideProcess pgtide(run_args(false), full_disk_env(2 << 20));
    wait_streaming(pgtide);
    if (HasFatalFailure()) {
        return;
    }
    exec("INSERT INTO t VALUES (1001, 1, 'small, fits')");
    ASSERT_TRUE(wait_for_t()) << pgtide.stderr_text();

    exec("INSERT INTO t SELECT g, g, repeat('x', 300) FROM generate_series(2000, 21999) g");
    const std::int64_t failed_end = lsn_bytes("pg_current_wal_insert_lsn()");
    const int code = wait_exit(pgtide, 30s, "the file system filled up");
    const std::string err = pgtide.stderr_text();
    EXPECT_EQ(code, 1) << err;
    EXPECT_TRUE(contains(err, "sqlite destination " + sqlite_path_)) << err;
    EXPECT_TRUE(contains(err, "database or disk is full")) << err;
    EXPECT_TRUE(contains(err, "free space, then run pgtide again")) << err;
    EXPECT_EQ(dest_value("SELECT count(*) FROM t"), "1001");
    expect_checkpoint_before(failed_end);

    // Cleared: room again. What happened meanwhile arrives too.
    change_t(1);
    run_once();
    expect_t_equal();
    EXPECT_EQ(epoch(), "1");
}

// (1b) The file system fills up during the snapshot (6 MB of rows, 2 MiB of room), while the
// writer thread writes batches that the applier posted without waiting for them
// (WorkerThread::post). Fails if the failed batch does not stop the run with the destination's
// error, if the table is recorded copied (or the epoch streaming) with rows missing, or if the
// next run does not end equal to the source.
//
// Not caught here: a worker that runs on after a failed posted batch (the full disk fails the
// commit as well). SqliteWriter.AFailedCopyBatchStopsEveryLaterWriteAndTheCommit
// (tests/replicate/sqlite_writer_test.cpp) pins that one.
TEST_F(Faults, DiskFullDuringTheSnapshotStopsAndTheNextRunCopiesEverything) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v bigint, note text)");
    exec("INSERT INTO t SELECT g, g, repeat('x', 300) FROM generate_series(1, 20000) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    PgtideProcess pgtide(run_args(true), full_disk_env(2 << 20));
    const int code = wait_exit(pgtide, 60s, "the file system filled up during the snapshot");
    const std::string err = pgtide.stderr_text();
    EXPECT_EQ(code, 1) << err;
    EXPECT_TRUE(contains(err, "sqlite destination " + sqlite_path_)) << err;
    EXPECT_TRUE(contains(err, "database or disk is full")) << err;
    {
        const SqliteFile dest(sqlite_path_);
        EXPECT_EQ(dest.value("SELECT phase FROM _pgtide_checkpoint"), "snapshot");
        const Rows states = dest.rows("SELECT state FROM _pgtide_tables WHERE source_table = "
                                      "'public.t' AND state IN ('copied', 'ready')");
        EXPECT_TRUE(states.empty()) << "a table whose rows did not all fit was recorded whole";
        EXPECT_LT(std::stoll(dest.value("SELECT count(*) FROM t")), 20000);
    }

    // Room again: the next run copies the table whole, and what changed meanwhile arrives too.
    change_t(1);
    run_once();
    expect_t_equal();
}

// (1c) The snapshot readers stop once the destination has failed: the file system fills up
// while the first of nine tables is copied (one reader), and the eight after it are never
// read, as the source's statistics of their scans show. Fails if the readers go on copying
// the remaining tables into the closed channel (on a large source, hours of reading for
// nothing before pgtide exits).
//
// Broken on purpose once, then reverted: SnapshotCopier::copy_range
// (replicate/snapshot_copier.cpp) with its batches' `out.send` results ignored: "public.u1
// was read after the destination failed" for all eight tables.
TEST_F(Faults, DiskFullDuringTheSnapshotStopsTheReadersAtOnce) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v bigint, note text)");
    exec("INSERT INTO t SELECT g, g, repeat('x', 300) FROM generate_series(1, 60000) g");
    std::string tables = "t";
    for (int i = 1; i <= 8; ++i) {
        const std::string u = "u" + std::to_string(i);
        exec("CREATE TABLE " + u + " (id int PRIMARY KEY, v text)");
        exec("INSERT INTO " + u + " SELECT g, 'v' || g FROM generate_series(1, 100) g");
        tables += ", " + u;
    }
    exec("CREATE PUBLICATION pub FOR TABLE " + tables);
    // Scans of a table so far, as the source's statistics show them (building the key's index
    // scanned each table once).
    const auto scans_of = [this](const std::string& table) {
        return query_value("SELECT seq_scan || '/' || coalesce(idx_scan, 0) FROM "
                           "pg_stat_user_tables WHERE relid = '" +
                           table + "'::regclass");
    };
    std::map<std::string, std::string> before;
    ASSERT_TRUE(wait_for([&] { return scans_of("u8") != "0/0"; })); // that scan's count
    for (const std::string table : {"t", "u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8"}) {
        before[table] = scans_of(table);
    }
    const std::string config = (fs::path(dir_) / "one_reader.toml").string();
    std::ofstream(config) << "[snapshot]\nparallel_tables = 1\n";
    auto args = run_args(true);
    args.insert(args.end(), {"-c", config});
    PgtideProcess pgtide(args, full_disk_env(2 << 20));
    const int code = wait_exit(pgtide, 60s, "the file system filled up during the snapshot");
    const std::string err = pgtide.stderr_text();
    EXPECT_EQ(code, 1) << err;
    EXPECT_TRUE(contains(err, "database or disk is full")) << err;

    // A backend's scan counts reach the statistics at its exit at the latest: wait until t's
    // read shows, then no later table may have been read at all.
    ASSERT_TRUE(wait_for([&] { return scans_of("t") != before.at("t"); }))
        << "the source's statistics never showed t read";
    for (int i = 1; i <= 8; ++i) {
        const std::string u = "u" + std::to_string(i);
        EXPECT_EQ(scans_of(u), before.at(u))
            << "public." << u << " was read after the destination failed\n"
            << err;
    }
}

// (2) Read-only destination: while pgtide runs, a chmod changes nothing (SQLite writes through
// the descriptors it opened); at the next start a read-only directory, then a read-only file,
// are refused at once, naming the file and the problem. Fails if SqliteDestination opens a
// write-protected file read-only without a word (the run would create -wal and -shm, contact the
// source and fail only at its first write), or if a refused run moves the checkpoint or the slot.
//
// Broken on purpose once, then reverted: SqliteDestination::SqliteDestination
// (replicate/sqlite_destination.cpp) without its `sqlite3_db_readonly(...) == 1` check. The
// read-only file was opened without a word, -wal and -shm were created, the source contacted,
// and the run failed only at its first write ("attempt to write a readonly database"):
// `contains(err, problem)` and `sqlite_files().size() == 1u` failed for "read-only file".
TEST_F(Faults, ReadOnlyFileOrDirectoryIsRefusedAtStartAndLosesNothing) {
    create_t();
    run_once();
    std::unique_ptr<PgtideProcess> running;
    if (!held_to_file_permissions(
            [&] { running = std::make_unique<PgtideProcess>(run_args(false)); })) {
        if (running_in_ci()) {
            FAIL() << "running as root without CAP_SETPCAP: file permissions cannot bind pgtide "
                      "(CI=true never skips)";
        }
        GTEST_SKIP() << "running as root without CAP_SETPCAP: file permissions cannot bind pgtide";
    }
    wait_streaming(*running);
    if (HasFatalFailure()) {
        return;
    }
    for (const auto& f : sqlite_files()) {
        fs::permissions(f, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    }
    change_t(1);
    ASSERT_TRUE(wait_for_t()) << running->stderr_text();
    running->kill(SIGTERM);
    EXPECT_EQ(running->wait(), 0) << running->stderr_text();
    // A clean stop leaves the database file alone, without -wal and -shm. From here on the
    // test reads it as immutable: its own reader would create them (as root, even in a
    // read-only directory).
    ASSERT_EQ(sqlite_files().size(), 1u);
    fs::permissions(sqlite_path_, fs::perms::owner_write, fs::perm_options::add);

    change_t(2);
    const std::string checkpoint = immutable_value("SELECT lsn FROM _pgtide_checkpoint");
    const std::string rows = immutable_value("SELECT count(*) FROM t");
    const auto refused = [&](const char* what, const std::string& problem) {
        std::string out;
        std::string err;
        int code = -1;
        ASSERT_TRUE(held_to_file_permissions(
            [&] { code = PgtideProcess::run(run_args(true), &out, &err); }));
        EXPECT_EQ(code, 1) << what << "\n" << err;
        EXPECT_TRUE(contains(err, "sqlite destination " + sqlite_path_)) << what << "\n" << err;
        EXPECT_TRUE(contains(err, problem)) << what << "\n" << err;
        // Refused before SQLite created anything beside the file, and nothing moved.
        EXPECT_EQ(sqlite_files().size(), 1u) << what;
        EXPECT_EQ(immutable_value("SELECT lsn FROM _pgtide_checkpoint"), checkpoint) << what;
        EXPECT_EQ(immutable_value("SELECT count(*) FROM t"), rows) << what;
        const auto confirmed = confirmed_flush();
        ASSERT_TRUE(confirmed.has_value());
        EXPECT_LE(*confirmed, std::stoll(checkpoint)) << what;
    };
    fs::permissions(dir_, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove);
    refused("read-only directory", "its directory is not writable");
    fs::permissions(dir_, fs::perms::owner_write, fs::perm_options::add);

    fs::permissions(sqlite_path_,
                    fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    refused("read-only file", "the file is read-only for this user");

    fs::permissions(sqlite_path_, fs::perms::owner_write, fs::perm_options::add);
    run_once();
    expect_t_equal();
}

// (3) Another process holds the destination's write lock (BEGIN IMMEDIATE) for longer than
// pgtide's busy timeout (5 s) while changes arrive. Fails if pgtide keeps running without a word
// after its write failed, or if it advances the checkpoint or the slot past the changes it could
// not write.
//
// Broken on purpose once, then reverted: is_connection_loss (replicate/coordinator.cpp) took a
// busy destination for a lost connection, to be retried: `catch (const DestinationError& de)
// { return de.kind() == DestinationErrorKind::Busy; }`. pgtide retried instead of stopping:
// "pgtide still runs 30 s after its destination stayed locked past the busy timeout".
TEST_F(Faults, DestinationLockedByAnotherWriterStopsPgtideAndLosesNothing) {
    create_t();
    PgtideProcess pgtide(run_args(false));
    wait_streaming(pgtide);
    if (HasFatalFailure()) {
        return;
    }

    sqlite3* holder = nullptr;
    ASSERT_EQ(sqlite3_open(sqlite_path_.c_str(), &holder), SQLITE_OK);
    sqlite3_busy_timeout(holder, 10000);
    ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    change_t(1);
    const std::int64_t failed_end = lsn_bytes("pg_current_wal_insert_lsn()");
    const int code = wait_exit(pgtide, 30s, "its destination stayed locked past the busy timeout");
    sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(holder);
    const std::string err = pgtide.stderr_text();
    EXPECT_EQ(code, 1) << err;
    EXPECT_TRUE(contains(err, "sqlite destination " + sqlite_path_)) << err;
    EXPECT_TRUE(contains(err, "database is locked")) << err;
    EXPECT_TRUE(contains(err, "longer than the busy timeout (5 s)")) << err;
    EXPECT_EQ(dest_value("SELECT count(*) FROM t"), "1000");
    expect_checkpoint_before(failed_end);

    change_t(2);
    run_once();
    expect_t_equal();
}

// (4) The role has a statement_timeout far shorter than the snapshot's one-page COPY of a 100,000
// row table (about a second): pgtide's sessions pin statement_timeout and
// idle_in_transaction_session_timeout to 0 at connection start (startup options outrank
// role and database settings), so the copy finishes in its first epoch. Fails if the session
// options stop pinning them (replicate/session.hpp): the reader would be cancelled with SQLSTATE
// 57014, which pgtide treats as a definite error (exit 1).
//
// Broken on purpose once, then reverted: kSessionOptions (replicate/session.hpp) without
// "-c statement_timeout=0". `ASSERT_EQ(code, 0)` failed, the run exited 1: "canceling statement
// due to statement timeout (SQLSTATE 57014)".
TEST_F(Faults, RoleStatementTimeoutDoesNotCancelTheSnapshotReaders) {
    exec("CREATE TABLE big (id int PRIMARY KEY, v text)");
    exec("INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 100000) g");
    exec("CREATE PUBLICATION pub FOR TABLE big");
    const std::string role = "ALTER ROLE CURRENT_USER IN DATABASE " + dbname();
    exec(role + " SET statement_timeout = '5ms'");
    const OnExit reset([&] { exec(role + " RESET statement_timeout"); });
    // The fault is live: a new session without pgtide's options is cancelled.
    try {
        query("SELECT pg_sleep(0.2)");
        ADD_FAILURE() << "statement_timeout did not cancel a plain session";
    } catch (const std::exception& e) {
        EXPECT_TRUE(contains(e.what(), "statement timeout")) << e.what();
    }
    const auto path = (dir_ / "pgtide.toml").string();
    std::ofstream(path) << "[source]\ndsn = \"" << dsn()
                        << "\"\npublications = [\"pub\"]\nslot = \"" << slot()
                        << "\"\n[destination]\nurl = \"sqlite:" << sqlite_path_
                        << "\"\n[snapshot]\npage_rows = 1000000\n";
    std::string out;
    std::string err;
    const int code = PgtideProcess::run({"run", "--once", "--json", "-c", path}, &out, &err);
    exec(role + " RESET statement_timeout");
    ASSERT_EQ(code, 0) << err;
    EXPECT_TRUE(contains(out, "\"epoch\":1")) << out;
    EXPECT_FALSE(contains(err, "new epoch")) << err;
    expect_equal("SELECT b.id::text, b.v FROM big b ORDER BY b.id",
                 "SELECT id, v FROM big ORDER BY id");
}

// (5) Failover-style loss: the slot is gone when pgtide starts (dropped while it was stopped;
// a promoted standby without it looks the same). Fails if a missing slot is not exit 5 with the
// way out, if that run creates a slot or moves the checkpoint, or if `run --resnapshot` does not
// start a new epoch that ends equal to the source and then streams on.
//
// Broken on purpose once, then reverted: slot_lost_message (replicate/slot_info.cpp) took a
// missing slot for a healthy one: `if (!info) { return std::nullopt; }`. START_REPLICATION
// failed instead: `EXPECT_EQ(run_once_with({}, &out, &err), 5)` saw 1, with "replication slot
// ... does not exist (SQLSTATE 42704)" and neither "no longer exists" nor the way out.
TEST_F(Faults, SlotDroppedWhileStoppedExitsFiveThenResnapshotRecovers) {
    create_t();
    run_once();
    change_t(1);
    run_once();
    change_t(2); // never streamed: lost with the slot
    exec("SELECT pg_drop_replication_slot('" + slot() + "')");
    const std::int64_t checkpoint = checkpoint_lsn();
    const std::string rows = *dest_value("SELECT count(*) FROM t");

    std::string out;
    std::string err;
    EXPECT_EQ(run_once_with({}, &out, &err), 5) << err;
    EXPECT_TRUE(contains(err, "replication slot " + slot() + " no longer exists")) << err;
    EXPECT_TRUE(contains(err, "`pgtide run --resnapshot`")) << err;
    EXPECT_EQ(checkpoint_lsn(), checkpoint);
    EXPECT_EQ(dest_value("SELECT count(*) FROM t"), rows);
    EXPECT_EQ(wal_status(), "(no slot)");

    ASSERT_EQ(run_once_with({"--resnapshot"}, &out, &err), 0) << err;
    EXPECT_TRUE(contains(out, "\"epoch\":2")) << out;
    expect_t_equal();
    change_t(3);
    run_once();
    expect_t_equal();
    EXPECT_EQ(epoch(), "2");
}

// (6) Slot loss (issue 10 item 6): with max_slot_wal_keep_size = 1MB, WAL written while pgtide is
// stopped (three segment switches, then a checkpoint) invalidates the slot (wal_status lost).
// Fails if an invalidated slot is not exit 5, if the message does not name
// max_slot_wal_keep_size and the way out, if that run moves the checkpoint, or if
// `run --resnapshot` does not recover to equality once the setting is back.
//
// Broken on purpose once, then reverted: slot_lost_message (replicate/slot_info.cpp) looked only
// at invalidation_reason, which PostgreSQL 15 does not report: `if (reason.empty())` instead of
// `if (info->wal_status != "lost" && reason.empty())`. START_REPLICATION failed instead: exit 1,
// not 5, with "cannot read from logical replication slot ..." and no "was invalidated".
TEST_F(Faults, SlotInvalidatedByMaxSlotWalKeepSizeExitsFiveThenResnapshotRecovers) {
    create_t();
    run_once();
    const std::int64_t checkpoint = checkpoint_lsn();
    const std::string rows = *dest_value("SELECT count(*) FROM t");
    ServerSetting keep(pg(), "max_slot_wal_keep_size", "'1MB'");
    for (int i = 0; i < 8 && wal_status() != "lost"; ++i) {
        change_t(i);
        query("SELECT pg_switch_wal()");
        if (i >= 2) {
            exec("CHECKPOINT");
        }
    }
    ASSERT_EQ(wal_status(), "lost");

    std::string out;
    std::string err;
    EXPECT_EQ(run_once_with({}, &out, &err), 5) << err;
    EXPECT_TRUE(contains(err, "replication slot " + slot() + " was invalidated")) << err;
    EXPECT_TRUE(contains(err, "max_slot_wal_keep_size")) << err;
    EXPECT_TRUE(contains(err, "`pgtide run --resnapshot`")) << err;
    EXPECT_EQ(checkpoint_lsn(), checkpoint);
    EXPECT_EQ(dest_value("SELECT count(*) FROM t"), rows);

    keep.reset();
    ASSERT_EQ(run_once_with({"--resnapshot"}, &out, &err), 0) << err;
    EXPECT_TRUE(contains(out, "\"epoch\":2")) << out;
    expect_t_equal();
    EXPECT_EQ(wal_status(), "reserved");
}

// (7) The slot is lost while pgtide runs but cannot reach the source (a loopback proxy refuses
// its reconnects): first invalidated by max_slot_wal_keep_size, then, after a resnapshot,
// dropped. When the source is reachable again, START_REPLICATION fails; pgtide must exit 5 with
// the same message as at start-up, not 1 with the server's error. Fails if the reconnect path
// treats a lost slot as an ordinary error (replicate/coordinator.cpp).
//
// Broken on purpose once, then reverted: Coordinator::run_phases (replicate/coordinator.cpp)
// without the `check_slot_lost` after a reconnect. START_REPLICATION failed instead, and both
// rounds exited 1, not 5, with the server's error ("cannot read from logical replication slot
// ... (SQLSTATE 55000)", then "... does not exist (SQLSTATE 42704)"): `EXPECT_EQ(code, 5)`.
TEST_F(Faults, SlotLostWhileCutOffFromTheSourceExitsFive) {
    create_t();
    TcpProxy proxy("127.0.0.1", pg().port());
    auto args = run_args(false);
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
        if (args[i] == "--source") {
            std::string d = pg().tcp_dsn(dbname());
            const std::string direct = "host=localhost port=" + std::to_string(pg().port());
            ASSERT_TRUE(contains(d, direct)) << d;
            d.replace(d.find(direct), direct.size(),
                      "host=127.0.0.1 port=" + std::to_string(proxy.port()));
            args[i + 1] = d;
        }
    }
    // Streams, is cut off, loses its slot to `lose`, then may reconnect; returns its exit code
    // and leaves its stderr in `err`.
    int round = 0;
    const auto cut_off_while = [&](const std::function<void()>& lose, std::string* err) {
        PgtideProcess pgtide(args);
        wait_streaming(pgtide);
        change_t(++round);
        EXPECT_TRUE(wait_for_t()) << pgtide.stderr_text();
        proxy.refuse(true);
        proxy.cut_all();
        EXPECT_TRUE(wait_for([&] {
            return query_value("SELECT active::text FROM pg_replication_slots WHERE slot_name = '" +
                               slot() + "'") == "false";
        }));
        lose();
        proxy.refuse(false);
        const int code = wait_exit(pgtide, 30s, "its slot was lost");
        *err = pgtide.stderr_text();
        return code;
    };

    std::string out;
    std::string err;
    {
        ServerSetting keep(pg(), "max_slot_wal_keep_size", "'1MB'");
        const int code = cut_off_while(
            [&] {
                for (int i = 0; i < 8 && wal_status() != "lost"; ++i) {
                    change_t(++round);
                    query("SELECT pg_switch_wal()");
                    if (i >= 2) {
                        exec("CHECKPOINT");
                    }
                }
                EXPECT_EQ(wal_status(), "lost");
            },
            &err);
        EXPECT_EQ(code, 5) << err;
        EXPECT_TRUE(contains(err, "max_slot_wal_keep_size")) << err;
        EXPECT_TRUE(contains(err, "`pgtide run --resnapshot`")) << err;
        keep.reset();
    }
    ASSERT_EQ(run_once_with({"--resnapshot"}, &out, &err), 0) << err;
    expect_t_equal();

    const int code =
        cut_off_while([&] { exec("SELECT pg_drop_replication_slot('" + slot() + "')"); }, &err);
    EXPECT_EQ(code, 5) << err;
    EXPECT_TRUE(contains(err, "no longer exists")) << err;
    ASSERT_EQ(run_once_with({"--resnapshot"}, &out, &err), 0) << err;
    expect_t_equal();
    EXPECT_EQ(epoch(), "3");
}

} // namespace
} // namespace pgtide::testing
