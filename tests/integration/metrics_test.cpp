// End-to-end: `[metrics] listen` serves Prometheus text at /metrics while `pgtide run` runs.
#include <chrono>
#include <csignal>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "tests/support/pgtide_process.hpp"
#include "tests/support/replication_test.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

using namespace std::chrono_literals;

// A port nobody listens on right now (the kernel's choice for port 0).
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        throw std::runtime_error("cannot find a free port");
    }
    ::close(fd);
    return ntohs(addr.sin_port);
}

// `GET path` over a plain socket; the whole response, or nullopt when nobody answers.
std::optional<std::string> http_get(int port, const std::string& path) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return std::nullopt;
    }
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(fd);
        return std::nullopt;
    }
    const std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
        ::close(fd);
        return std::nullopt;
    }
    std::string out;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            break;
        }
        out.append(buf, std::size_t(n));
    }
    ::close(fd);
    return out;
}

// A small parser of the Prometheus text format: samples by "name{labels}", and the check that
// every sample belongs to a family announced by HELP and TYPE lines.
struct Scrape {
    std::map<std::string, std::string> samples;
    std::map<std::string, std::string> types; // family -> counter, gauge, histogram
    std::vector<std::string> problems;

    static Scrape parse(const std::string& body) {
        Scrape s;
        std::map<std::string, bool> help;
        std::istringstream in(body);
        std::string line;
        while (std::getline(in, line)) {
            if (line.empty()) {
                continue;
            }
            std::istringstream words(line);
            std::string first;
            words >> first;
            if (first == "#") {
                std::string kind;
                std::string family;
                words >> kind >> family;
                if (kind == "HELP") {
                    help[family] = true;
                } else if (kind == "TYPE") {
                    words >> s.types[family];
                }
                continue;
            }
            const std::size_t space = line.rfind(' ');
            const std::string key = line.substr(0, space);
            s.samples[key] = line.substr(space + 1);
            std::string family = key.substr(0, key.find('{'));
            for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
                const std::string base = family.substr(0, family.size() - suffix.size());
                const auto type = s.types.find(base);
                if (family.ends_with(suffix) && type != s.types.end() &&
                    type->second == "histogram") {
                    family = base;
                }
            }
            if (!help[family] || s.types.count(family) == 0) {
                s.problems.push_back("no HELP/TYPE for " + key);
            }
            if (family.rfind("pgtide_", 0) != 0) {
                s.problems.push_back("not prefixed pgtide_: " + key);
            }
        }
        return s;
    }

    std::string at(const std::string& key) const {
        const auto it = samples.find(key);
        return it == samples.end() ? "<missing>" : it->second;
    }
};

class Metrics : public ReplicationTest {
protected:
    std::string config(int port) const {
        const auto path = (dir_ / "pgtide.toml").string();
        std::ofstream f(path);
        f << "[source]\ndsn = \"" << dsn() << "\"\npublications = [\"pub\"]\nslot = \"" << slot()
          << "\"\n[destination]\nurl = \"sqlite:" << sqlite_path_
          << "\"\n[metrics]\nlisten = \"127.0.0.1:" << port << "\"\n";
        return path;
    }

    /// The body of /metrics, split from the response after checking its status line.
    static std::optional<std::string> metrics_body(int port) {
        const auto response = http_get(port, "/metrics");
        if (!response || response->rfind("HTTP/1.1 200 OK\r\n", 0) != 0) {
            return std::nullopt;
        }
        return response->substr(response->find("\r\n\r\n") + 4);
    }

    /// Bounded wait until the scrape says `key` is `value`; the last scrape.
    Scrape wait_for_sample(int port, const std::string& key, const std::string& value) const {
        Scrape last;
        wait_for([&] {
            if (const auto body = metrics_body(port)) {
                last = Scrape::parse(*body);
            }
            return last.at(key) == value;
        });
        return last;
    }

    std::string checkpoint_lsn() const {
        return SqliteFile(sqlite_path_).value("SELECT lsn FROM _pgtide_checkpoint");
    }
};

TEST_F(Metrics, CountsWhatTheRunAppliedAndRefusesABusyPort) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v text)");
    exec("INSERT INTO t SELECT g, 'snap ' || g FROM generate_series(1, 5) g"); // via snapshot
    exec("CREATE PUBLICATION pub FOR TABLE t");
    const int port = free_port();
    const std::string path = config(port);
    PgtideProcess pgtide({"run", "-c", path});
    ASSERT_TRUE(wait_for_dest("SELECT phase FROM _pgtide_checkpoint", "streaming"))
        << pgtide.stderr_text();

    // Ten source transactions of three changes each (an update that keeps its key is one).
    for (int i = 0; i < 10; ++i) {
        const std::string a = std::to_string(100 + i);
        const std::string b = std::to_string(200 + i);
        exec("BEGIN; INSERT INTO t VALUES (" + a + ", 'a'); UPDATE t SET v = 'b' WHERE id = " + a +
             "; INSERT INTO t VALUES (" + b + ", 'c'); COMMIT");
    }
    const std::int64_t written =
        std::stoll(query_value("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"));
    Scrape s = wait_for_sample(port, "pgtide_applied_transactions_total", "10");
    ASSERT_EQ(s.at("pgtide_applied_transactions_total"), "10") << pgtide.stderr_text();
    EXPECT_TRUE(s.problems.empty()) << s.problems.front();

    EXPECT_EQ(s.at("pgtide_applied_changes_total"), "30");
    EXPECT_EQ(s.at("pgtide_rows_copied_total"), "5");
    EXPECT_EQ(s.at("pgtide_tables_copied_total"), "1");
    EXPECT_EQ(s.at("pgtide_snapshot_rows_copied{table=\"public.t\"}"), "5");
    EXPECT_EQ(s.at("pgtide_epoch"), "1");
    EXPECT_EQ(s.at("pgtide_up"), "1");
    EXPECT_EQ(s.at("pgtide_phase{phase=\"streaming\"}"), "1");
    EXPECT_EQ(s.at("pgtide_phase{phase=\"snapshot\"}"), "0");
    EXPECT_EQ(s.at("pgtide_reconnects_total"), "0") << pgtide.stderr_text();
    EXPECT_EQ(s.types["pgtide_applied_changes_total"], "counter");
    EXPECT_EQ(s.types["pgtide_checkpoint_lsn_bytes"], "gauge");
    EXPECT_EQ(s.types["pgtide_destination_commit_seconds"], "histogram");

    // Every destination commit is in the histogram; at least the snapshot's and one stream's.
    const std::int64_t commits = std::stoll(s.at("pgtide_destination_commits_total"));
    EXPECT_GE(commits, 2);
    EXPECT_EQ(s.at("pgtide_destination_commit_seconds_count"), std::to_string(commits));
    EXPECT_EQ(s.at("pgtide_destination_commit_seconds_bucket{le=\"+Inf\"}"),
              std::to_string(commits));

    // The checkpoint gauge is the destination's checkpoint (it may move between two reads).
    const std::string before = checkpoint_lsn();
    s = Scrape::parse(*metrics_body(port));
    const std::string after = checkpoint_lsn();
    const std::string gauge = s.at("pgtide_checkpoint_lsn_bytes");
    EXPECT_TRUE(gauge == before || gauge == after) << gauge << " " << before << " " << after;
    // Positions come from the source: never past what it has written, lag never negative.
    const std::int64_t source_end = std::stoll(s.at("pgtide_source_wal_lsn_bytes"));
    EXPECT_GT(source_end, 0);
    EXPECT_LE(source_end,
              std::stoll(query_value("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")));
    EXPECT_LE(std::stoll(gauge), written);
    EXPECT_GE(std::stoll(s.at("pgtide_replication_lag_bytes")), 0);
    const double lag_seconds = std::stod(s.at("pgtide_replication_lag_seconds"));
    EXPECT_GE(lag_seconds, 0.0);
    EXPECT_LT(lag_seconds, 120.0);

    const auto other = http_get(port, "/other");
    ASSERT_TRUE(other.has_value());
    EXPECT_EQ(other->rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << *other;

    // A second process configured with the same address stops before any replication work.
    std::string out;
    std::string err;
    EXPECT_EQ(PgtideProcess::run({"run", "-c", path}, &out, &err), 2);
    EXPECT_NE(err.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos)
        << err;
    ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();

    // A clean stop ends the server with the run.
    pgtide.kill(SIGTERM);
    const auto code = pgtide.wait_for(30s);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 0) << pgtide.stderr_text();
    EXPECT_FALSE(http_get(port, "/metrics").has_value());
}

// Issue 7: a password given in the DSN (here through ${ENV} in the file) appears nowhere: not in
// any command's output, not in debug-level JSON logs of a run, not in /metrics, not in the error
// of a run that fails.
TEST_F(Metrics, APasswordInTheDsnAppearsInNoOutputLogOrMetric) {
    exec("CREATE TABLE t (id int PRIMARY KEY, v text)");
    exec("INSERT INTO t VALUES (1, 'a')");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    const std::string secret = "Pw4Tide-9f2c";
    const std::string secret_dsn = dsn() + " password=" + secret;
    const int port = free_port();
    const auto path = (dir_ / "secret.toml").string();
    {
        std::ofstream f(path);
        f << "[source]\ndsn = \"${PGTIDE_TEST_SECRET_DSN}\"\npublications = [\"pub\"]\nslot = \""
          << slot() << "\"\n[destination]\nurl = \"sqlite:" << sqlite_path_
          << "\"\n[metrics]\nlisten = \"127.0.0.1:" << port
          << "\"\n[log]\nlevel = \"debug\"\nformat = \"json\"\n";
    }
    const std::vector<std::string> env{"PGTIDE_TEST_SECRET_DSN=" + secret_dsn};
    std::string seen; // everything pgtide printed or served

    {
        PgtideProcess pgtide({"run", "-c", path}, env);
        ASSERT_TRUE(wait_for_dest("SELECT phase FROM _pgtide_checkpoint", "streaming"))
            << pgtide.stderr_text();
        exec("INSERT INTO t VALUES (2, 'b')");
        const Scrape s = wait_for_sample(port, "pgtide_applied_changes_total", "1");
        EXPECT_EQ(s.at("pgtide_applied_changes_total"), "1") << pgtide.stderr_text();
        seen += *metrics_body(port);
        for (const char* command : {"status", "check"}) {
            PgtideProcess other({command, "-c", path, "--json"}, env);
            EXPECT_EQ(other.wait(), 0) << other.stdout_text() << other.stderr_text();
            seen += other.stdout_text() + other.stderr_text();
        }
        pgtide.kill(SIGTERM);
        EXPECT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
        seen += pgtide.stdout_text() + pgtide.stderr_text();
        // The debug log really is there (the grep below reads something).
        EXPECT_NE(pgtide.stderr_text().find("\"level\":\"debug\""), std::string::npos)
            << pgtide.stderr_text();
    }
    {
        // A run that fails at the source: its error names the source, without the password.
        exec("DROP PUBLICATION pub");
        PgtideProcess failing({"run", "--once", "-c", path}, env);
        EXPECT_EQ(failing.wait(), 3) << failing.stderr_text();
        seen += failing.stdout_text() + failing.stderr_text();
        PgtideProcess unreachable(
            {"check", "-c", path},
            {"PGTIDE_TEST_SECRET_DSN=host=127.0.0.1 port=1 password=" + secret});
        EXPECT_EQ(unreachable.wait(), 3) << unreachable.stdout_text();
        EXPECT_NE(unreachable.stdout_text().find("password=***"), std::string::npos)
            << unreachable.stdout_text();
        seen += unreachable.stdout_text() + unreachable.stderr_text();
    }
    EXPECT_GT(seen.size(), 2000u);
    EXPECT_EQ(seen.find(secret), std::string::npos) << seen;
}

} // namespace
} // namespace pgtide::testing
