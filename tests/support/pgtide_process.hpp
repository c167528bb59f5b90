// PgtideProcess: the pgtide binary run as a child of a test, its output kept in files.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace pgtide::testing {

/// The pgtide binary under test: $PGTIDE_BINARY_OVERRIDE if set, else the one CMake built.
std::string pgtide_binary();

/// A running pgtide (fork/execv of pgtide_binary() with args; stdin /dev/null, stdout and
/// stderr to files in a temp dir). The destructor SIGKILLs it if it still runs, reaps it and
/// removes the files.
class PgtideProcess {
public:
    /// Starts pgtide with args (argv[1..]); env holds extra "NAME=value" entries that override
    /// the inherited environment. Throws std::runtime_error if it cannot fork.
    explicit PgtideProcess(std::vector<std::string> args, std::vector<std::string> env = {});
    ~PgtideProcess();
    PgtideProcess(const PgtideProcess&) = delete;
    PgtideProcess& operator=(const PgtideProcess&) = delete;

    /// Blocks until it exits; its exit code, or 128 + the signal that ended it. Idempotent.
    int wait();
    /// Like wait(), but gives up after timeout and returns nullopt (a guard, not a pacing tool).
    std::optional<int> wait_for(std::chrono::milliseconds timeout);
    /// Sends sig (no-op once it has been reaped).
    void kill(int sig);
    /// True until it has exited (reaps it when it has).
    bool running();
    int pid() const { return pid_; }
    /// Its peak resident set in KiB (getrusage's ru_maxrss), once it has been reaped.
    std::optional<long> peak_rss_kb() const { return peak_rss_kb_; }

    /// Everything it has written so far.
    std::string stdout_text() const;
    std::string stderr_text() const;

    /// Runs pgtide to completion; its exit code, with its output in out/err when given.
    static int run(std::vector<std::string> args, std::string* out = nullptr,
                   std::string* err = nullptr);

private:
    bool reap(bool block);

    std::string dir_;
    int pid_ = -1;
    std::optional<int> exit_code_;
    std::optional<long> peak_rss_kb_;
};

} // namespace pgtide::testing
