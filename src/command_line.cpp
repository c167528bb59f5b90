// The command line: commands and GNU-style flags (DESIGN §6), and the Config they select.
#include "src/command_line.hpp"

#include <algorithm>
#include <span>
#include <string_view>
#include <utility>

namespace pgtide::app {
namespace {

struct CommandName {
    std::string_view name;
    Command command;
};

constexpr CommandName kCommands[] = {
    {"run", Command::Run},   {"check", Command::Check},     {"status", Command::Status},
    {"drop", Command::Drop}, {"resync", Command::Resync},   {"bench", Command::Bench},
    {"help", Command::Help}, {"version", Command::Version},
};

std::string_view command_name(Command command) {
    for (const CommandName& c : kCommands) {
        if (c.command == command) {
            return c.name;
        }
    }
    return "?";
}

// Which commands take a flag: a bit per Command.
using CommandSet = unsigned;

constexpr CommandSet bit(Command command) {
    return 1u << static_cast<unsigned>(command);
}

constexpr CommandSet kConfigured = bit(Command::Run) | bit(Command::Check) | bit(Command::Status) |
                                   bit(Command::Drop) | bit(Command::Resync);

enum class Flag {
    Config,
    Source,
    Publication,
    Slot,
    To,
    LogFormat,
    LogLevel,
    Once,
    Resnapshot,
    Json,
    Yes,
    Wait,
    Help,
    Version,
};

struct FlagSpec {
    Flag flag;
    std::string_view long_name;
    char short_name;
    std::string_view value_name; // empty: takes no value
    CommandSet commands;
};

constexpr CommandSet kAll = ~CommandSet{0};

constexpr FlagSpec kFlags[] = {
    {Flag::Config, "config", 'c', "FILE", kConfigured},
    {Flag::Source, "source", 0, "DSN", kConfigured},
    {Flag::Publication, "publication", 0, "NAME", kConfigured},
    {Flag::Slot, "slot", 0, "NAME", kConfigured},
    {Flag::To, "to", 0, "URL", kConfigured},
    {Flag::LogFormat, "log-format", 0, "FORMAT", kConfigured},
    {Flag::LogLevel, "log-level", 0, "LEVEL", kConfigured},
    {Flag::Once, "once", 0, "", bit(Command::Run)},
    {Flag::Resnapshot, "resnapshot", 0, "", bit(Command::Run)},
    {Flag::Json, "json", 0, "", bit(Command::Run) | bit(Command::Check) | bit(Command::Status)},
    {Flag::Yes, "yes", 0, "", bit(Command::Drop)},
    {Flag::Wait, "wait", 0, "", bit(Command::Resync)},
    {Flag::Help, "help", 'h', "", kAll},
    {Flag::Version, "version", 'V', "", kAll},
};

constexpr std::string_view kLogFormats[] = {"text", "json"};
constexpr std::string_view kLogLevels[] = {"debug", "info", "warn", "error"};

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) {
        row[j] = j;
    }
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
            diagonal = above;
        }
    }
    return row[b.size()];
}

// " (did you mean X?)" for the closest candidate within two edits, else "".
template <class Range, class Name>
std::string suggestion(std::string_view typed, const Range& candidates, Name name_of,
                       std::string_view prefix) {
    std::size_t best = 3;
    std::string_view best_name;
    for (const auto& candidate : candidates) {
        const std::string_view name = name_of(candidate);
        const std::size_t distance = edit_distance(typed, name);
        if (distance < best) {
            best = distance;
            best_name = name;
        }
    }
    if (best_name.empty()) {
        return "";
    }
    return " (did you mean " + std::string(prefix) + std::string(best_name) + "?)";
}

std::string commands_taking(const FlagSpec& spec) {
    std::string out;
    for (const CommandName& c : kCommands) {
        if ((spec.commands & bit(c.command)) != 0) {
            out += out.empty() ? "" : ", ";
            out += c.name;
        }
    }
    return out;
}

std::string one_of(std::span<const std::string_view> words) {
    std::string out;
    for (const std::string_view word : words) {
        out += out.empty() ? "" : ", ";
        out += word;
    }
    return out;
}

void check_word(const FlagSpec& spec, const std::string& value,
                std::span<const std::string_view> words) {
    if (std::find(words.begin(), words.end(), value) == words.end()) {
        throw UsageError("--" + std::string(spec.long_name) + " must be one of " + one_of(words) +
                         " (found \"" + value + "\")");
    }
}

// Records one flag; `value` is empty for flags without one.
void apply(CommandLine& cl, const FlagSpec& spec, std::string value) {
    if (!spec.value_name.empty() && value.empty()) {
        throw UsageError("--" + std::string(spec.long_name) + " needs a non-empty " +
                         std::string(spec.value_name));
    }
    switch (spec.flag) {
    case Flag::Config:
        cl.config_path = std::move(value);
        break;
    case Flag::Source:
        cl.source_dsn = std::move(value);
        break;
    case Flag::Publication:
        cl.publications.push_back(std::move(value));
        break;
    case Flag::Slot:
        cl.slot = std::move(value);
        break;
    case Flag::To:
        cl.to = std::move(value);
        break;
    case Flag::LogFormat:
        check_word(spec, value, kLogFormats);
        cl.log_format = std::move(value);
        break;
    case Flag::LogLevel:
        check_word(spec, value, kLogLevels);
        cl.log_level = std::move(value);
        break;
    case Flag::Once:
        cl.once = true;
        break;
    case Flag::Resnapshot:
        cl.resnapshot = true;
        break;
    case Flag::Json:
        cl.json = true;
        break;
    case Flag::Yes:
        cl.yes = true;
        break;
    case Flag::Wait:
        cl.wait = true;
        break;
    case Flag::Help:
    case Flag::Version:
        break;
    }
}

const FlagSpec* find_long(std::string_view name) {
    for (const FlagSpec& spec : kFlags) {
        if (spec.long_name == name) {
            return &spec;
        }
    }
    return nullptr;
}

const FlagSpec* find_short(char name) {
    for (const FlagSpec& spec : kFlags) {
        if (spec.short_name != 0 && spec.short_name == name) {
            return &spec;
        }
    }
    return nullptr;
}

} // namespace

CommandLine parse_command_line(int argc, const char* const* argv) {
    CommandLine cl;
    std::optional<Command> command;
    std::vector<const FlagSpec*> seen;
    bool options_done = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        const bool has_next = i + 1 < argc;
        if (!options_done && arg == "--") {
            options_done = true;
            continue;
        }
        if (!options_done && arg.starts_with("--")) {
            const std::size_t equals = arg.find('=');
            const std::string_view name = arg.substr(2, equals == arg.npos ? arg.npos : equals - 2);
            const FlagSpec* spec = find_long(name);
            if (spec == nullptr) {
                throw UsageError(
                    "unknown option --" + std::string(name) +
                    suggestion(
                        name, kFlags, [](const FlagSpec& s) { return s.long_name; }, "--") +
                    "; see pgtide help");
            }
            std::string value;
            if (spec->value_name.empty()) {
                if (equals != arg.npos) {
                    throw UsageError("--" + std::string(name) + " does not take a value");
                }
            } else if (equals != arg.npos) {
                value = arg.substr(equals + 1);
            } else if (has_next) {
                value = argv[++i];
            } else {
                throw UsageError("--" + std::string(name) + " needs a value: --" +
                                 std::string(name) + " " + std::string(spec->value_name));
            }
            apply(cl, *spec, std::move(value));
            seen.push_back(spec);
            continue;
        }
        if (!options_done && arg.size() > 1 && arg[0] == '-') {
            const FlagSpec* spec = find_short(arg[1]);
            if (spec == nullptr) {
                throw UsageError("unknown option " + std::string(arg.substr(0, 2)) +
                                 "; see pgtide help");
            }
            std::string value;
            if (spec->value_name.empty()) {
                if (arg.size() > 2) {
                    throw UsageError("-" + std::string(1, arg[1]) +
                                     " does not take a value (found " + std::string(arg) + ")");
                }
            } else if (arg.size() > 2) {
                value = arg.substr(2);
            } else if (has_next) {
                value = argv[++i];
            } else {
                throw UsageError("-" + std::string(1, arg[1]) + " needs a value: -" +
                                 std::string(1, arg[1]) + " " + std::string(spec->value_name));
            }
            apply(cl, *spec, std::move(value));
            seen.push_back(spec);
            continue;
        }
        if (!command) {
            const auto found = std::find_if(std::begin(kCommands), std::end(kCommands),
                                            [&](const CommandName& c) { return c.name == arg; });
            if (found == std::end(kCommands)) {
                throw UsageError(
                    "unknown command \"" + std::string(arg) + "\"" +
                    suggestion(
                        arg, kCommands, [](const CommandName& c) { return c.name; }, "") +
                    "; commands: run, check, status, drop, resync, bench, help, version");
            }
            command = found->command;
            if (command == Command::Bench) {
                cl.bench_args.assign(argv + i + 1, argv + argc);
                break;
            }
            continue;
        }
        if (*command == Command::Resync) {
            if (arg.empty()) {
                throw UsageError("pgtide resync: a TABLE must not be empty");
            }
            cl.tables.push_back(qualify_table_name(arg));
            continue;
        }
        if (*command == Command::Help) {
            continue; // `pgtide help run`: the one help text covers it
        }
        throw UsageError("unexpected argument \"" + std::string(arg) + "\": pgtide " +
                         std::string(command_name(*command)) + " takes none");
    }

    const auto seen_flag = [&](Flag flag) {
        return std::any_of(seen.begin(), seen.end(),
                           [&](const FlagSpec* spec) { return spec->flag == flag; });
    };
    if (seen_flag(Flag::Help)) {
        cl.command = Command::Help;
        return cl;
    }
    if (seen_flag(Flag::Version)) {
        cl.command = Command::Version;
        return cl;
    }
    if (!command) {
        throw UsageError("no command given: pgtide run|check|status|drop|resync|bench [OPTIONS]; "
                         "see pgtide help");
    }
    cl.command = *command;
    for (const FlagSpec* spec : seen) {
        if ((spec->commands & bit(cl.command)) == 0) {
            throw UsageError("--" + std::string(spec->long_name) + " is not an option of pgtide " +
                             std::string(command_name(cl.command)) +
                             " (it is one of: " + commands_taking(*spec) + ")");
        }
    }
    if (cl.command == Command::Resync && cl.tables.empty()) {
        throw UsageError("pgtide resync needs at least one TABLE: pgtide resync [-c FILE] [--wait] "
                         "TABLE...");
    }
    if (cl.command == Command::Drop && !cl.yes) {
        throw UsageError("pgtide drop needs --yes to confirm: it drops the replication slot, and "
                         "the next run starts over with a snapshot");
    }
    return cl;
}

std::string usage_text() {
    return R"(Usage: pgtide COMMAND [OPTIONS]

Replicates PostgreSQL into SQLite (or PostgreSQL) through logical replication.

Commands:
  run     [-c FILE] [--once] [--resnapshot]  snapshot if needed, then stream
  check   [-c FILE]                  validate config, source settings, privileges, keys, destination
  status  [-c FILE] [--json]         checkpoint, lag (bytes, seconds), slot health, table states
  drop    [-c FILE] --yes            drop the slot(s) this destination owns
  resync  [-c FILE] [--wait] TABLE...  re-copy tables exactly
  bench   --source DSN [--scale F] [--to URL] [--json]
                                     snapshot and stream throughput on your server, side by
                                     side with plain clients (pgtide bench --help)
  help                               this text
  version                            the version

Options of run, check, status, drop and resync (they override the file's values):
  -c, --config FILE        the TOML configuration (see pgtide.example.toml)
      --source DSN         the source: key=value or URI, anything libpq accepts
      --publication NAME   a publication to replicate; repeatable; replaces the file's list
      --slot NAME          the replication slot (default pgtide)
      --to URL             the destination: sqlite:PATH (relative to the working directory)
                           or postgresql://... (the database must exist)
      --log-format FORMAT  text or json
      --log-level LEVEL    debug, info, warn or error
Options of one command:
      --once               run: stream up to the source's WAL position at start, then exit
      --resnapshot         run: copy every table again
      --json               run, check, status: print the result as one JSON object
      --yes                drop: confirm
      --wait               resync: return once the copy is done
  -h, --help               this text
  -V, --version            the version

Tables are named schema.table; a bare name means public.
SIGINT/SIGTERM: finish the current transaction, checkpoint, exit 0.

Exit codes: 0 ok, 1 other error, 2 usage or configuration, 3 source not ready,
            4 fenced or identity mismatch, 5 slot lost or invalidated.
)";
}

Config build_config(const CommandLine& cl) {
    Config config = cl.config_path ? load_config_file(*cl.config_path) : Config{};
    if (cl.source_dsn) {
        config.source.dsn = *cl.source_dsn;
    }
    if (!cl.publications.empty()) {
        config.source.publications = cl.publications;
    }
    if (cl.slot) {
        config.source.slot = *cl.slot;
    }
    if (cl.to) {
        config.destination.url = *cl.to;
    }
    if (cl.log_format) {
        config.log.format =
            *cl.log_format == "json" ? LogConfig::Format::Json : LogConfig::Format::Text;
    }
    if (cl.log_level) {
        constexpr std::pair<std::string_view, LogConfig::Level> kLevels[] = {
            {"debug", LogConfig::Level::Debug},
            {"info", LogConfig::Level::Info},
            {"warn", LogConfig::Level::Warn},
            {"error", LogConfig::Level::Error}};
        for (const auto& [name, level] : kLevels) {
            if (name == *cl.log_level) {
                config.log.level = level;
            }
        }
    }
    validate(config);
    return config;
}

} // namespace pgtide::app
