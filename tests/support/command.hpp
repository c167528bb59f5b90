// Small process and file helpers shared by the test fixtures (fork/exec, temp dirs).
#pragma once

#include <string>
#include <vector>

namespace pgtide::testing {

/// What a finished command left: its exit code (128 + signal when killed) and its stdout and
/// stderr interleaved.
struct CommandResult {
    int exit_code = 0;
    std::string output;
};

/// Runs argv (argv[0] looked up in PATH) with stdin from /dev/null, in cwd when not empty, and
/// waits for it. Descendants that keep running (a postmaster) never block the caller. Throws
/// std::runtime_error when it cannot fork.
CommandResult run_command(const std::vector<std::string>& argv, const std::string& cwd = "");

/// Exit code of a waitpid() status: the code, or 128 + the signal.
int exit_code_of(int wait_status);

/// A new directory under $TMPDIR (or /tmp) named prefix-XXXXXX; returns its path.
std::string make_temp_dir(const std::string& prefix);

/// The whole file, or "" when it cannot be read.
std::string read_file(const std::string& path);

} // namespace pgtide::testing
