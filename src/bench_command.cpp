// `pgtide bench`: bench/run's snapshot and stream scenarios on a user's own server, in a schema
// of their own that is dropped afterwards.
//
// The phases, in order:
//   1. readiness: the source checks of `pgtide check` that do not need a publication (exit 3),
//      the role's CREATE privilege on the database;
//   2. claim: schema pgtide_bench (recognised by its COMMENT), publication pgtide_bench and
//      slots pgtide_bench, pgtide_bench_recv must be absent or left by an earlier bench; on a
//      PostgreSQL destination the same for its schema pgtide_bench. Every refusal (exit 2) comes
//      before anything is created or dropped, so a refused bench changes nothing;
//   3. leftovers of an interrupted bench are dropped, then two free slots are required (exit 3);
//   4. the schema (with its marker comment, in the same transaction), the tables and their
//      rows, the publication;
//   5. snapshot: `pgtide run --once` as a child process (the very binary, /proc/self/exe, with a
//      generated config), then the references: binary COPY of both tables drained by one
//      connection per table on threads of their own, and for SQLite a prepared-INSERT bulk load;
//   6. stream: a second slot created before the changes are written, pgtide stopped while they
//      are, then `run --once` vs pg_recvlogical (or, without it, pgtide's own replication
//      connection) draining the same range;
//   7. cleanup, always (errors, SIGINT/SIGTERM): slots (DROP_REPLICATION_SLOT ... WAIT, after
//      every child has been reaped), publication, schema, destination objects, temp dir.
//
// This is a measuring tool, not the replicator: it runs one step after another on the calling
// thread. SQL goes through io::PgConnection under sync_wait, one short loop run per step, and
// the blocking SQLite work of reference (b) runs between those runs, never inside the loop.
// SIGINT/SIGTERM are caught by a plain handler that records them, forwards them to the running
// child and cancels the running statement (PQcancel is async-signal-safe); the step then fails
// and the cleanup runs. Only the main thread takes those signals: the drain threads block them.
#include "src/bench_command.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <fcntl.h>
#include <libpq-fe.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/event_loop.hpp"
#include "io/log.hpp"
#include "io/pg_connection.hpp"
#include "io/sync_wait.hpp"
#include "replicate/errors.hpp"
#include "replicate/replication_connection.hpp"
#include "replicate/session.hpp"
#include "schema/lsn.hpp"
#include "src/check_command.hpp"
#include "src/command_line.hpp"
#include "src/command_support.hpp"
#include "src/config.hpp"

extern char** environ;

namespace pgtide::app {
namespace {

using Clock = std::chrono::steady_clock;
using replicate::DefiniteError;
using replicate::ExitCode;

constexpr const char* kSchema = "pgtide_bench";
constexpr const char* kPublication = "pgtide_bench";
constexpr const char* kSlot = "pgtide_bench";
constexpr const char* kRecvSlot = "pgtide_bench_recv";
constexpr const char* kMarker = "created by pgtide bench; dropped when it ends";
constexpr const char* kAppName = "pgtide bench";

constexpr std::int64_t kNarrowRows = 2000000;
constexpr std::int64_t kWideRows = 300000;
constexpr std::int64_t kStreamChanges = 1000000;
constexpr int kStreamTxn = 10;

// The source's tables and the stream workload (bench/run's, schema-qualified), created in the
// transaction that creates the marked schema; the rows; the sums that compare a destination
// with the source.
constexpr const char* kTablesSql = R"sql(
CREATE TABLE pgtide_bench.narrow (id bigint PRIMARY KEY, a int, b int, c text);
CREATE TABLE pgtide_bench.wide (id bigint PRIMARY KEY, name text, amount numeric(12,2),
    created timestamptz, flags boolean, tags text[], doc jsonb, payload text);
ALTER TABLE pgtide_bench.wide ALTER COLUMN payload SET STORAGE EXTERNAL;
-- Per transaction of `txn` rows: txn/2 updates and txn/5 deletes of consecutive existing ids
-- from p on, the rest inserts of new ids from next_id on.
CREATE PROCEDURE pgtide_bench.changes(n bigint, txn int, INOUT p bigint, INOUT next_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
  u int := txn / 2; d int := txn / 5; i int := txn - txn / 2 - txn / 5; done bigint := 0;
BEGIN
  WHILE done < n LOOP
    UPDATE pgtide_bench.narrow SET a = a + 1, c = substr(md5((id + a)::text), 1, 20)
      WHERE id >= p AND id < p + u;
    DELETE FROM pgtide_bench.narrow WHERE id >= p + u AND id < p + u + d;
    INSERT INTO pgtide_bench.narrow SELECT g, g % 1000, g % 997, substr(md5(g::text), 1, 20)
      FROM generate_series(next_id, next_id + i - 1) g;
    p := p + u + d; next_id := next_id + i; done := done + txn;
    COMMIT;
  END LOOP;
END $$;
)sql";

constexpr const char* kNarrowRowsSql =
    "INSERT INTO pgtide_bench.narrow SELECT g, (g * 7919) % 1000003, g % 1000, "
    "substr(md5(g::text), 1, 20) FROM generate_series(1::bigint, $N) g";

constexpr const char* kWideRowsSql =
    "INSERT INTO pgtide_bench.wide SELECT g, 'customer ' || g, ((g * 37) % 10000000) / 100.0, "
    "timestamptz '2024-01-01 00:00:00+00' + g * interval '17 seconds', g % 3 = 0, "
    "ARRAY['t' || g % 10, 'u' || g % 7, 'v' || g % 13], "
    "jsonb_build_object('k', g, 'sku', 'A' || g % 50, 'h', md5(g::text)), "
    "substr(repeat(md5(g::text) || md5((g + 1)::text), CASE WHEN g % 50 = 0 THEN 64 ELSE 8 END), "
    "1, CASE WHEN g % 50 = 0 THEN 4096 ELSE 500 END) FROM generate_series(1::bigint, $N) g";

std::string sums_sql(const std::string& table, const std::string& relation) {
    const std::string third = table == "narrow" ? "sum(a)" : "sum(length(payload))";
    return "SELECT count(*) || '|' || coalesce(sum(id), 0) || '|' || coalesce(" + third +
           ", 0) FROM " + relation;
}

// ---- signals --------------------------------------------------------------------------------

struct Interrupted : std::runtime_error {
    Interrupted() : std::runtime_error("interrupted") {}
};

std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_cleaning{false};
std::atomic<pid_t> g_child{0};
std::atomic<PGcancel*> g_cancel{nullptr};

void on_signal(int sig) {
    const int saved_errno = errno;
    if (g_cleaning.load()) {
        static const char kMessage[] = "pgtide bench: still dropping what it created; interrupt "
                                       "again to leave it behind\n";
        [[maybe_unused]] const ssize_t n = ::write(2, kMessage, sizeof kMessage - 1);
        std::signal(sig, SIG_DFL);
    } else {
        g_interrupted.store(true);
        if (const pid_t child = g_child.load(); child > 0) {
            ::kill(child, sig);
        }
        if (PGcancel* cancel = g_cancel.load()) {
            char buf[256];
            PQcancel(cancel, buf, sizeof buf);
        }
    }
    errno = saved_errno;
}

void throw_if_interrupted() {
    if (g_interrupted.load()) {
        throw Interrupted();
    }
}

// Catches SIGINT and SIGTERM while it lives; restores the previous handlers.
class SignalScope {
public:
    SignalScope() {
        g_interrupted = false;
        g_cleaning = false;
        struct sigaction sa {};
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        sigaction(SIGINT, &sa, &old_int_);
        sigaction(SIGTERM, &sa, &old_term_);
    }
    ~SignalScope() {
        sigaction(SIGINT, &old_int_, nullptr);
        sigaction(SIGTERM, &old_term_, nullptr);
    }
    SignalScope(const SignalScope&) = delete;
    SignalScope& operator=(const SignalScope&) = delete;

private:
    struct sigaction old_int_ {};
    struct sigaction old_term_ {};
};

// Blocks SIGINT and SIGTERM in this thread while it lives: threads started meanwhile inherit
// the mask, so the handler only ever runs on the main thread.
class BlockSignals {
public:
    BlockSignals() {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, &old_);
    }
    ~BlockSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
    BlockSignals(const BlockSignals&) = delete;
    BlockSignals& operator=(const BlockSignals&) = delete;

private:
    sigset_t old_{};
};

// While it lives, SIGINT/SIGTERM cancel the statement running on `conn` (main thread only).
class CancelOnSignal {
public:
    explicit CancelOnSignal(io::PgConnection& conn) : cancel_(PQgetCancel(conn.raw())) {
        g_cancel.store(cancel_);
    }
    ~CancelOnSignal() {
        g_cancel.store(nullptr);
        if (cancel_ != nullptr) {
            PQfreeCancel(cancel_);
        }
    }
    CancelOnSignal(const CancelOnSignal&) = delete;
    CancelOnSignal& operator=(const CancelOnSignal&) = delete;

private:
    PGcancel* cancel_;
};

// ---- child processes ------------------------------------------------------------------------

struct ChildRun {
    int exit_code = 0;
    double seconds = 0;
    double cpu_seconds = 0;
    double peak_rss_mb = 0;
};

struct SpawnSetup {
    SpawnSetup() {
        posix_spawn_file_actions_init(&files);
        posix_spawnattr_init(&attr);
    }
    ~SpawnSetup() {
        posix_spawn_file_actions_destroy(&files);
        posix_spawnattr_destroy(&attr);
    }
    SpawnSetup(const SpawnSetup&) = delete;
    SpawnSetup& operator=(const SpawnSetup&) = delete;
    posix_spawn_file_actions_t files{};
    posix_spawnattr_t attr{};
};

// The peak RSS of a running child: its VmHWM, read from /proc every 5 ms on a thread of its own
// until stop(). Not wait4's ru_maxrss, which starts from the spawning process's own high-water
// mark (exec carries the old address space's into the new process's maximum): the bench's
// memory would show up as the child's. A peak reached in the child's last 5 ms can be missed.
class PeakRssSampler {
public:
    explicit PeakRssSampler(pid_t pid) : path_("/proc/" + std::to_string(pid) + "/status") {
        BlockSignals blocked;
        thread_ = std::thread([this] { sample_until_stopped(); });
    }
    ~PeakRssSampler() { stop(); }
    PeakRssSampler(const PeakRssSampler&) = delete;
    PeakRssSampler& operator=(const PeakRssSampler&) = delete;

    /// Ends the sampling; the highest VmHWM seen, in MiB (0 when none could be read).
    double stop() {
        if (thread_.joinable()) {
            {
                std::lock_guard lock(mutex_);
                stopping_ = true;
            }
            wake_.notify_one();
            thread_.join();
        }
        return double(peak_kib_) / 1024.0;
    }

private:
    void sample_until_stopped() {
        std::unique_lock lock(mutex_);
        while (!stopping_) {
            std::ifstream in(path_);
            for (std::string line; std::getline(in, line);) {
                if (line.starts_with("VmHWM:")) {
                    peak_kib_ = std::max(peak_kib_, std::atoll(line.c_str() + 6));
                    break;
                }
            }
            wake_.wait_for(lock, std::chrono::milliseconds(5));
        }
    }

    std::string path_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    long long peak_kib_ = 0;
    std::thread thread_;
};

// Runs argv[0] (a path) with stdin from /dev/null, stdout and stderr into files, `env` entries
// ("NAME=value") overriding the inherited environment; waits for it. SIGINT/SIGTERM received
// meanwhile are forwarded to it. CPU time comes from wait4, the peak RSS from PeakRssSampler.
ChildRun run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   const std::string& out_path, const std::string& err_path) {
    SpawnSetup s;
    posix_spawn_file_actions_addopen(&s.files, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&s.files, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addopen(&s.files, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&s.attr, &none);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&s.attr, &defaults);
    posix_spawnattr_setflags(&s.attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string_view entry(*e);
        const auto name = entry.substr(0, entry.find('=') + 1);
        if (std::none_of(env.begin(), env.end(),
                         [&](const std::string& x) { return x.starts_with(name); })) {
            env_strings.emplace_back(entry);
        }
    }
    env_strings.insert(env_strings.end(), env.begin(), env.end());
    std::vector<char*> argv_ptrs;
    for (const auto& a : argv) {
        argv_ptrs.push_back(const_cast<char*>(a.c_str()));
    }
    argv_ptrs.push_back(nullptr);
    std::vector<char*> env_ptrs;
    for (const auto& e : env_strings) {
        env_ptrs.push_back(const_cast<char*>(e.c_str()));
    }
    env_ptrs.push_back(nullptr);

    const auto t0 = Clock::now();
    pid_t pid = 0;
    const int rc =
        posix_spawn(&pid, argv[0].c_str(), &s.files, &s.attr, argv_ptrs.data(), env_ptrs.data());
    if (rc != 0) {
        throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
    }
    g_child.store(pid);
    if (g_interrupted.load()) {
        ::kill(pid, SIGTERM); // the signal came before g_child was set
    }
    PeakRssSampler sampler(pid);
    // Wait for the exit without reaping (the pid stays this child's while the sampler reads).
    siginfo_t info{};
    while (::waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
    const auto t1 = Clock::now();
    ChildRun run;
    run.peak_rss_mb = sampler.stop();
    int status = 0;
    struct rusage usage {};
    while (::wait4(pid, &status, 0, &usage) < 0) {
        if (errno != EINTR) {
            g_child.store(0);
            throw std::system_error(errno, std::generic_category(), "waiting for " + argv[0]);
        }
    }
    g_child.store(0);
    run.seconds = std::chrono::duration<double>(t1 - t0).count();
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    run.cpu_seconds = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                      double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    return run;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

std::string tail(const std::string& text, std::size_t max = 3000) {
    return text.size() <= max ? text : "..." + text.substr(text.size() - max);
}

// The integer after "key": in a one-line JSON object, or nullopt.
std::optional<long long> json_integer(const std::string& text, const std::string& key) {
    const auto at = text.find("\"" + key + "\":");
    if (at == std::string::npos) {
        return std::nullopt;
    }
    return std::strtoll(text.c_str() + at + key.size() + 3, nullptr, 10);
}

bool executable(const std::string& path) {
    return ::access(path.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(path);
}

// pg_recvlogical on PATH, else in the bindir of a pg_config on PATH; nullopt when neither.
std::optional<std::string> find_pg_recvlogical(const std::string& scratch_dir) {
    const char* path_env = std::getenv("PATH");
    std::vector<std::string> dirs;
    std::stringstream path(path_env != nullptr ? path_env : "");
    for (std::string dir; std::getline(path, dir, ':');) {
        if (!dir.empty()) {
            dirs.push_back(dir);
        }
    }
    for (const auto& dir : dirs) {
        if (executable(dir + "/pg_recvlogical")) {
            return dir + "/pg_recvlogical";
        }
    }
    for (const auto& dir : dirs) {
        if (!executable(dir + "/pg_config")) {
            continue;
        }
        const std::string out = scratch_dir + "/pg_config.out";
        const std::vector<std::string> argv{dir + "/pg_config", "--bindir"};
        const std::vector<std::string> no_env;
        if (run_child(argv, no_env, out, "/dev/null").exit_code == 0) {
            std::string bindir = read_text(out);
            while (!bindir.empty() && (bindir.back() == '\n' || bindir.back() == '\r')) {
                bindir.pop_back();
            }
            if (executable(bindir + "/pg_recvlogical")) {
                return bindir + "/pg_recvlogical";
            }
        }
        break;
    }
    return std::nullopt;
}

// The DSN as key='value' pairs without its password, and the password: a child's command line
// can be read by every local user, its environment (PGPASSWORD) cannot. Throws UsageError when
// libpq cannot parse the DSN.
std::pair<std::string, std::string> split_password(const std::string& dsn) {
    char* error = nullptr;
    PQconninfoOption* options = PQconninfoParse(dsn.c_str(), &error);
    if (options == nullptr) {
        std::string message = error != nullptr ? error : "out of memory";
        PQfreemem(error);
        while (!message.empty() && message.back() == '\n') {
            message.pop_back();
        }
        throw UsageError("--source is not a connection string libpq accepts: " + message);
    }
    std::string conninfo;
    std::string password;
    for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
        if (o->val == nullptr) {
            continue;
        }
        if (std::string_view(o->keyword) == "password") {
            password = o->val;
            continue;
        }
        conninfo += (conninfo.empty() ? "" : " ") + std::string(o->keyword) + "='";
        for (const char* c = o->val; *c != '\0'; ++c) {
            if (*c == '\'' || *c == '\\') {
                conninfo += '\\';
            }
            conninfo += *c;
        }
        conninfo += '\'';
    }
    PQconninfoFree(options);
    return {conninfo, password};
}

// ---- SQLite ---------------------------------------------------------------------------------

struct DbCloser {
    void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
    void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;
using Statement = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

Db open_sqlite(const std::string& path, int flags) {
    sqlite3* raw = nullptr;
    const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
    Db db(raw);
    if (rc != SQLITE_OK) {
        throw std::runtime_error("opening " + path + ": " +
                                 (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
    }
    return db;
}

void sqlite_exec(sqlite3* db, const std::string& sql) {
    char* error = nullptr;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
        const std::string message = error != nullptr ? error : sqlite3_errmsg(db);
        sqlite3_free(error);
        throw std::runtime_error("sqlite: " + message + " while running: " + sql);
    }
}

Statement sqlite_prepare(sqlite3* db, const std::string& sql) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) {
        throw std::runtime_error(std::string("sqlite: ") + sqlite3_errmsg(db) +
                                 " while preparing: " + sql);
    }
    return Statement(raw);
}

// The text of the first column of the first row, or "".
std::string sqlite_value(sqlite3* db, const std::string& sql) {
    Statement s = sqlite_prepare(db, sql);
    const int rc = sqlite3_step(s.get());
    if (rc == SQLITE_ROW) {
        const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 0));
        return text != nullptr ? text : "";
    }
    if (rc != SQLITE_DONE) {
        throw std::runtime_error(std::string("sqlite: ") + sqlite3_errmsg(db) +
                                 " while running: " + sql);
    }
    return "";
}

std::string quote_ident(std::string_view name) {
    std::string out = "\"";
    for (const char c : name) {
        out += c;
        if (c == '"') {
            out += '"';
        }
    }
    return out + "\"";
}

// ---- the drains -----------------------------------------------------------------------------

// Reference (a) for one table: its binary COPY drained and thrown away; the bytes read.
io::Task<std::int64_t> drain_copy(std::string dsn, std::string table) {
    io::PgConnection conn = co_await io::PgConnection::connect(
        std::move(dsn), replicate::sql_connection_params(kAppName));
    co_await conn.copy_out_start("COPY pgtide_bench." + table + " TO STDOUT (FORMAT binary)");
    std::int64_t bytes = 0;
    while (auto chunk = co_await conn.copy_out_next()) {
        bytes += std::int64_t(chunk->size());
        throw_if_interrupted(); // closing the connection ends the server's COPY
    }
    co_return bytes;
}

// The stream reference without pg_recvlogical: pgoutput from `slot` read up to `end` and thrown
// away, as `pg_recvlogical --endpos` does: until a commit at or past `end`, or a keepalive
// saying the walsender has sent everything up to it.
io::Task<void> drain_stream(std::string dsn, std::string slot, schema::Lsn end) {
    replicate::ReplicationConnection conn =
        co_await replicate::ReplicationConnection::connect(std::move(dsn), kAppName);
    std::vector<std::string> publications{kPublication};
    co_await conn.start(std::move(slot), schema::Lsn(), std::move(publications), false);
    schema::Lsn last;
    for (;;) {
        throw_if_interrupted();
        const replicate::StreamRead read =
            co_await conn.read(Clock::now() + std::chrono::milliseconds(100));
        if (const auto* x = std::get_if<replicate::XLogData>(&read)) {
            if (x->data_start.valid()) {
                last = x->data_start;
                if (last >= end) {
                    break;
                }
            }
        } else if (const auto* k = std::get_if<replicate::PrimaryKeepalive>(&read)) {
            if (k->wal_end >= end) {
                break;
            }
            if (k->reply_requested) {
                co_await conn.send_status(last, last, false);
            }
        } else if (std::holds_alternative<replicate::StreamEnd>(read)) {
            throw std::runtime_error("the server ended the replication stream before " + end.str());
        } else {
            co_await conn.send_status(last, last, true); // a keepalive tells where it is
        }
    }
    co_await conn.stop();
}

// ---- figures and their output ---------------------------------------------------------------

struct Figure {
    std::string name;
    std::int64_t rows = 0;
    std::int64_t bytes = 0;
    double seconds = 0;
    std::optional<double> cpu_seconds = std::nullopt;
    std::optional<double> peak_rss_mb = std::nullopt;
    std::string note;

    double rows_per_s() const { return seconds > 0 ? double(rows) / seconds : 0; }
    double mb_per_s() const { return seconds > 0 ? double(bytes) / 1e6 / seconds : 0; }
};

struct Scenario {
    std::string key;
    std::string title;
    bool verified = true;
    std::vector<Figure> figures; // pgtide first
    std::vector<std::pair<std::string, double>> extra = {};
};

// pgtide's rows/s divided by the figure's.
double ratio(const Scenario& s, const Figure& f) {
    return f.rows_per_s() > 0 ? s.figures.front().rows_per_s() / f.rows_per_s() : 0;
}

// 1234567.8 → "1,234,568" (decimals 0), as Python's "{:,.0f}".
std::string grouped(double value, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
    std::string s = buf;
    const std::size_t start = s[0] == '-' ? 1 : 0;
    std::size_t end = s.find('.');
    if (end == std::string::npos) {
        end = s.size();
    }
    while (end > start + 3) {
        end -= 3;
        s.insert(end, ",");
    }
    return s;
}

std::string fixed(double value, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
    return buf;
}

// A positive number for JSON with at least four significant digits.
std::string json_number(double value) {
    if (!std::isfinite(value)) {
        return "null";
    }
    const double magnitude = std::fabs(value);
    return fixed(value, magnitude >= 1000 ? 1 : magnitude >= 1 ? 3 : 6);
}

// 0.1 → "0.1", as printf's %g.
std::string short_number(double value) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", value);
    return buf;
}

std::string json_optional(const std::optional<double>& value) {
    return value ? json_number(*value) : "null";
}

// Terminal columns of UTF-8 text ("÷" is one).
std::size_t columns(const std::string& s) {
    return std::size_t(std::count_if(
        s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// bench/run's table: first and last column left-aligned, the numbers right-aligned.
std::vector<std::string> table_lines(const Scenario& s) {
    std::vector<std::vector<std::string>> rows{
        {"", "rows/s", "MB/s", "wall s", "client CPU s", "peak RSS MB", "pgtide ÷ this", "note"}};
    for (const Figure& f : s.figures) {
        rows.push_back({f.name, grouped(f.rows_per_s(), 0), grouped(f.mb_per_s(), 2),
                        grouped(f.seconds, 2), f.cpu_seconds ? grouped(*f.cpu_seconds, 2) : "-",
                        f.peak_rss_mb ? grouped(*f.peak_rss_mb, 1) : "-", grouped(ratio(s, f), 2),
                        f.note});
    }
    std::vector<std::size_t> width(rows.front().size(), 0);
    for (const auto& row : rows) {
        for (std::size_t i = 0; i < row.size(); ++i) {
            width[i] = std::max(width[i], columns(row[i]));
        }
    }
    std::vector<std::string> lines;
    for (const auto& row : rows) {
        std::string line;
        for (std::size_t i = 0; i < row.size(); ++i) {
            const std::string pad(width[i] - columns(row[i]), ' ');
            line += (i > 0 ? "  " : "");
            line += (i == 0 || i + 1 == row.size()) ? row[i] + pad : pad + row[i];
        }
        while (!line.empty() && line.back() == ' ') {
            line.pop_back();
        }
        lines.push_back(std::move(line));
    }
    return lines;
}

// ---- the bench ------------------------------------------------------------------------------

class Bench {
public:
    explicit Bench(BenchOptions options);
    Bench(const Bench&) = delete;
    Bench& operator=(const Bench&) = delete;

    /// Phases 1 to 4. Throws DefiniteError for a refusal (2) or an unready source (3).
    void prepare();
    void snapshot();
    void stream();
    /// Phase 7; never throws (failures are logged with what to drop by hand).
    void cleanup() noexcept;

    std::string text() const;
    std::string json() const;
    bool verified() const;

private:
    template <class T> T wait(io::Task<T> task) { return io::sync_wait(loop_, std::move(task)); }
    io::PgConnection connect(const std::string& dsn);
    io::PgResult sql(const std::string& query) { return wait(source_.exec(query)); }
    io::PgResult long_sql(const std::string& query);
    std::string value(const std::string& query) {
        return std::string(wait(source_.exec(query)).get(0, 0));
    }
    std::string pgtide_destination_name() const;

    void check_ready();
    bool claim_source();
    bool claim_destination();
    void drop_source_objects();
    void drop_destination_objects();
    void create_source();

    std::pair<ChildRun, std::string> run_pgtide(const std::string& what);
    bool verify(const std::vector<std::string>& tables, const std::string& what);
    double copy_drain(std::int64_t* bytes);
    double sqlite_insert(std::int64_t* rows);
    Figure stream_reference(const std::string& end_lsn, std::int64_t wal_bytes);

    BenchOptions o_;
    io::EventLoop loop_;
    std::string exe_;
    std::string dir_;
    std::string dest_url_;
    std::string sqlite_path_; // empty for a PostgreSQL destination
    io::PgConnection source_;
    std::string server_version_;
    int server_version_num_ = 0;
    std::string role_;
    std::int64_t narrow_rows_ = 0;
    std::int64_t wide_rows_ = 0;
    std::int64_t changes_ = 0;
    bool owns_source_ = false;
    bool owns_destination_ = false;
    bool destination_had_metadata_ = true;
    double load_at_start_ = 0;
    std::vector<Scenario> scenarios_;
    std::vector<std::pair<std::string, std::string>> skipped_;
};

Bench::Bench(BenchOptions options) : o_(std::move(options)) {
    std::error_code ec;
    exe_ = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) {
        throw std::runtime_error("cannot find the pgtide binary through /proc/self/exe: " +
                                 ec.message());
    }
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/pgtide-bench-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
        throw std::system_error(errno, std::generic_category(),
                                "creating a temporary directory like " + pattern);
    }
    dir_ = pattern;
    if (o_.to) {
        dest_url_ = *o_.to;
        DestinationConfig d;
        d.url = dest_url_;
        if (d.is_sqlite()) {
            sqlite_path_ = d.sqlite_path();
        }
    } else {
        sqlite_path_ = dir_ + "/pgtide.db";
        dest_url_ = "sqlite:" + sqlite_path_;
    }
    narrow_rows_ = std::max<std::int64_t>(1000, std::int64_t(double(kNarrowRows) * o_.scale));
    wide_rows_ = std::max<std::int64_t>(100, std::int64_t(double(kWideRows) * o_.scale));
    changes_ = std::max<std::int64_t>(
        kStreamTxn, std::llround(double(kStreamChanges) * o_.scale / kStreamTxn) * kStreamTxn);
    double load[1] = {0};
    if (::getloadavg(load, 1) == 1) {
        load_at_start_ = load[0];
    }
}

io::PgConnection Bench::connect(const std::string& dsn) {
    io::PgConnection conn = wait(io::PgConnection::connect(
        dsn, replicate::sql_connection_params(kAppName), std::chrono::seconds(30)));
    wait(conn.exec("SET client_min_messages = warning")); // no NOTICE of DROP ... CASCADE
    return conn;
}

io::PgResult Bench::long_sql(const std::string& query) {
    CancelOnSignal cancel(source_);
    throw_if_interrupted();
    return wait(source_.exec(query));
}

std::string Bench::pgtide_destination_name() const {
    if (!sqlite_path_.empty()) {
        return o_.to ? "SQLite file " + sqlite_path_ : "temporary SQLite file";
    }
    return "PostgreSQL " + redact_dsn(dest_url_);
}

// pgtide check's verdicts on the source that do not need the publication yet.
void Bench::check_ready() {
    Config config;
    config.source.dsn = o_.source_dsn;
    config.source.publications = {kPublication};
    config.source.slot = kSlot;
    config.destination.url = dest_url_;
    const CheckReport report = wait(run_check(config));
    static const std::set<std::string> kRelevant{
        "destination", "source",          "server version",        "wal_level",
        "role",        "max_wal_senders", "replication connection"};
    std::string failures;
    ExitCode code = ExitCode::SourceNotReady;
    for (const CheckVerdict& v : report.verdicts) {
        if (v.status != CheckVerdict::Status::Fail || kRelevant.count(v.check) == 0) {
            continue;
        }
        failures += (failures.empty() ? "" : "; ") + v.check + ": " + v.message +
                    (v.fix.empty() ? "" : " (fix: " + v.fix + ")");
        if (v.code == ExitCode::Usage) {
            code = ExitCode::Usage;
        }
    }
    if (!failures.empty()) {
        throw DefiniteError(code, "pgtide bench cannot run: " + failures);
    }
}

// Whether the source's pgtide_bench names are free (false) or an earlier bench's leftovers
// (true). Throws DefiniteError(Usage) when any of them belongs to someone else.
bool Bench::claim_source() {
    const std::string slots_in = std::string("('") + kSlot + "', '" + kRecvSlot + "')";
    io::PgResult schema = sql("SELECT coalesce(obj_description(oid, 'pg_namespace'), '') "
                              "FROM pg_namespace WHERE nspname = 'pgtide_bench'");
    io::PgResult publication =
        sql("SELECT 1 FROM pg_publication WHERE pubname = '" + std::string(kPublication) + "'");
    io::PgResult slots =
        sql("SELECT slot_name, active, coalesce(database, '') = current_database() "
            "FROM pg_replication_slots WHERE slot_name IN " +
            slots_in + " ORDER BY 1");
    if (schema.rows() == 1 && schema.get(0, 0) != kMarker) {
        throw DefiniteError(ExitCode::Usage,
                            "schema pgtide_bench already exists and pgtide bench did not create "
                            "it (its comment is not pgtide bench's mark); pgtide bench leaves it "
                            "alone: rename or drop it, or bench another database");
    }
    if (schema.rows() == 0) {
        if (publication.rows() > 0) {
            throw DefiniteError(ExitCode::Usage,
                                "publication pgtide_bench exists but schema pgtide_bench does "
                                "not: it is not pgtide bench's; drop it or bench another "
                                "database");
        }
        if (slots.rows() > 0) {
            throw DefiniteError(ExitCode::Usage,
                                "replication slot " + std::string(slots.get(0, 0)) +
                                    " exists but schema pgtide_bench does not: it is not "
                                    "pgtide bench's; drop it or bench another server");
        }
        return false;
    }
    for (int i = 0; i < slots.rows(); ++i) {
        const std::string name(slots.get(i, 0));
        if (slots.get(i, 2) != "t") {
            throw DefiniteError(ExitCode::Usage, "replication slot " + name +
                                                     " belongs to another database; drop it or "
                                                     "bench that database");
        }
        if (slots.get(i, 1) == "t") {
            throw DefiniteError(ExitCode::Usage, "replication slot " + name +
                                                     " is in use: another pgtide bench seems to "
                                                     "run on this database");
        }
    }
    return true;
}

// The same for the destination: a new SQLite file, or a PostgreSQL database other than the
// source's whose pgtide_bench schema and pgtide_bench checkpoint are absent or bench leftovers.
bool Bench::claim_destination() {
    if (!sqlite_path_.empty()) {
        std::error_code ec;
        if (o_.to && std::filesystem::exists(sqlite_path_, ec)) {
            throw DefiniteError(ExitCode::Usage, "the destination " + sqlite_path_ +
                                                     " exists; pgtide bench writes a new file: "
                                                     "remove it or choose another path");
        }
        return false;
    }
    io::PgConnection dest = connect(dest_url_);
    const std::string facts_sql = "SELECT (SELECT system_identifier::text FROM "
                                  "pg_control_system()), current_database()";
    io::PgResult mine = sql(facts_sql);
    io::PgResult theirs = wait(dest.exec(facts_sql));
    if (mine.get(0, 0) == theirs.get(0, 0) && mine.get(0, 1) == theirs.get(0, 1)) {
        throw DefiniteError(ExitCode::Usage, "the destination is the source database itself; "
                                             "--to must name another database");
    }
    io::PgResult d = wait(dest.exec(
        "SELECT (SELECT coalesce(obj_description(oid, 'pg_namespace'), '') FROM pg_namespace "
        "WHERE nspname = 'pgtide_bench'), to_regclass('public._pgtide_checkpoint') IS NOT NULL"));
    const bool has_schema = !d.is_null(0, 0);
    destination_had_metadata_ = d.get(0, 1) == "t";
    bool has_checkpoint = false;
    if (destination_had_metadata_) {
        io::PgResult c = wait(dest.exec("SELECT 1 FROM public._pgtide_checkpoint "
                                        "WHERE slot_name = 'pgtide_bench'"));
        has_checkpoint = c.rows() > 0;
    }
    if (has_schema && d.get(0, 0) != kMarker) {
        throw DefiniteError(ExitCode::Usage,
                            "the destination already has a schema pgtide_bench that pgtide "
                            "bench did not create; pgtide bench leaves it alone: rename or "
                            "drop it, or choose another destination");
    }
    if (!has_schema && has_checkpoint) {
        throw DefiniteError(ExitCode::Usage,
                            "the destination holds a checkpoint for slot pgtide_bench that "
                            "pgtide bench did not leave; choose another destination");
    }
    return has_schema;
}

void Bench::prepare() {
    throw_if_interrupted();
    io::log_info("pgtide bench: checking the source", {{"source", redact_dsn(o_.source_dsn)}});
    check_ready();
    source_ = connect(o_.source_dsn);
    io::PgResult facts =
        sql("SELECT current_setting('server_version'), current_setting('server_version_num'), "
            "current_user, has_database_privilege(current_database(), 'CREATE'), "
            "current_database()");
    server_version_ = std::string(facts.get(0, 0));
    server_version_num_ = std::stoi(std::string(facts.get(0, 1)));
    role_ = std::string(facts.get(0, 2));
    if (facts.get(0, 3) != "t") {
        throw DefiniteError(ExitCode::SourceNotReady,
                            "pgtide bench cannot run: role " + role_ +
                                " cannot CREATE in database " + std::string(facts.get(0, 4)) +
                                ", where pgtide bench creates schema pgtide_bench (fix: GRANT "
                                "CREATE ON DATABASE " +
                                quote_ident(facts.get(0, 4)) + " TO " + quote_ident(role_) + ")");
    }
    // Every refusal before anything changes.
    const bool source_leftovers = claim_source();
    const bool destination_leftovers = claim_destination();
    owns_source_ = true;
    owns_destination_ = sqlite_path_.empty();
    if (source_leftovers || destination_leftovers) {
        io::log_warn("pgtide bench: dropping what an interrupted pgtide bench left behind");
        if (source_leftovers) {
            drop_source_objects();
        }
        if (destination_leftovers) {
            drop_destination_objects();
        }
    }
    io::PgResult slots = sql("SELECT current_setting('max_replication_slots')::int - "
                             "(SELECT count(*) FROM pg_replication_slots)::int");
    const int free_slots = std::stoi(std::string(slots.get(0, 0)));
    if (free_slots < 2) {
        throw DefiniteError(ExitCode::SourceNotReady,
                            "pgtide bench cannot run: it needs 2 free replication slots (one for "
                            "pgtide, one for the stream reference) and the server has " +
                                std::to_string(std::max(free_slots, 0)) +
                                " (fix: raise max_replication_slots and restart PostgreSQL, or "
                                "drop unused slots)");
    }
    create_source();
}

void Bench::create_source() {
    io::log_info(
        "pgtide bench: creating schema pgtide_bench",
        {{"narrow_rows", std::to_string(narrow_rows_)}, {"wide_rows", std::to_string(wide_rows_)}});
    const auto t0 = Clock::now();
    long_sql(std::string("BEGIN; CREATE SCHEMA pgtide_bench; COMMENT ON SCHEMA pgtide_bench IS '") +
             kMarker + "';" + kTablesSql + "COMMIT");
    const auto with_rows = [](std::string sql, std::int64_t n) {
        sql.replace(sql.find("$N"), 2, std::to_string(n));
        return sql;
    };
    long_sql(with_rows(kNarrowRowsSql, narrow_rows_));
    long_sql(with_rows(kWideRowsSql, wide_rows_));
    sql("CREATE PUBLICATION pgtide_bench FOR TABLE pgtide_bench.narrow, pgtide_bench.wide");
    long_sql("VACUUM ANALYZE pgtide_bench.narrow, pgtide_bench.wide");
    if (sqlite_path_.empty()) {
        // pgtide creates its tables in the destination's schema pgtide_bench (IF NOT EXISTS):
        // made here first, it carries the mark that lets the cleanup drop it.
        io::PgConnection dest = connect(dest_url_);
        wait(dest.exec(std::string("BEGIN; CREATE SCHEMA pgtide_bench; COMMENT ON SCHEMA "
                                   "pgtide_bench IS '") +
                       kMarker + "'; COMMIT"));
    }
    io::log_info("pgtide bench: data generated",
                 {{"seconds", fixed(std::chrono::duration<double>(Clock::now() - t0).count(), 1)}});
}

// `pgtide run --once` on the bench's publication and slot; throws when it fails.
std::pair<ChildRun, std::string> Bench::run_pgtide(const std::string& what) {
    throw_if_interrupted();
    const std::string config = dir_ + "/pgtide.toml";
    if (!std::filesystem::exists(config)) {
        std::ofstream out(config);
        out << "# Written by pgtide bench for its own `pgtide run --once`; removed afterwards.\n"
               "[source]\n"
               "dsn = \"${PGTIDE_BENCH_SOURCE}\"\n"
               "publications = [\"pgtide_bench\"]\n"
               "slot = \"pgtide_bench\"\n\n"
               "[destination]\n"
               "url = \"${PGTIDE_BENCH_DESTINATION}\"\n\n"
               "[log]\n"
               "level = \"warn\"\n";
    }
    const std::vector<std::string> argv{exe_, "run", "--once", "--json", "-c", config};
    const std::vector<std::string> env{"PGTIDE_BENCH_SOURCE=" + o_.source_dsn,
                                       "PGTIDE_BENCH_DESTINATION=" + dest_url_};
    const std::string out = dir_ + "/pgtide.out";
    const std::string err = dir_ + "/pgtide.err";
    io::log_info("pgtide bench: " + what + ": pgtide run --once",
                 {{"destination", pgtide_destination_name()}});
    const ChildRun run = run_child(argv, env, out, err);
    throw_if_interrupted();
    if (run.exit_code != 0) {
        const ExitCode code =
            run.exit_code >= 3 && run.exit_code <= 5 ? ExitCode(run.exit_code) : ExitCode::Other;
        throw DefiniteError(code, what + ": pgtide run --once exited with " +
                                      std::to_string(run.exit_code) + ":\n" + tail(read_text(err)));
    }
    return {run, read_text(out)};
}

// Row counts and sums of `tables` in the destination against the source; logs a mismatch.
bool Bench::verify(const std::vector<std::string>& tables, const std::string& what) {
    Db sqlite;
    io::PgConnection dest;
    if (!sqlite_path_.empty()) {
        sqlite = open_sqlite(sqlite_path_, SQLITE_OPEN_READONLY);
    } else {
        dest = connect(dest_url_);
    }
    bool ok = true;
    for (const auto& t : tables) {
        const std::string want = value(sums_sql(t, "pgtide_bench." + t));
        const std::string got =
            sqlite ? sqlite_value(sqlite.get(), sums_sql(t, quote_ident("pgtide_bench__" + t)))
                   : std::string(wait(dest.exec(sums_sql(t, "pgtide_bench." + t))).get(0, 0));
        if (got != want) {
            io::log_error("pgtide bench: " + what + ": pgtide REPLICATED WRONGLY: table " + t +
                          ": the source has count|sum(id)|sum " + want + ", the destination has " +
                          got);
            ok = false;
        }
    }
    return ok;
}

// Reference (a): both tables' binary COPY drained at once, one connection and one thread each.
double Bench::copy_drain(std::int64_t* bytes) {
    io::log_info("pgtide bench: snapshot: binary COPY drained by libpq");
    const std::vector<std::string> tables{"narrow", "wide"};
    std::vector<std::int64_t> read(tables.size(), 0);
    std::vector<std::string> errors(tables.size());
    std::vector<std::thread> threads;
    const auto t0 = Clock::now();
    {
        BlockSignals blocked;
        for (std::size_t i = 0; i < tables.size(); ++i) {
            threads.emplace_back([&, i] {
                try {
                    io::EventLoop loop;
                    read[i] = io::sync_wait(loop, drain_copy(o_.source_dsn, tables[i]));
                } catch (const std::exception& e) {
                    errors[i] = tables[i] + ": " + e.what();
                }
            });
        }
    }
    for (auto& t : threads) {
        t.join();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    throw_if_interrupted();
    for (const auto& e : errors) {
        if (!e.empty()) {
            throw std::runtime_error("snapshot reference (a), COPY drain of " + e);
        }
    }
    *bytes = read[0] + read[1];
    return seconds;
}

// Reference (b): both tables' rows read through a cursor (text) and inserted into a scratch
// file with pgtide's own DDL by one prepared INSERT in 100,000-row transactions, with pgtide's
// pragmas. Only the SQLite work is timed. Blocking SQLite calls, outside the event loop.
double Bench::sqlite_insert(std::int64_t* rows) {
    io::log_info("pgtide bench: snapshot: SQLite bulk insert, one prepared statement");
    constexpr int kFetchRows = 20000;
    constexpr std::int64_t kTxnRows = 100000;
    const std::string scratch = dir_ + "/reference.db";
    Db made = open_sqlite(sqlite_path_, SQLITE_OPEN_READONLY);
    Db db = open_sqlite(scratch, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    sqlite_exec(db.get(), "PRAGMA journal_mode=WAL");
    sqlite_exec(db.get(), "PRAGMA synchronous=FULL");
    sqlite_exec(db.get(), "PRAGMA cache_size=-16384");
    io::PgConnection conn = connect(o_.source_dsn);
    wait(conn.exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"));
    double seconds = 0;
    *rows = 0;
    for (const std::string table : {"narrow", "wide"}) {
        const std::string target = "pgtide_bench__" + table;
        sqlite_exec(db.get(), sqlite_value(made.get(), "SELECT sql FROM sqlite_master WHERE "
                                                       "type = 'table' AND name = '" +
                                                           target + "'"));
        enum class Bind { Integer, Real, Text, Blob, Lsn };
        std::vector<Bind> binds;
        std::string select;
        std::string insert = "INSERT INTO " + quote_ident(target) + " VALUES (";
        {
            Statement info = sqlite_prepare(db.get(), "SELECT name, type FROM pragma_table_info('" +
                                                          target + "')");
            while (sqlite3_step(info.get()) == SQLITE_ROW) {
                const std::string name =
                    reinterpret_cast<const char*>(sqlite3_column_text(info.get(), 0));
                const std::string type =
                    reinterpret_cast<const char*>(sqlite3_column_text(info.get(), 1));
                insert += (binds.empty() ? "?" : ", ?");
                if (name == "_pgtide_lsn") {
                    binds.push_back(Bind::Lsn);
                    continue;
                }
                binds.push_back(type == "INTEGER" ? Bind::Integer
                                : type == "REAL"  ? Bind::Real
                                : type == "BLOB"  ? Bind::Blob
                                                  : Bind::Text);
                select += (select.empty() ? "" : ", ") + quote_ident(name);
            }
        }
        insert += ")";
        wait(conn.exec("DECLARE bench_rows NO SCROLL CURSOR FOR SELECT " + select +
                       " FROM pgtide_bench." + table));
        auto t0 = Clock::now();
        Statement ins = sqlite_prepare(db.get(), insert);
        sqlite_exec(db.get(), "BEGIN");
        seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        std::int64_t in_txn = 0;
        for (;;) {
            throw_if_interrupted();
            const io::PgResult r =
                wait(conn.exec("FETCH " + std::to_string(kFetchRows) + " FROM bench_rows"));
            if (r.rows() == 0) {
                break;
            }
            t0 = Clock::now();
            for (int row = 0; row < r.rows(); ++row) {
                int field = 0;
                for (std::size_t i = 0; i < binds.size(); ++i) {
                    const int p = int(i) + 1;
                    if (binds[i] == Bind::Lsn) {
                        sqlite3_bind_int64(ins.get(), p, 1);
                        continue;
                    }
                    const int f = field++;
                    if (r.is_null(row, f)) {
                        sqlite3_bind_null(ins.get(), p);
                        continue;
                    }
                    const std::string_view v = r.get(row, f);
                    switch (binds[i]) {
                    case Bind::Integer:
                        sqlite3_bind_int64(ins.get(), p,
                                           v == "t"   ? 1
                                           : v == "f" ? 0
                                                      : std::strtoll(v.data(), nullptr, 10));
                        break;
                    case Bind::Real:
                        sqlite3_bind_double(ins.get(), p, std::strtod(v.data(), nullptr));
                        break;
                    case Bind::Blob:
                        sqlite3_bind_blob(ins.get(), p, v.data(), int(v.size()), SQLITE_STATIC);
                        break;
                    default:
                        sqlite3_bind_text(ins.get(), p, v.data(), int(v.size()), SQLITE_STATIC);
                        break;
                    }
                }
                if (sqlite3_step(ins.get()) != SQLITE_DONE) {
                    throw std::runtime_error(std::string("sqlite: ") + sqlite3_errmsg(db.get()) +
                                             " while inserting into " + scratch);
                }
                sqlite3_reset(ins.get());
                if (++in_txn == kTxnRows) {
                    sqlite_exec(db.get(), "COMMIT");
                    sqlite_exec(db.get(), "BEGIN");
                    in_txn = 0;
                }
            }
            seconds += std::chrono::duration<double>(Clock::now() - t0).count();
            *rows += r.rows();
        }
        t0 = Clock::now();
        sqlite_exec(db.get(), "COMMIT");
        ins.reset();
        seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        wait(conn.exec("CLOSE bench_rows"));
    }
    wait(conn.exec("COMMIT"));
    return seconds;
}

void Bench::snapshot() {
    const auto [run, out] = run_pgtide("snapshot");
    const bool ok = verify({"narrow", "wide"}, "snapshot");
    const std::int64_t rows = narrow_rows_ + wide_rows_;
    if (const auto copied = json_integer(out, "rows_copied"); copied && *copied != rows) {
        io::log_warn("pgtide bench: pgtide reported rows_copied=" + std::to_string(*copied) +
                     ", the source has " + std::to_string(rows));
    }
    std::int64_t bytes = 0;
    const double drain_seconds = copy_drain(&bytes);
    Scenario s;
    s.key = "snapshot";
    s.verified = ok;
    s.figures.push_back(Figure{"pgtide run --once (bootstrap)", rows, bytes, run.seconds,
                               run.cpu_seconds, run.peak_rss_mb, ok ? "" : "REPLICATED WRONGLY"});
    s.figures.push_back(Figure{"(a) binary COPY drain, libpq", rows, bytes, drain_seconds,
                               std::nullopt, std::nullopt, "source ceiling, 1 conn per table"});
    if (!sqlite_path_.empty()) {
        std::int64_t inserted = 0;
        const double insert_seconds = sqlite_insert(&inserted);
        s.figures.push_back(Figure{"(b) SQLite prepared INSERT", inserted, bytes, insert_seconds,
                                   std::nullopt, std::nullopt,
                                   "destination ceiling, SQLite time only"});
    } else {
        skipped_.emplace_back("snapshot (b) SQLite prepared INSERT",
                              "the destination is PostgreSQL");
    }
    s.title = std::string("Snapshot into ") + (sqlite_path_.empty() ? "PostgreSQL" : "SQLite") +
              ": narrow + wide, " + std::to_string(rows) + " rows, " +
              fixed(double(bytes) / 1e6, 1) + " MB of binary COPY (MB/s counts those bytes)";
    scenarios_.push_back(std::move(s));
}

// The stream reference: pg_recvlogical when there is one, else pgtide's replication connection.
Figure Bench::stream_reference(const std::string& end_lsn, std::int64_t wal_bytes) {
    const auto end = schema::Lsn::parse(end_lsn);
    if (!end) {
        throw std::runtime_error("pg_current_wal_insert_lsn() returned \"" + end_lsn + "\"");
    }
    if (const auto recvlogical = find_pg_recvlogical(dir_)) {
        io::log_info("pgtide bench: stream: pg_recvlogical", {{"endpos", end_lsn}});
        const auto [conninfo, password] = split_password(o_.source_dsn);
        const int proto = server_version_num_ >= 160000 ? 4 : 3;
        const std::vector<std::string> argv{*recvlogical,
                                            "-d",
                                            conninfo,
                                            "--slot",
                                            kRecvSlot,
                                            "--start",
                                            "--no-loop",
                                            "--endpos",
                                            end_lsn,
                                            "-o",
                                            "proto_version=" + std::to_string(proto),
                                            "-o",
                                            std::string("publication_names=") + kPublication,
                                            "-f",
                                            "-"};
        std::vector<std::string> env;
        if (!password.empty()) {
            env.push_back("PGPASSWORD=" + password);
        }
        const std::string err = dir_ + "/pg_recvlogical.err";
        const ChildRun run = run_child(argv, env, "/dev/null", err);
        throw_if_interrupted();
        if (run.exit_code != 0) {
            throw std::runtime_error("stream reference: pg_recvlogical exited with " +
                                     std::to_string(run.exit_code) + ":\n" + tail(read_text(err)));
        }
        return Figure{"pg_recvlogical pgoutput > /dev/null",
                      changes_,
                      wal_bytes,
                      run.seconds,
                      run.cpu_seconds,
                      run.peak_rss_mb,
                      "source decoding ceiling"};
    }
    io::log_info("pgtide bench: stream: no pg_recvlogical on PATH or beside pg_config; draining "
                 "with pgtide's replication connection",
                 {{"endpos", end_lsn}});
    const auto t0 = Clock::now();
    wait(drain_stream(o_.source_dsn, kRecvSlot, *end));
    return Figure{"walsender drain, pgtide's connection",
                  changes_,
                  wal_bytes,
                  std::chrono::duration<double>(Clock::now() - t0).count(),
                  std::nullopt,
                  std::nullopt,
                  "source decoding ceiling (no pg_recvlogical found)"};
}

void Bench::stream() {
    // The reference's slot starts where pgtide's is once the idle run below has caught up.
    sql("SELECT pg_create_logical_replication_slot('" + std::string(kRecvSlot) + "', 'pgoutput')");
    const auto [idle, idle_out] = run_pgtide("stream, nothing to apply yet");
    const std::string start_lsn = value("SELECT pg_current_wal_insert_lsn()");
    io::log_info("pgtide bench: stream: writing changes with pgtide stopped",
                 {{"changes", std::to_string(changes_)}});
    const auto t0 = Clock::now();
    sql("SET synchronous_commit = off");
    long_sql("CALL pgtide_bench.changes(" + std::to_string(changes_) + ", " +
             std::to_string(kStreamTxn) + ", 1, " + std::to_string(narrow_rows_ + 1) + ")");
    sql("RESET synchronous_commit");
    const double write_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string end_lsn = value("SELECT pg_current_wal_insert_lsn()");
    const std::int64_t wal_bytes =
        std::stoll(value("SELECT pg_wal_lsn_diff('" + end_lsn + "', '" + start_lsn + "')::bigint"));
    const auto [run, out] = run_pgtide("stream");
    const bool ok = verify({"narrow"}, "stream");
    if (const auto changes = json_integer(out, "changes"); changes && *changes != changes_) {
        io::log_warn("pgtide bench: pgtide reported changes=" + std::to_string(*changes) + ", " +
                     std::to_string(changes_) + " were written");
    }
    Scenario s;
    s.key = "stream_txn" + std::to_string(kStreamTxn);
    s.verified = ok;
    s.figures.push_back(Figure{"pgtide run --once (stream)", changes_, wal_bytes, run.seconds,
                               run.cpu_seconds, run.peak_rss_mb, ok ? "" : "REPLICATED WRONGLY"});
    s.figures.push_back(stream_reference(end_lsn, wal_bytes));
    s.title = std::string("Stream into ") + (sqlite_path_.empty() ? "PostgreSQL" : "SQLite") +
              ": " + std::to_string(changes_) + " changes on narrow in transactions of " +
              std::to_string(kStreamTxn) + " (" + fixed(double(wal_bytes) / 1e6, 1) +
              " MB of WAL; MB/s counts WAL bytes; pgtide --once with nothing to apply takes " +
              fixed(idle.seconds, 2) + " s of that wall)";
    s.extra = {{"write_seconds", write_seconds},
               {"pgtide_idle_once_seconds", idle.seconds},
               {"wal_bytes", double(wal_bytes)}};
    scenarios_.push_back(std::move(s));
}

// Slots (waiting until no walsender holds them), publication, schema: each only when it is
// there, the schema only with the mark.
void Bench::drop_source_objects() {
    io::PgConnection conn = connect(o_.source_dsn);
    io::PgResult slots = wait(conn.exec("SELECT slot_name FROM pg_replication_slots WHERE "
                                        "database = current_database() AND slot_name IN ('" +
                                        std::string(kSlot) + "', '" + kRecvSlot + "')"));
    if (slots.rows() > 0) {
        replicate::ReplicationConnection repl =
            wait(replicate::ReplicationConnection::connect(o_.source_dsn, kAppName));
        for (int i = 0; i < slots.rows(); ++i) {
            wait(repl.connection().exec("DROP_REPLICATION_SLOT " + quote_ident(slots.get(i, 0)) +
                                        " WAIT"));
        }
    }
    wait(conn.exec("DROP PUBLICATION IF EXISTS pgtide_bench"));
    io::PgResult schema = wait(conn.exec("SELECT obj_description(oid, 'pg_namespace') FROM "
                                         "pg_namespace WHERE nspname = 'pgtide_bench'"));
    if (schema.rows() == 1 && schema.get(0, 0) == kMarker) {
        wait(conn.exec("DROP SCHEMA pgtide_bench CASCADE"));
    }
}

// pgtide's rows for slot pgtide_bench, its metadata tables when the bench made them, and the
// marked schema pgtide_bench.
void Bench::drop_destination_objects() {
    io::PgConnection dest = connect(dest_url_);
    io::PgResult meta = wait(dest.exec("SELECT to_regclass('public._pgtide_checkpoint') IS NOT "
                                       "NULL AND to_regclass('public._pgtide_tables') IS NOT NULL "
                                       "AND to_regclass('public._pgtide_tombstones') IS NOT NULL"));
    if (meta.get(0, 0) == "t") {
        io::PgResult left = wait(dest.exec(
            "BEGIN; DELETE FROM public._pgtide_tombstones WHERE target_table IN (SELECT "
            "target_table FROM public._pgtide_tables WHERE slot_name = 'pgtide_bench'); "
            "DELETE FROM public._pgtide_tables WHERE slot_name = 'pgtide_bench'; "
            "DELETE FROM public._pgtide_checkpoint WHERE slot_name = 'pgtide_bench'; COMMIT; "
            "SELECT (SELECT count(*) FROM public._pgtide_checkpoint) + (SELECT count(*) FROM "
            "public._pgtide_tables) + (SELECT count(*) FROM public._pgtide_tombstones)"));
        if (!destination_had_metadata_ && left.get(0, 0) == "0") {
            wait(dest.exec("DROP TABLE public._pgtide_checkpoint, public._pgtide_tables, "
                           "public._pgtide_tombstones"));
        }
    }
    io::PgResult schema = wait(dest.exec("SELECT obj_description(oid, 'pg_namespace') FROM "
                                         "pg_namespace WHERE nspname = 'pgtide_bench'"));
    if (schema.rows() == 1 && schema.get(0, 0) == kMarker) {
        wait(dest.exec("DROP SCHEMA pgtide_bench CASCADE"));
    }
}

void Bench::cleanup() noexcept {
    g_cleaning.store(true);
    source_.close(); // an interrupted transaction must not hold locks on the schema
    if (owns_source_) {
        try {
            drop_source_objects();
        } catch (const std::exception& e) {
            io::log_error(std::string("pgtide bench could not drop what it created on the "
                                      "source: ") +
                          e.what() +
                          "; drop by hand: SELECT pg_drop_replication_slot(slot_name) FROM "
                          "pg_replication_slots WHERE slot_name IN ('pgtide_bench', "
                          "'pgtide_bench_recv'); DROP PUBLICATION pgtide_bench; DROP SCHEMA "
                          "pgtide_bench CASCADE");
        }
    }
    if (owns_destination_) {
        try {
            drop_destination_objects();
        } catch (const std::exception& e) {
            io::log_error(std::string("pgtide bench could not drop what pgtide created in the "
                                      "destination: ") +
                          e.what() + "; drop schema pgtide_bench there by hand");
        }
    }
    if (owns_source_ && o_.to && !sqlite_path_.empty() && std::filesystem::exists(sqlite_path_)) {
        io::log_info("pgtide bench: kept the destination file", {{"path", sqlite_path_}});
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    if (ec) {
        io::log_warn("pgtide bench could not remove its temporary directory",
                     {{"path", dir_}, {"error", ec.message()}});
    }
}

bool Bench::verified() const {
    return std::all_of(scenarios_.begin(), scenarios_.end(),
                       [](const Scenario& s) { return s.verified; });
}

std::string Bench::text() const {
    std::string o = "pgtide bench — scale " + short_number(o_.scale) + ", PostgreSQL " +
                    server_version_ + ", SQLite " + sqlite3_libversion() + ", " +
                    std::to_string(std::thread::hardware_concurrency()) + " cores, load " +
                    fixed(load_at_start_, 2) +
                    " at start; destination: " + pgtide_destination_name() + "\n";
    for (const Scenario& s : scenarios_) {
        o += "\n" + s.title + (s.verified ? "" : "   *** REPLICATED WRONGLY ***") + "\n";
        for (const auto& line : table_lines(s)) {
            o += "  " + line + "\n";
        }
    }
    for (const auto& [what, why] : skipped_) {
        o += "\nskipped: " + what + ": " + why + "\n";
    }
    return o;
}

std::string Bench::json() const {
    std::string o = "{\"scale\":" + short_number(o_.scale) +
                    ",\"postgresql\":" + json_quote(server_version_) +
                    ",\"sqlite\":" + json_quote(sqlite3_libversion()) +
                    ",\"cores\":" + std::to_string(std::thread::hardware_concurrency()) +
                    ",\"loadavg_at_start\":" + fixed(load_at_start_, 2) +
                    ",\"destination\":" + json_quote(pgtide_destination_name()) +
                    ",\"narrow_rows\":" + std::to_string(narrow_rows_) +
                    ",\"wide_rows\":" + std::to_string(wide_rows_) +
                    ",\"changes\":" + std::to_string(changes_) +
                    ",\"verified\":" + (verified() ? "true" : "false") + ",\"scenarios\":[";
    for (std::size_t i = 0; i < scenarios_.size(); ++i) {
        const Scenario& s = scenarios_[i];
        o += (i > 0 ? "," : "");
        o += "{\"scenario\":" + json_quote(s.key) + ",\"title\":" + json_quote(s.title) +
             ",\"verified\":" + (s.verified ? "true" : "false");
        for (const auto& [key, number] : s.extra) {
            o += ",\"" + key + "\":" + json_number(number);
        }
        o += ",\"figures\":[";
        for (std::size_t j = 0; j < s.figures.size(); ++j) {
            const Figure& f = s.figures[j];
            o += (j > 0 ? "," : "");
            o += "{\"name\":" + json_quote(f.name) + ",\"rows\":" + std::to_string(f.rows) +
                 ",\"bytes\":" + std::to_string(f.bytes) +
                 ",\"seconds\":" + json_number(f.seconds) +
                 ",\"rows_per_s\":" + json_number(f.rows_per_s()) +
                 ",\"mb_per_s\":" + json_number(f.mb_per_s()) +
                 ",\"cpu_seconds\":" + json_optional(f.cpu_seconds) +
                 ",\"peak_rss_mb\":" + json_optional(f.peak_rss_mb) +
                 ",\"pgtide_over_this\":" + json_number(ratio(s, f)) +
                 ",\"note\":" + json_quote(f.note) + "}";
        }
        o += "]}";
    }
    o += "],\"skipped\":{";
    for (std::size_t i = 0; i < skipped_.size(); ++i) {
        o += (i > 0 ? "," : "") + json_quote(skipped_[i].first) + ":" +
             json_quote(skipped_[i].second);
    }
    return o + "}}\n";
}

} // namespace

BenchOptions parse_bench_args(const std::vector<std::string>& args) {
    BenchOptions o;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string_view arg = args[i];
        if (arg == "-h" || arg == "--help") {
            o.help = true;
            continue;
        }
        if (!arg.starts_with("--")) {
            throw UsageError("unexpected argument \"" + std::string(arg) +
                             "\": pgtide bench takes only options (--source, --scale, --to, "
                             "--json); see pgtide bench --help");
        }
        const std::size_t equals = arg.find('=');
        const std::string name(arg.substr(2, equals == arg.npos ? arg.npos : equals - 2));
        const auto take = [&](const char* value_name) {
            std::string v;
            if (equals != arg.npos) {
                v = arg.substr(equals + 1);
            } else if (i + 1 < args.size()) {
                v = args[++i];
            } else {
                throw UsageError("--" + name + " needs a value: --" + name + " " + value_name);
            }
            if (v.empty()) {
                throw UsageError("--" + name + " needs a non-empty " + value_name);
            }
            return v;
        };
        if (name == "source") {
            o.source_dsn = take("DSN");
        } else if (name == "scale") {
            const std::string v = take("F");
            double scale = 0;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), scale);
            if (ec != std::errc() || end != v.data() + v.size() || !(scale > 0) || scale > 100) {
                throw UsageError("--scale must be a number above 0 and at most 100 (found \"" + v +
                                 "\")");
            }
            o.scale = scale;
        } else if (name == "to") {
            DestinationConfig d;
            d.url = take("URL");
            if (!(d.is_sqlite() && !d.sqlite_path().empty()) && !d.is_postgresql()) {
                throw UsageError("--to must be sqlite:PATH or postgresql://... (found \"" +
                                 redact_dsn(d.url) + "\")");
            }
            o.to = d.url;
        } else if (name == "json") {
            if (equals != arg.npos) {
                throw UsageError("--json does not take a value");
            }
            o.json = true;
        } else {
            throw UsageError("unknown option --" + name +
                             " of pgtide bench (it takes --source, --scale, --to, --json); see "
                             "pgtide bench --help");
        }
    }
    if (!o.help && o.source_dsn.empty()) {
        throw UsageError("pgtide bench needs --source DSN: the server to measure on (it creates "
                         "schema pgtide_bench there and drops it afterwards)");
    }
    return o;
}

std::string bench_usage_text() {
    return R"(Usage: pgtide bench --source DSN [--scale F] [--to URL] [--json]

Measures pgtide on your own server, side by side with plain clients, as bench/run does on a
server of its own. It creates schema pgtide_bench (tables narrow and wide, 2,000,000 x F and
300,000 x F rows, generated by the server), publication pgtide_bench and replication slots
pgtide_bench and pgtide_bench_recv, then measures
  snapshot  pgtide run --once copying both tables, next to (a) their binary COPY drained with
            libpq, one connection per table, and (b) for SQLite, the same rows inserted by one
            prepared INSERT into a scratch file (SQLite time only)
  stream    1,000,000 x F changes on narrow (50% updates, 30% inserts, 20% deletes, transactions
            of 10) written while pgtide is stopped, then applied by pgtide run --once, next to
            pg_recvlogical draining the same WAL range
and prints one table per scenario: rows/s, MB/s, wall and CPU seconds, peak RSS, and pgtide's
throughput divided by each reference's. Everything it created is dropped when it ends, also on
error, SIGINT or SIGTERM. It refuses (exit 2) to touch a pgtide_bench schema, publication or
slot it did not create.

Options:
  --source DSN   the server (key=value or URI); it needs wal_level = logical, a role with
                 REPLICATION and CREATE on the database, and 2 free replication slots
  --scale F      the data size, 0 < F <= 100 (default 0.1)
  --to URL       sqlite:PATH (a new file, kept afterwards) or postgresql://... (another
                 database; schema pgtide_bench there is dropped afterwards); default: a
                 temporary SQLite file in $TMPDIR, removed afterwards
  --json         print one JSON object instead of the tables
  -h, --help     this text

Exit codes: 0 ok, 1 pgtide replicated wrongly, interrupted or another error, 2 usage or a
            pgtide_bench name that is not the bench's, 3 source not ready.
)";
}

int run_bench(const BenchOptions& options) {
    if (options.help) {
        std::fputs(bench_usage_text().c_str(), stdout);
        return 0;
    }
    split_password(options.source_dsn); // a DSN libpq cannot parse is a usage error
    SignalScope signals;
    Bench bench(options);
    std::exception_ptr error;
    try {
        bench.prepare();
        bench.snapshot();
        bench.stream();
    } catch (...) {
        error = std::current_exception();
    }
    bench.cleanup();
    if (g_interrupted.load()) {
        throw DefiniteError(ExitCode::Other, "pgtide bench was interrupted; it dropped what it "
                                             "had created");
    }
    if (error) {
        std::rethrow_exception(error);
    }
    const std::string report = options.json ? bench.json() : bench.text();
    std::fputs(report.c_str(), stdout);
    std::fflush(stdout);
    if (!bench.verified()) {
        io::log_error("pgtide bench: pgtide replicated wrongly (see the tables and the log)");
        return int(ExitCode::Other);
    }
    return 0;
}

} // namespace pgtide::app
