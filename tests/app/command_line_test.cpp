// The command line: every command, both flag forms, usage errors with their exact messages, and
// the Config that flags and file make together.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <initializer_list>

#include "src/command_line.hpp"

namespace pgtide::app {
namespace {

using namespace std::chrono_literals;

CommandLine parse(std::initializer_list<const char*> args) {
    std::vector<const char*> argv = {"pgtide"};
    argv.insert(argv.end(), args.begin(), args.end());
    return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

std::string usage_error(std::initializer_list<const char*> args) {
    try {
        parse(args);
    } catch (const UsageError& e) {
        EXPECT_EQ(e.code(), replicate::ExitCode::Usage);
        return e.what();
    }
    return "(no error)";
}

std::string config_error(const CommandLine& cl) {
    try {
        build_config(cl);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

// A config file in the test's temporary directory, removed with the object.
class TempFile {
public:
    TempFile(const std::string& name, const std::string& text)
        : path_(::testing::TempDir() + name) {
        std::ofstream(path_) << text;
    }
    ~TempFile() { std::remove(path_.c_str()); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

TEST(CommandLine, EveryCommand) {
    EXPECT_EQ(parse({"run"}).command, Command::Run);
    EXPECT_EQ(parse({"check"}).command, Command::Check);
    EXPECT_EQ(parse({"status"}).command, Command::Status);
    EXPECT_EQ(parse({"drop", "--yes"}).command, Command::Drop);
    EXPECT_EQ(parse({"resync", "orders"}).command, Command::Resync);
    EXPECT_EQ(parse({"bench"}).command, Command::Bench);
    EXPECT_EQ(parse({"help"}).command, Command::Help);
    EXPECT_EQ(parse({"version"}).command, Command::Version);
}

TEST(CommandLine, RunFlags) {
    const CommandLine cl = parse({"run", "-c", "pgtide.toml", "--once", "--resnapshot", "--json"});
    EXPECT_EQ(cl.command, Command::Run);
    EXPECT_EQ(cl.config_path, "pgtide.toml");
    EXPECT_TRUE(cl.once);
    EXPECT_TRUE(cl.resnapshot);
    EXPECT_TRUE(cl.json);
    EXPECT_FALSE(cl.yes);
    EXPECT_FALSE(cl.wait);

    const CommandLine plain = parse({"run"});
    EXPECT_FALSE(plain.config_path.has_value());
    EXPECT_FALSE(plain.once);
    EXPECT_FALSE(plain.resnapshot);
    EXPECT_FALSE(plain.json);
}

TEST(CommandLine, BothValueForms) {
    const CommandLine separate =
        parse({"run", "--source", "host=db", "--slot", "s1", "--to", "sqlite:r.db", "--config",
               "a.toml", "--log-format", "json", "--log-level", "debug"});
    const CommandLine joined = parse({"run", "--source=host=db", "--slot=s1", "--to=sqlite:r.db",
                                      "--config=a.toml", "--log-format=json", "--log-level=debug"});
    for (const CommandLine* cl : {&separate, &joined}) {
        EXPECT_EQ(cl->source_dsn, "host=db");
        EXPECT_EQ(cl->slot, "s1");
        EXPECT_EQ(cl->to, "sqlite:r.db");
        EXPECT_EQ(cl->config_path, "a.toml");
        EXPECT_EQ(cl->log_format, "json");
        EXPECT_EQ(cl->log_level, "debug");
    }
    EXPECT_EQ(parse({"check", "-cmy.toml"}).config_path, "my.toml");
}

TEST(CommandLine, ValuesKeepSpacesAndEquals) {
    const CommandLine cl = parse({"run", "--source", "host=db password='a b=c'", "--to",
                                  "postgresql://u@h/db?application_name=x"});
    EXPECT_EQ(cl.source_dsn, "host=db password='a b=c'");
    EXPECT_EQ(cl.to, "postgresql://u@h/db?application_name=x");
}

TEST(CommandLine, RepeatedPublicationAccumulates) {
    EXPECT_EQ(
        parse({"run", "--publication", "a", "--publication=b", "--publication", "c"}).publications,
        (std::vector<std::string>{"a", "b", "c"}));
}

TEST(CommandLine, RepeatedValueFlagLastWins) {
    EXPECT_EQ(parse({"run", "--slot", "a", "--slot", "b"}).slot, "b");
}

TEST(CommandLine, FlagsMayComeBeforeTheCommand) {
    const CommandLine cl = parse({"-c", "x.toml", "--once", "run"});
    EXPECT_EQ(cl.command, Command::Run);
    EXPECT_EQ(cl.config_path, "x.toml");
    EXPECT_TRUE(cl.once);
}

TEST(CommandLine, ResyncTablesAreQualified) {
    const CommandLine cl =
        parse({"resync", "-c", "p.toml", "orders", "--wait", "sales.items", "--", "--odd"});
    EXPECT_TRUE(cl.wait);
    EXPECT_EQ(cl.tables,
              (std::vector<std::string>{"public.orders", "sales.items", "public.--odd"}));
}

TEST(CommandLine, DropAndStatus) {
    EXPECT_TRUE(parse({"drop", "-c", "p.toml", "--yes"}).yes);
    EXPECT_TRUE(parse({"status", "--json"}).json);
    EXPECT_TRUE(parse({"check", "--json"}).json);
}

TEST(CommandLine, BenchTakesEverythingAfterIt) {
    const CommandLine cl = parse({"bench", "--rows", "1000", "-x", "--help", "run"});
    EXPECT_EQ(cl.command, Command::Bench);
    EXPECT_EQ(cl.bench_args, (std::vector<std::string>{"--rows", "1000", "-x", "--help", "run"}));
}

TEST(CommandLine, HelpAndVersionFlags) {
    EXPECT_EQ(parse({"--help"}).command, Command::Help);
    EXPECT_EQ(parse({"-h"}).command, Command::Help);
    EXPECT_EQ(parse({"run", "--help"}).command, Command::Help);
    EXPECT_EQ(parse({"drop", "-h"}).command, Command::Help) << "no --yes needed for help";
    EXPECT_EQ(parse({"help", "run"}).command, Command::Help);
    EXPECT_EQ(parse({"--version"}).command, Command::Version);
    EXPECT_EQ(parse({"-V"}).command, Command::Version);
}

TEST(CommandLineError, UnknownCommand) {
    EXPECT_EQ(usage_error({"rnu"}), R"(unknown command "rnu" (did you mean run?); commands: run, )"
                                    "check, status, drop, resync, bench, help, version");
    EXPECT_EQ(usage_error({"replicate"}), R"(unknown command "replicate"; commands: run, check, )"
                                          "status, drop, resync, bench, help, version");
}

TEST(CommandLineError, UnknownOption) {
    EXPECT_EQ(usage_error({"run", "--onec"}),
              "unknown option --onec (did you mean --once?); see pgtide help");
    EXPECT_EQ(usage_error({"run", "--publications", "a"}),
              "unknown option --publications (did you mean --publication?); see pgtide help");
    EXPECT_EQ(usage_error({"run", "--frobnicate"}), "unknown option --frobnicate; see pgtide help");
    EXPECT_EQ(usage_error({"run", "-x"}), "unknown option -x; see pgtide help");
}

TEST(CommandLineError, MissingAndUnexpectedValues) {
    EXPECT_EQ(usage_error({"run", "--source"}), "--source needs a value: --source DSN");
    EXPECT_EQ(usage_error({"run", "-c"}), "-c needs a value: -c FILE");
    EXPECT_EQ(usage_error({"run", "--to="}), "--to needs a non-empty URL");
    EXPECT_EQ(usage_error({"run", "--once=yes"}), "--once does not take a value");
    EXPECT_EQ(usage_error({"run", "-hx"}), "-h does not take a value (found -hx)");
    EXPECT_EQ(usage_error({"run", "--log-format", "xml"}),
              R"(--log-format must be one of text, json (found "xml"))");
    EXPECT_EQ(usage_error({"run", "--log-level=trace"}),
              R"(--log-level must be one of debug, info, warn, error (found "trace"))");
}

TEST(CommandLineError, FlagNotValidForTheCommand) {
    EXPECT_EQ(usage_error({"run", "--yes"}),
              "--yes is not an option of pgtide run (it is one of: drop)");
    EXPECT_EQ(usage_error({"status", "--once"}),
              "--once is not an option of pgtide status (it is one of: run)");
    EXPECT_EQ(usage_error({"drop", "--yes", "--json"}),
              "--json is not an option of pgtide drop (it is one of: run, check, status)");
    EXPECT_EQ(usage_error({"version", "-c", "x.toml"}),
              "--config is not an option of pgtide version (it is one of: run, check, status, "
              "drop, resync)");
    EXPECT_EQ(usage_error({"-c", "x.toml", "bench"}),
              "--config is not an option of pgtide bench (it is one of: run, check, status, "
              "drop, resync)");
}

TEST(CommandLineError, Arguments) {
    EXPECT_EQ(usage_error({"run", "extra"}),
              R"(unexpected argument "extra": pgtide run takes none)");
    EXPECT_EQ(usage_error({"resync"}),
              "pgtide resync needs at least one TABLE: pgtide resync [-c FILE] [--wait] TABLE...");
    EXPECT_EQ(usage_error({"drop"}),
              "pgtide drop needs --yes to confirm: it drops the replication slot, and the next "
              "run starts over with a snapshot");
    EXPECT_EQ(usage_error({}), usage_error({"--once"}));
    EXPECT_EQ(usage_error({"--once"}),
              "no command given: pgtide run|check|status|drop|resync|bench [OPTIONS]; see pgtide "
              "help");
}

TEST(CommandLine, UsageTextNamesEveryCommandAndFlag) {
    const std::string text = usage_text();
    for (const char* word : {"run ",
                             "check ",
                             "status ",
                             "drop ",
                             "resync ",
                             "bench ",
                             "help ",
                             "version ",
                             "-c, --config FILE",
                             "--source DSN",
                             "--publication NAME",
                             "--slot NAME",
                             "--to URL",
                             "--log-format",
                             "--log-level",
                             "--once",
                             "--resnapshot",
                             "--json",
                             "--yes",
                             "--wait",
                             "-h, --help",
                             "-V, --version",
                             "sqlite:PATH",
                             "postgresql://",
                             "Exit codes: 0 ok"}) {
        EXPECT_NE(text.find(word), std::string::npos) << word;
    }
}

// build_config

TEST(BuildConfig, FlagsAloneAreEnough) {
    const Config c = build_config(parse({"run", "--source", "host=db dbname=app", "--publication",
                                         "app", "--to", "sqlite:replica.db"}));
    Config expected;
    expected.source.dsn = "host=db dbname=app";
    expected.source.publications = {"app"};
    expected.destination.url = "sqlite:replica.db";
    EXPECT_EQ(c, expected);
    EXPECT_EQ(c.destination.sqlite_path(), "replica.db");
}

TEST(BuildConfig, FlagsOverrideTheFile) {
    const TempFile file("pgtide_build_config.toml", R"(
[source]
dsn = "host=file"
publications = ["f1", "f2"]
slot = "from_file"
[destination]
url = "sqlite:file.db"
deletes = "hard"
[stream]
heartbeat_interval = "3s"
[log]
format = "json"
level = "warn"
)");
    const Config from_file = build_config(parse({"check", "-c", file.path().c_str()}));
    EXPECT_EQ(from_file.source.dsn, "host=file");
    EXPECT_EQ(from_file.source.publications, (std::vector<std::string>{"f1", "f2"}));
    EXPECT_EQ(from_file.source.slot, "from_file");
    EXPECT_EQ(from_file.destination.url, "sqlite:file.db");
    EXPECT_EQ(from_file.log.format, LogConfig::Format::Json);
    EXPECT_EQ(from_file.log.level, LogConfig::Level::Warn);

    const Config c = build_config(
        parse({"run", "--config", file.path().c_str(), "--source=host=flag", "--publication", "p1",
               "--publication", "p2", "--publication", "p3", "--slot", "from_flag", "--to",
               "postgresql://replica/app", "--log-format", "text", "--log-level", "error"}));
    EXPECT_EQ(c.source.dsn, "host=flag");
    EXPECT_EQ(c.source.publications, (std::vector<std::string>{"p1", "p2", "p3"}));
    EXPECT_EQ(c.source.slot, "from_flag");
    EXPECT_EQ(c.destination.url, "postgresql://replica/app");
    EXPECT_TRUE(c.destination.is_postgresql());
    EXPECT_EQ(c.log.format, LogConfig::Format::Text);
    EXPECT_EQ(c.log.level, LogConfig::Level::Error);
    // What no flag names stays as the file has it.
    EXPECT_EQ(c.destination.deletes, DestinationConfig::Deletes::Hard);
    EXPECT_EQ(c.stream.heartbeat_interval, 3s);
}

TEST(BuildConfig, ValidatesTheMergedResult) {
    EXPECT_EQ(config_error(parse({"run", "--publication", "app", "--to", "sqlite:r.db"})),
              "no source: set dsn in [source] or pass --source DSN");
    EXPECT_EQ(config_error(parse({"run", "--source", "host=db", "--to", "sqlite:r.db"})),
              "no publication: set publications in [source] or pass --publication NAME");
    EXPECT_EQ(config_error(parse({"run", "--source", "host=db", "--publication", "app", "--to",
                                  "mysql://root:pw@db/app"})),
              R"(destination.url must start with "sqlite:" or "postgresql://" (found )"
              R"("mysql://root:***@db/app"))");
    EXPECT_EQ(config_error(parse({"run", "--source", "host=db", "--publication", "app", "--to",
                                  "sqlite:r.db", "--slot", "Bad-Slot"})),
              R"(source.slot must be 1 to 63 characters of a-z, 0-9 and _ (found "Bad-Slot"))");
}

TEST(BuildConfig, MissingConfigFileIsAConfigError) {
    EXPECT_EQ(config_error(parse({"run", "-c", "/nonexistent/pgtide.toml"})),
              "cannot read the config file /nonexistent/pgtide.toml: No such file or directory");
}

} // namespace
} // namespace pgtide::app
