// PgServer: initdb, start, stop and query a throw-away PostgreSQL cluster for tests.
//
// Lifecycle. The constructor makes a temp dir (socket, server.log, data/), copies into it a
// cluster initdb made once for this installation (initdb_template), appends the test settings
// to postgresql.conf and starts the server on a port that was free a moment ago (and tries
// another one if someone took it meanwhile). Before that it forks a watchdog in its own session
// that waits for EOF on a pipe only this process holds: when the test process ends in any way,
// abort and SIGKILL included, the watchdog stops the server (immediate) and removes the
// directory, so a crashed test never leaves a postmaster behind.
// The destructor does the same itself and then lets the watchdog go.
//
// PostgreSQL refuses to run as root: when the tests do, initdb and pg_ctl run through
// `runuser -u pgtide_test --` and the temp dir belongs to that user.
#include "tests/support/pg_server.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <arpa/inet.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/command.hpp"

namespace pgtide::testing {

namespace {

constexpr const char* kDefaultBinDir = "/usr/lib/postgresql/15/bin";
constexpr const char* kTestUser = "pgtide_test";
constexpr const char* kSuperuser = "postgres";
constexpr int kPortAttempts = 5;

bool is_root() {
    return geteuid() == 0;
}

struct UserIds {
    uid_t uid;
    gid_t gid;
};

// The unprivileged user the server runs as when we are root; created once, under a lock so
// that parallel test processes do not race useradd.
UserIds ensure_test_user() {
    const int lock = open("/tmp/pgtide_test-useradd.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock >= 0) {
        flock(lock, LOCK_EX);
    }
    if (getpwnam(kTestUser) == nullptr) {
        const auto r = run_command({"useradd", "--system", "--no-create-home", kTestUser});
        if (r.exit_code != 0 && getpwnam(kTestUser) == nullptr) {
            if (lock >= 0) {
                close(lock);
            }
            throw std::runtime_error("useradd " + std::string(kTestUser) + " failed: " + r.output);
        }
    }
    if (lock >= 0) {
        close(lock);
    }
    const passwd* pw = getpwnam(kTestUser);
    if (pw == nullptr) {
        throw std::runtime_error("user " + std::string(kTestUser) + " not found after useradd");
    }
    return {pw->pw_uid, pw->pw_gid};
}

// argv run as the server's owner: itself, or through runuser when we are root.
std::vector<std::string> as_server_user(std::vector<std::string> argv) {
    if (!is_root()) {
        return argv;
    }
    std::vector<std::string> wrapped{"runuser", "-u", kTestUser, "--"};
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    return wrapped;
}

// Every component of path can be traversed by others (so the server user reaches the socket).
bool traversable_by_others(const std::filesystem::path& path) {
    std::filesystem::path p;
    for (const auto& part : std::filesystem::absolute(path)) {
        p /= part;
        struct stat st {};
        if (stat(p.c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0) {
            return false;
        }
    }
    return true;
}

// Where server directories go: $TMPDIR, else /tmp (also when root and the server user could
// not reach its socket in $TMPDIR).
std::string server_dir_base() {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
    if (is_root() && !traversable_by_others(base)) {
        base = "/tmp";
    }
    return base;
}

std::string make_server_dir() {
    std::string dir;
    if (is_root()) {
        dir = server_dir_base() + "/pgtide-pg-XXXXXX";
        if (mkdtemp(dir.data()) == nullptr) {
            throw std::runtime_error("mkdtemp " + dir + ": " + std::strerror(errno));
        }
        const UserIds ids = ensure_test_user();
        if (chown(dir.c_str(), ids.uid, ids.gid) != 0) {
            throw std::runtime_error("chown " + dir + ": " + std::strerror(errno));
        }
    } else {
        dir = make_temp_dir("pgtide-pg");
    }
    chmod(dir.c_str(), 0755);
    return dir;
}

std::vector<std::string> initdb_argv(const std::string& bin_dir, const std::string& data_dir) {
    return {bin_dir + "/initdb", "-D",         data_dir,   "--auth=trust", "-U", kSuperuser,
            "--encoding=UTF8",   "--locale=C", "--no-sync"};
}

// The data directory of a cluster initdb made once for this PostgreSQL installation, which each
// server copies instead of running initdb: ctest runs every test in a process of its own, so
// each starts its own servers, and initdb takes about 0.9 s where a copy takes 0.2 s. Made
// under a lock by the first test process that needs it (beside the server directories, named
// after the binaries' path, size and time, so that another build of PostgreSQL gets its own);
// the file "ready" marks it complete. Returns "" when it cannot be made (the caller runs initdb
// itself).
std::string initdb_template(const std::string& bin_dir) {
    struct stat st {};
    if (stat((bin_dir + "/postgres").c_str(), &st) != 0) {
        return "";
    }
    const std::string key = bin_dir + "|" + std::to_string(st.st_size) + "|" +
                            std::to_string(st.st_mtime) + "|" + std::to_string(geteuid());
    char name[64];
    std::snprintf(name, sizeof name, "pgtide-pg-template-%016zx", std::hash<std::string>{}(key));
    const std::string dir = server_dir_base() + "/" + name;
    const std::string data = dir + "/data";
    const int lock = open((dir + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0) {
        return "";
    }
    flock(lock, LOCK_EX);
    std::error_code ec;
    if (!std::filesystem::exists(dir + "/ready", ec)) {
        std::filesystem::remove_all(dir, ec);
        bool made = std::filesystem::create_directory(dir, ec);
        if (made && is_root()) {
            const UserIds ids = ensure_test_user();
            made = chown(dir.c_str(), ids.uid, ids.gid) == 0;
        }
        if (made) {
            const auto r = run_command(as_server_user(initdb_argv(bin_dir, data)), dir);
            made = r.exit_code == 0 && std::ofstream(dir + "/ready").good();
        }
        if (!made) {
            std::filesystem::remove_all(dir, ec);
            close(lock);
            return "";
        }
    }
    close(lock);
    return data;
}

// A TCP port on localhost that was free when asked.
int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        const int e = errno;
        close(fd);
        throw std::runtime_error(std::string("bind to a free port: ") + std::strerror(e));
    }
    close(fd);
    return ntohs(addr.sin_port);
}

// A conninfo value, quoted when it needs to be.
std::string conninfo_value(const std::string& v) {
    if (!v.empty() && v.find_first_of(" '\\") == std::string::npos) {
        return v;
    }
    std::string out = "'";
    for (char c : v) {
        if (c == '\'' || c == '\\') {
            out += '\\';
        }
        out += c;
    }
    return out + "'";
}

struct ConnCloser {
    void operator()(PGconn* c) const { PQfinish(c); }
};
struct ResultCloser {
    void operator()(PGresult* r) const { PQclear(r); }
};
using Conn = std::unique_ptr<PGconn, ConnCloser>;
using Result = std::unique_ptr<PGresult, ResultCloser>;

void ignore_notice(void*, const char*) {}

Conn connect(const std::string& dsn) {
    Conn conn{PQconnectdb(dsn.c_str())};
    if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
        throw std::runtime_error("connect to \"" + dsn +
                                 "\": " + (conn ? PQerrorMessage(conn.get()) : "out of memory"));
    }
    PQsetNoticeProcessor(conn.get(), ignore_notice, nullptr);
    return conn;
}

Result run_sql(const std::string& dsn, const std::string& sql) {
    Conn conn = connect(dsn);
    Result res{PQexec(conn.get(), sql.c_str())};
    const auto status = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK && status != PGRES_EMPTY_QUERY) {
        std::string msg = res ? PQresultErrorMessage(res.get()) : PQerrorMessage(conn.get());
        while (!msg.empty() && msg.back() == '\n') {
            msg.pop_back();
        }
        throw std::runtime_error(msg + "\n  while running: " + sql);
    }
    return res;
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) {
        s.pop_back();
    }
    return s;
}

} // namespace

std::string pg_bin_dir() {
    const char* env = std::getenv("PGTIDE_PG_BIN");
    return (env != nullptr && *env != '\0') ? env : kDefaultBinDir;
}

std::string other_pg_bin_dir() {
    const char* env = std::getenv("PGTIDE_PG_BIN_OTHER");
    return env != nullptr ? env : "";
}

std::optional<std::string> missing_pg_binary() {
    return missing_pg_binary(pg_bin_dir());
}

std::optional<std::string> missing_pg_binary(const std::string& dir) {
    for (const char* name : {"initdb", "pg_ctl", "postgres"}) {
        const std::string path = dir + "/" + name;
        if (access(path.c_str(), X_OK) != 0) {
            return path;
        }
    }
    return std::nullopt;
}

bool running_in_ci() {
    const char* ci = std::getenv("CI");
    if (ci == nullptr) {
        return false;
    }
    const std::string v = ci;
    return v == "true" || v == "1" || v == "TRUE" || v == "True";
}

namespace {

/// The shared server, once a test has started it.
PgServer* g_shared = nullptr;

/// Drops the shared server's idle replication slots after each test. Tests leave their slots
/// behind (a killed pgtide cannot drop its own); ctest runs one test per process, but a whole
/// binary run in one process would otherwise run out of max_replication_slots.
class DropIdleSlotsAfterEachTest : public ::testing::EmptyTestEventListener {
    void OnTestEnd(const ::testing::TestInfo& test) override {
        if (g_shared == nullptr || !g_shared->is_running()) {
            return;
        }
        try {
            g_shared->exec("postgres", "SELECT pg_drop_replication_slot(slot_name) "
                                       "FROM pg_replication_slots WHERE NOT active");
        } catch (const std::exception& e) {
            // A slot whose walsender had not yet exited; the next test's end drops it.
            std::cerr << "note: not every idle replication slot " << test.name()
                      << " left could be dropped: " << e.what() << "\n";
        }
    }
};

const bool g_listening = [] {
    ::testing::UnitTest::GetInstance()->listeners().Append(new DropIdleSlotsAfterEachTest);
    return true;
}();

} // namespace

PgServer& PgServer::shared() {
    // A static's destructor runs at exit(), also after failed tests; the watchdog covers the
    // deaths that skip it.
    static PgServer server;
    g_shared = &server;
    return server;
}

PgServer::PgServer(std::vector<std::string> extra_settings)
    : PgServer(std::move(extra_settings), pg_bin_dir()) {}

PgServer::PgServer(std::vector<std::string> extra_settings, std::string bin_dir)
    : bin_dir_(std::move(bin_dir)) {
    if (const auto missing = missing_pg_binary(bin_dir_)) {
        throw std::runtime_error("PostgreSQL binary missing: " + *missing +
                                 " (set PGTIDE_PG_BIN to a directory with initdb, pg_ctl, "
                                 "postgres)");
    }
    owner_pid_ = getpid();
    dir_ = make_server_dir();
    data_dir_ = dir_ + "/data";
    log_file_ = dir_ + "/server.log";
    try {
        start_watchdog();
        const std::string templ = initdb_template(bin_dir_);
        if (templ.empty() ||
            run_command(as_server_user({"cp", "-a", templ, data_dir_}), dir_).exit_code != 0) {
            std::error_code ec;
            std::filesystem::remove_all(data_dir_, ec);
            run_pg(initdb_argv(bin_dir_, data_dir_), "initdb");
        }
        major_version_ = std::atoi(read_file(data_dir_ + "/PG_VERSION").c_str());

        std::ofstream conf(data_dir_ + "/postgresql.conf", std::ios::app);
        conf << "\n# pgtide test fixture\n"
             << "listen_addresses = 'localhost'\n"
             << "unix_socket_directories = '" << dir_ << "'\n"
             << "wal_level = logical\n"
             << "max_replication_slots = 20\n"
             << "max_wal_senders = 20\n"
             << "fsync = off\n"
             << "shared_buffers = 64MB\n"
             << "max_connections = 100\n";
        for (const auto& s : extra_settings) {
            conf << s << "\n";
        }
        conf.close();
        if (!conf) {
            throw std::runtime_error("cannot write " + data_dir_ + "/postgresql.conf");
        }

        // The port was free a moment ago; if another process took it since, take another.
        for (int attempt = 1;; ++attempt) {
            port_ = free_port();
            std::ofstream(data_dir_ + "/postgresql.conf", std::ios::app)
                << "port = " << port_ << "\n";
            try {
                start();
                break;
            } catch (const std::runtime_error&) {
                const std::string log = read_file(log_file_);
                const bool port_taken = log.find("already in use") != std::string::npos ||
                                        log.find("could not bind") != std::string::npos;
                if (!port_taken || attempt == kPortAttempts) {
                    throw;
                }
            }
        }
    } catch (...) {
        if (running_) {
            run_command(as_server_user({bin_dir_ + "/pg_ctl", "stop", "-D", data_dir_, "-m",
                                        "immediate", "-w"}),
                        dir_);
        }
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        if (watchdog_fd_ >= 0) {
            close(watchdog_fd_);
            waitpid(watchdog_pid_, nullptr, 0);
        }
        throw;
    }
}

PgServer::~PgServer() {
    if (getpid() != owner_pid_) {
        return;
    }
    if (running_) {
        const auto r = run_command(as_server_user({bin_dir_ + "/pg_ctl", "stop", "-D", data_dir_,
                                                   "-m", "immediate", "-w"}),
                                   dir_);
        if (r.exit_code != 0) {
            std::cerr << "PgServer: pg_ctl stop failed: " << r.output << "\nserver log tail:\n"
                      << log_tail() << std::endl;
        }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    if (watchdog_fd_ >= 0) {
        close(watchdog_fd_);
        int status = 0;
        while (waitpid(watchdog_pid_, &status, 0) < 0 && errno == EINTR) {
        }
    }
}

void PgServer::start_watchdog() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
    }
    // Waits for EOF (the test process is gone, or the destructor let it go), then makes sure
    // nothing is left: the server stopped, the directory removed.
    static const char* const kScript =
        "cat >/dev/null\n"
        "if [ -f \"$2/postmaster.pid\" ]; then\n"
        "  if [ \"$4\" = 1 ]; then runuser -u \"$5\" -- \"$3\" stop -D \"$2\" -m immediate -w\n"
        "  else \"$3\" stop -D \"$2\" -m immediate -w; fi\n"
        "fi >/dev/null 2>&1\n"
        "rm -rf \"$1\"\n";
    const std::string pg_ctl = bin_dir_ + "/pg_ctl";
    const char* argv[] = {"/bin/sh",      "-c",
                          kScript,        "pgtide-pg-watchdog",
                          dir_.c_str(),   data_dir_.c_str(),
                          pg_ctl.c_str(), is_root() ? "1" : "0",
                          kTestUser,      nullptr};
    const pid_t pid = fork();
    if (pid < 0) {
        const int e = errno;
        close(fds[0]);
        close(fds[1]);
        throw std::runtime_error(std::string("fork: ") + std::strerror(e));
    }
    if (pid == 0) {
        setsid(); // neither the terminal's signals nor ctest's group kill reach it
        dup2(fds[0], 0);
        const int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        if (chdir("/") != 0) {
            _exit(1);
        }
        execv("/bin/sh", const_cast<char* const*>(argv));
        _exit(127);
    }
    close(fds[0]);
    watchdog_fd_ = fds[1];
    watchdog_pid_ = pid;
}

void PgServer::run_pg(const std::vector<std::string>& argv, const std::string& what) const {
    const auto r = run_command(as_server_user(argv), dir_);
    if (r.exit_code != 0) {
        throw std::runtime_error(what + " failed (exit " + std::to_string(r.exit_code) + "):\n" +
                                 r.output + "\nserver log tail:\n" + log_tail());
    }
}

std::string PgServer::dsn(const std::string& dbname) const {
    return "host=" + conninfo_value(dir_) + " port=" + std::to_string(port_) +
           " user=" + kSuperuser + " dbname=" + conninfo_value(dbname);
}

std::string PgServer::tcp_dsn(const std::string& dbname) const {
    return "host=localhost port=" + std::to_string(port_) + " user=" + kSuperuser +
           " dbname=" + conninfo_value(dbname);
}

std::string PgServer::create_database() {
    static std::atomic<int> counter{0};
    const std::string name = "t_" + std::to_string(++counter) + "_" + std::to_string(getpid());
    exec("postgres", "CREATE DATABASE " + name);
    return name;
}

void PgServer::exec(const std::string& dbname, const std::string& sql) const {
    run_sql(dsn(dbname), sql);
}

Rows PgServer::query(const std::string& dbname, const std::string& sql) const {
    const Result res = run_sql(dsn(dbname), sql);
    Rows rows;
    const int nrows = PQntuples(res.get());
    const int ncols = PQnfields(res.get());
    rows.reserve(size_t(nrows));
    for (int r = 0; r < nrows; ++r) {
        Row row;
        row.reserve(size_t(ncols));
        for (int c = 0; c < ncols; ++c) {
            if (PQgetisnull(res.get(), r, c)) {
                row.emplace_back(std::nullopt);
            } else {
                row.emplace_back(
                    std::string(PQgetvalue(res.get(), r, c), size_t(PQgetlength(res.get(), r, c))));
            }
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

std::string PgServer::query_value(const std::string& dbname, const std::string& sql) const {
    const Rows rows = query(dbname, sql);
    if (rows.size() != 1 || rows[0].size() != 1 || !rows[0][0]) {
        throw std::runtime_error("expected one non-NULL value (got " + std::to_string(rows.size()) +
                                 " rows) from: " + sql);
    }
    return *rows[0][0];
}

std::string PgServer::current_wal_lsn() const {
    return query_value("postgres", "SELECT pg_current_wal_lsn()::text");
}

void PgServer::stop(const std::string& mode) {
    run_pg({bin_dir_ + "/pg_ctl", "stop", "-D", data_dir_, "-m", mode, "-w", "-t", "120"},
           "pg_ctl stop -m " + mode);
    running_ = false;
}

void PgServer::start() {
    run_pg({bin_dir_ + "/pg_ctl", "start", "-D", data_dir_, "-l", log_file_, "-w", "-t", "120"},
           "pg_ctl start");
    running_ = true;
}

void PgServer::restart(const std::string& mode) {
    stop(mode);
    start();
}

std::string PgServer::log_tail(int lines) const {
    const std::string log = trim(read_file(log_file_));
    size_t pos = log.size();
    for (int i = 0; i < lines && pos != std::string::npos && pos > 0; ++i) {
        pos = log.rfind('\n', pos - 1);
    }
    return pos == std::string::npos ? log : log.substr(pos + 1);
}

void PgTest::SetUp() {
    PGTIDE_REQUIRE_PG();
    dbname_ = pg().create_database();
}

} // namespace pgtide::testing
