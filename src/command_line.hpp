// The command line (DESIGN §6): commands and GNU-style flags, and the Config they select.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "replicate/errors.hpp"
#include "src/config.hpp"

namespace pgtide::app {

enum class Command { Run, Check, Status, Drop, Resync, Bench, Help, Version };

struct CommandLine {
    Command command = Command::Help;
    std::optional<std::string> config_path; // -c / --config
    bool once = false;                      // run
    bool resnapshot = false;                // run
    bool json = false;                      // run, check, status
    bool yes = false;                       // drop (required)
    bool wait = false;                      // resync
    std::optional<std::string> source_dsn;  // --source
    std::vector<std::string> publications;  // --publication, repeatable
    std::optional<std::string> slot;        // --slot
    std::optional<std::string> to;          // --to sqlite:PATH | postgresql://...
    std::optional<std::string> log_format;  // --log-format text|json
    std::optional<std::string> log_level;   // --log-level debug|info|warn|error
    std::vector<std::string> tables;        // resync TABLE..., qualified ("public.orders")
    std::vector<std::string> bench_args;    // everything after `bench`, untouched
};

/// A command line that cannot be run. Exit code 2. The message is one line with a short hint.
class UsageError : public replicate::DefiniteError {
public:
    explicit UsageError(const std::string& message)
        : replicate::DefiniteError(replicate::ExitCode::Usage, message) {}
};

/// Parses `pgtide COMMAND [OPTIONS] [ARGS]`: `--flag VALUE`, `--flag=VALUE`, `-c FILE`, `-cFILE`,
/// `--` ends the options. `-h`/`--help` anywhere (before `bench`) selects Command::Help and
/// `-V`/`--version` Command::Version. A repeated flag's last value wins, except --publication,
/// which accumulates. `drop` requires --yes; `resync` at least one TABLE. Throws UsageError for an
/// unknown command or flag, a missing or unexpected value, a flag that the command does not take,
/// or a bad --log-format/--log-level word.
CommandLine parse_command_line(int argc, const char* const* argv);

/// The help text: commands, flags and exit codes.
std::string usage_text();

/// The configuration for the command: the -c file when given (else the defaults), overridden by the
/// flags (--publication replaces the file's list), then validate()d. Throws ConfigError.
Config build_config(const CommandLine& command_line);

} // namespace pgtide::app
