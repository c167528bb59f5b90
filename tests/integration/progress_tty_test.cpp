// The progress display: on a terminal, pgtide redraws status lines in place (per-table snapshot
// progress, then the stream); without one, its stderr holds plain log lines only.
#include <chrono>
#include <cstring>

#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/replication_test.hpp"

namespace pgtide::testing {
namespace {

using namespace std::chrono_literals;

/// Runs pgtide with `args` on a new pseudo-terminal; everything it wrote there, and its exit code.
std::pair<std::string, int> run_on_terminal(std::vector<std::string> args) {
    const std::string binary = pgtide_binary();
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    int master = -1;
    struct winsize size {};
    size.ws_row = 40;
    size.ws_col = 200;
    const pid_t pid = forkpty(&master, nullptr, nullptr, &size);
    if (pid < 0) {
        throw std::runtime_error(std::string("forkpty: ") + std::strerror(errno));
    }
    if (pid == 0) {
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    for (;;) {
        pollfd p{master, POLLIN, 0};
        const int ready = ::poll(&p, 1, 100);
        if (ready > 0) {
            char buf[4096];
            const ssize_t n = ::read(master, buf, sizeof buf);
            if (n <= 0) {
                break; // EIO: the child closed the terminal
            }
            out.append(buf, std::size_t(n));
        }
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            break;
        }
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(master);
    return {out, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
}

class ProgressDisplay : public ReplicationTest {};

TEST_F(ProgressDisplay, TerminalShowsLiveSnapshotProgressAndPipesDoNot) {
    PGTIDE_REQUIRE_PG();
    // Big enough that the copy outlasts the 0.1 s within which a new phase is drawn (it took
    // 0.43 s in CI, shorter than one 0.5 s redraw, which once hid the snapshot altogether).
    exec("CREATE TABLE big (id bigint PRIMARY KEY, a int, c text);"
         "INSERT INTO big SELECT g, g % 1000, repeat('x', 40) FROM generate_series(1, 600000) g;"
         "ANALYZE big;"
         "CREATE PUBLICATION pub FOR TABLE big");
    const auto [out, code] = run_on_terminal(run_args(true));
    ASSERT_EQ(code, 0) << out;
    EXPECT_NE(out.find("pgtide: snapshot (epoch 1): 0/1 tables copied"), std::string::npos) << out;
    EXPECT_NE(out.find("  public.big  "), std::string::npos) << out;
    EXPECT_NE(out.find(" / ~600,000 rows ("), std::string::npos) << out;
    EXPECT_NE(out.find("rows/s"), std::string::npos) << out;
    EXPECT_NE(out.find("\x1b[2K"), std::string::npos) << "status lines are redrawn in place";
    EXPECT_NE(out.find("snapshot complete"), std::string::npos) << out;

    // Not a terminal: log lines only, no escape sequences.
    exec("INSERT INTO big VALUES (0, 0, 'late')");
    std::string piped_out;
    std::string piped_err;
    ASSERT_EQ(PgtideProcess::run(run_args(true), &piped_out, &piped_err), 0) << piped_err;
    EXPECT_EQ(piped_err.find('\x1b'), std::string::npos) << piped_err;
    EXPECT_EQ(piped_err.find("pgtide: snapshot"), std::string::npos) << piped_err;
}

} // namespace
} // namespace pgtide::testing
