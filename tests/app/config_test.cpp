// Config: defaults, a full file, every kind of error with its exact message, ${ENV}, sizes,
// durations, redact_dsn and the example file.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <regex>

#include "src/config.hpp"

namespace pgtide::app {
namespace {

using namespace std::chrono_literals;

// The message of the ConfigError that parsing `text` as "pgtide.toml" throws.
std::string parse_error(const std::string& text) {
    try {
        parse_config(text, "pgtide.toml");
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

std::string validate_error(const Config& config) {
    try {
        validate(config);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

Config minimal() {
    Config config;
    config.source.dsn = "host=db";
    config.source.publications = {"app"};
    config.destination.url = "sqlite:replica.db";
    return config;
}

// Sets an environment variable for the life of the object.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
    ~ScopedEnv() { ::unsetenv(name_); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* name_;
};

TEST(Config, Defaults) {
    const Config c;
    EXPECT_EQ(c.source.dsn, "");
    EXPECT_TRUE(c.source.publications.empty());
    EXPECT_EQ(c.source.slot, "pgtide");
    EXPECT_FALSE(c.source.temporary_slot);
    EXPECT_EQ(c.source.existing_slot, SourceConfig::ExistingSlot::Fail);
    EXPECT_FALSE(c.source.reconnect_deadline.has_value());
    EXPECT_EQ(c.destination.url, "");
    EXPECT_EQ(c.destination.deletes, DestinationConfig::Deletes::Hard);
    EXPECT_EQ(c.snapshot.parallel_tables, 4);
    EXPECT_EQ(c.snapshot.page_rows, 2048);
    EXPECT_EQ(c.snapshot.batch_rows, 4096);
    EXPECT_EQ(c.snapshot.batch_bytes, 4u * 1024 * 1024);
    EXPECT_EQ(c.snapshot.max_row_bytes, 64u * 1024 * 1024);
    EXPECT_EQ(c.snapshot.max_attempts, 3);
    EXPECT_FALSE(c.snapshot.split_rows);
    EXPECT_EQ(c.snapshot.split_rows_for(DestinationConfig{.url = "sqlite:r.db"}), 0);
    EXPECT_EQ(c.snapshot.split_rows_for(DestinationConfig{.url = "postgresql://h/d"}), 1000000);
    EXPECT_EQ(c.snapshot.chunk_rows, 65536);
    EXPECT_FALSE(c.snapshot.commit_rows);
    EXPECT_EQ(c.snapshot.commit_rows_for(DestinationConfig{.url = "sqlite:r.db"}, c.apply), 50000);
    EXPECT_EQ(c.snapshot.commit_rows_for(DestinationConfig{.url = "postgresql://h/d"}, c.apply),
              1000000);
    EXPECT_EQ(c.stream.heartbeat_interval, 10s);
    EXPECT_EQ(c.stream.status_interval, 10s);
    EXPECT_EQ(c.stream.receive_timeout, 30s);
    EXPECT_EQ(c.stream.large_transactions, StreamConfig::LargeTransactions::Stream);
    EXPECT_EQ(c.stream.spool_dir, "");
    EXPECT_EQ(c.apply.flush_interval, 100ms);
    EXPECT_EQ(c.apply.batch_rows, 10000);
    EXPECT_EQ(c.apply.batch_bytes, 16u * 1024 * 1024);
    EXPECT_FALSE(c.metrics.listen.has_value());
    EXPECT_EQ(c.log.format, LogConfig::Format::Text);
    EXPECT_EQ(c.log.level, LogConfig::Level::Info);
    EXPECT_TRUE(c.tables.empty());
}

TEST(Config, EmptyFileGivesDefaults) {
    EXPECT_EQ(parse_config("", "pgtide.toml"), Config{});
}

TEST(Config, FullFileParsesIntoExactValues) {
    const Config c = parse_config(R"(
[source]
dsn = "host=db user=replicator dbname=app sslmode=verify-full"
publications = ["app", "billing"]
slot = "pgtide_app"
temporary_slot = true
existing_slot = "restart_snapshot"
reconnect_deadline = "5m"

[destination]
url = "postgresql://replica.internal/app"
deletes = "soft"
reconnect_deadline = "90s"

[snapshot]
parallel_tables = 8
page_rows = 4096
batch_rows = 1000
batch_bytes = "8MiB"
max_row_bytes = 1048576
max_attempts = 5
split_rows = 250000
chunk_rows = 10000
commit_rows = 20000

[stream]
heartbeat_interval = "30s"
status_interval = "1m30s"
publication_poll_interval = "2s"
receive_timeout = "45s"
large_transactions = "off"
spool_dir = "/var/spool/pgtide"

[apply]
flush_interval = "250ms"
batch_rows = 500
batch_bytes = "1GB"

[metrics]
listen = "127.0.0.1:9187"

[log]
format = "json"
level = "debug"

[[tables]]
name = "public.orders"
target = "orders"
columns = ["id", "total", "created_at"]
key = ["id"]

[[tables]]
name = "customers"
)",
                                  "pgtide.toml");

    Config expected;
    expected.source.dsn = "host=db user=replicator dbname=app sslmode=verify-full";
    expected.source.publications = {"app", "billing"};
    expected.source.slot = "pgtide_app";
    expected.source.temporary_slot = true;
    expected.source.existing_slot = SourceConfig::ExistingSlot::RestartSnapshot;
    expected.source.reconnect_deadline = 5min;
    expected.destination.url = "postgresql://replica.internal/app";
    expected.destination.deletes = DestinationConfig::Deletes::Soft;
    expected.destination.reconnect_deadline = 90s;
    expected.snapshot = SnapshotConfig{.parallel_tables = 8,
                                       .page_rows = 4096,
                                       .batch_rows = 1000,
                                       .batch_bytes = 8 * kMiB,
                                       .max_row_bytes = 1048576,
                                       .max_attempts = 5,
                                       .split_rows = 250000,
                                       .chunk_rows = 10000,
                                       .commit_rows = 20000};
    expected.stream = StreamConfig{.heartbeat_interval = 30s,
                                   .status_interval = 90s,
                                   .publication_poll_interval = 2s,
                                   .receive_timeout = 45s,
                                   .large_transactions = StreamConfig::LargeTransactions::Off,
                                   .spool_dir = "/var/spool/pgtide"};
    expected.apply =
        ApplyConfig{.flush_interval = 250ms, .batch_rows = 500, .batch_bytes = 1000000000};
    expected.metrics.listen = "127.0.0.1:9187";
    expected.log = LogConfig{.format = LogConfig::Format::Json, .level = LogConfig::Level::Debug};
    expected.tables = {
        TableConfig{.name = "public.orders",
                    .target = "orders",
                    .columns = std::vector<std::string>{"id", "total", "created_at"},
                    .key = std::vector<std::string>{"id"}},
        TableConfig{.name = "public.customers"},
    };
    EXPECT_EQ(c.source, expected.source);
    EXPECT_EQ(c.destination, expected.destination);
    EXPECT_EQ(c.snapshot, expected.snapshot);
    EXPECT_EQ(c.stream, expected.stream);
    EXPECT_EQ(c.apply, expected.apply);
    EXPECT_EQ(c.metrics, expected.metrics);
    EXPECT_EQ(c.log, expected.log);
    EXPECT_EQ(c.tables, expected.tables);
    EXPECT_EQ(c, expected);
    EXPECT_NO_THROW(validate(c));
}

TEST(Config, TheExampleFileDocumentsTheDefaults) {
    const std::string path = std::string(PGTIDE_SOURCE_DIR) + "/pgtide.example.toml";
    const Config c = load_config_file(path);
    Config expected;
    expected.source.dsn = "host=localhost dbname=app user=replicator sslmode=prefer";
    expected.source.publications = {"app"};
    expected.destination.url = "sqlite:replica.db";
    EXPECT_EQ(c, expected); // every other key it sets is its default
    EXPECT_NO_THROW(validate(c));
}

TEST(Config, TheExampleFilesCommentedKeysParse) {
    // The keys the example leaves commented out (reconnect_deadlines, listen, [[tables]]) parse
    // once uncommented: "# key = value" lines become "key = value".
    std::ifstream in(std::string(PGTIDE_SOURCE_DIR) + "/pgtide.example.toml");
    const std::regex key_line(R"(^# (\[\[tables\]\]$|[a-z_]+ = ))");
    std::string text;
    for (std::string line; std::getline(in, line);) {
        if (std::regex_search(line, key_line)) {
            line = line.substr(2);
        }
        text += line + "\n";
    }
    const Config c = parse_config(text, "uncommented.toml");
    EXPECT_EQ(c.source.reconnect_deadline, 5min);
    EXPECT_EQ(c.destination.reconnect_deadline, 5min);
    EXPECT_EQ(c.metrics.listen, "127.0.0.1:9187");
    EXPECT_EQ(c.stream.spool_dir, "/var/tmp");
    ASSERT_EQ(c.tables.size(), 1u);
    EXPECT_EQ(c.tables[0].name, "public.orders");
    EXPECT_EQ(c.tables[0].target, "orders");
    EXPECT_EQ(c.tables[0].key, std::vector<std::string>{"id"});
    EXPECT_NO_THROW(validate(c));
}

// Errors: each names the key and file:line and says what is allowed.

TEST(ConfigError, UnknownKeyListsTheAllowedKeys) {
    EXPECT_EQ(parse_error("[source]\ndsn = \"x\"\nslto = \"a\"\n"),
              R"(unknown key "source.slto" at pgtide.toml:3; allowed in [source]: dsn, )"
              "publications, slot, temporary_slot, existing_slot, reconnect_deadline");
    EXPECT_EQ(parse_error("\n\n[sorce]\n"),
              R"(unknown key "sorce" at pgtide.toml:3; allowed in the top level: source, )"
              "destination, snapshot, stream, apply, metrics, log, tables");
    EXPECT_EQ(parse_error("[snapshot]\nbatch_size = 1\n"),
              R"(unknown key "snapshot.batch_size" at pgtide.toml:2; allowed in [snapshot]: )"
              "parallel_tables, page_rows, batch_rows, batch_bytes, max_row_bytes, max_attempts, "
              "split_rows, chunk_rows, commit_rows");
}

TEST(ConfigError, UnknownKeyInsideTables) {
    EXPECT_EQ(parse_error("[[tables]]\nname = \"a\"\n\n[[tables]]\nname = \"b\"\ncolums = []\n"),
              R"(unknown key "tables[1].colums" at pgtide.toml:6; allowed in [[tables]]: name, )"
              "target, columns, key");
}

TEST(ConfigError, WrongTypeNamesTheExpectedAndTheFoundType) {
    EXPECT_EQ(parse_error("[source]\ndsn = \"x\"\n\nslot = 7\n"),
              "source.slot must be a string (found integer) at pgtide.toml:4");
    EXPECT_EQ(parse_error("[source]\ntemporary_slot = \"yes\"\n"),
              "source.temporary_slot must be true or false (found string) at pgtide.toml:2");
    EXPECT_EQ(parse_error("[source]\npublications = \"app\"\n"),
              "source.publications must be an array of strings (found string) at pgtide.toml:2");
    EXPECT_EQ(parse_error("[source]\npublications = [\"a\",\n  2]\n"),
              "source.publications[1] must be a string (found integer) at pgtide.toml:3");
    EXPECT_EQ(parse_error("source = \"x\"\n"),
              "source must be a table ([source]) (found string) at pgtide.toml:1");
    EXPECT_EQ(parse_error("[snapshot]\npage_rows = 1.5\n"),
              "snapshot.page_rows must be an integer (found float) at pgtide.toml:2");
    EXPECT_EQ(parse_error("tables = 1\n"),
              "tables must be an array of tables ([[tables]]) (found integer) at pgtide.toml:1");
}

TEST(ConfigError, UnknownWordsListTheAllowedOnes) {
    EXPECT_EQ(parse_error("[source]\nexisting_slot = \"reuse\"\n"),
              R"(source.existing_slot must be one of "fail", "restart_snapshot" (found "reuse") )"
              "at pgtide.toml:2");
    EXPECT_EQ(
        parse_error("[destination]\ndeletes = \"HARD\"\n"),
        R"(destination.deletes must be one of "hard", "soft" (found "HARD") at pgtide.toml:2)");
    EXPECT_EQ(parse_error("[stream]\nlarge_transactions = \"spool\"\n"),
              R"(stream.large_transactions must be one of "stream", "off" (found "spool") at )"
              "pgtide.toml:2");
    EXPECT_EQ(parse_error("[log]\nformat = \"xml\"\n"),
              R"(log.format must be one of "text", "json" (found "xml") at pgtide.toml:2)");
    EXPECT_EQ(parse_error("[log]\nlevel = \"trace\"\n"),
              R"(log.level must be one of "debug", "info", "warn", "error" (found "trace") at )"
              "pgtide.toml:2");
}

TEST(ConfigError, ImpossibleNumbers) {
    EXPECT_EQ(parse_error("[snapshot]\nparallel_tables = 0\n"),
              "snapshot.parallel_tables must be a positive integer (found 0) at pgtide.toml:2");
    EXPECT_EQ(parse_error("[apply]\nbatch_rows = -5\n"),
              "apply.batch_rows must be a positive integer (found -5) at pgtide.toml:2");
    EXPECT_EQ(parse_error("[snapshot]\nmax_attempts = 3000000000\n"),
              "snapshot.max_attempts must be at most 2147483647 (found 3000000000) at "
              "pgtide.toml:2");
    EXPECT_EQ(parse_error("[snapshot]\nbatch_bytes = -1\n"),
              "snapshot.batch_bytes must be a positive size (found -1) at pgtide.toml:2");
    EXPECT_EQ(parse_error("[snapshot]\nmax_row_bytes = \"0MiB\"\n"),
              R"(snapshot.max_row_bytes must be a positive size (found "0MiB") at pgtide.toml:2)");
}

TEST(ConfigError, BadSizesAndDurations) {
    EXPECT_EQ(parse_error("[snapshot]\nbatch_bytes = \"4 mb\"\n"),
              R"(snapshot.batch_bytes must be a size such as "512KiB", "4MiB", "1GiB", "4MB" )"
              R"(or a number of bytes (found "4 mb") at pgtide.toml:2)");
    EXPECT_EQ(parse_error("[apply]\nbatch_bytes = 1.5\n"),
              R"(apply.batch_bytes must be a size such as "512KiB", "4MiB", "1GiB", "4MB" or a )"
              "number of bytes (found float) at pgtide.toml:2");
    EXPECT_EQ(parse_error("[stream]\nheartbeat_interval = \"10\"\n"),
              R"(stream.heartbeat_interval must be a duration such as "100ms", "10s", "5m", )"
              R"("1h" or "1m30s" (found "10") at pgtide.toml:2)");
    EXPECT_EQ(parse_error("[stream]\nheartbeat_interval = 10\n"),
              R"(stream.heartbeat_interval must be a duration such as "100ms", "10s", "5m", )"
              R"("1h" or "1m30s" (found integer) at pgtide.toml:2)");
    EXPECT_EQ(parse_error("[apply]\nflush_interval = \"0ms\"\n"),
              R"(apply.flush_interval must be longer than 0 (found "0ms") at pgtide.toml:2)");
}

TEST(ConfigError, ImpossibleStrings) {
    EXPECT_EQ(parse_error("[source]\nslot = \"Pg-Tide\"\n"),
              R"(source.slot must be 1 to 63 characters of a-z, 0-9 and _ (found "Pg-Tide") at )"
              "pgtide.toml:2");
    EXPECT_EQ(parse_error("[destination]\nurl = \"mysql://u:secret@h/db\"\n"),
              R"(destination.url must start with "sqlite:" or "postgresql://" (found )"
              R"("mysql://u:***@h/db") at pgtide.toml:2)");
    EXPECT_EQ(parse_error("[destination]\nurl = \"sqlite:\"\n"),
              R"(destination.url names no file: write "sqlite:PATH" (found "sqlite:") at )"
              "pgtide.toml:2");
    EXPECT_EQ(parse_error("[metrics]\nlisten = \"localhost\"\n"),
              R"(metrics.listen must be HOST:PORT such as "127.0.0.1:9187" (found "localhost") )"
              "at pgtide.toml:2");
    EXPECT_EQ(parse_error("[source]\npublications = [\"\"]\n"),
              "source.publications[0] must not be empty at pgtide.toml:2");
}

TEST(ConfigError, TablesEntries) {
    EXPECT_EQ(parse_error("[[tables]]\nname = \"a\"\n\n[[tables]]\ntarget = \"b\"\n"),
              R"(tables[1].name is required at pgtide.toml:4; write name = "schema.table")");
    EXPECT_EQ(parse_error("[[tables]]\nname = \"a\"\n[[tables]]\nname = \"public.a\"\n"),
              "tables[1].name repeats public.a of an earlier [[tables]] at pgtide.toml:4");
    EXPECT_EQ(parse_error("[[tables]]\nname = \"a\"\ncolumns = [\"id\"]\nkey = [\"k\"]\n"),
              R"(tables[0].key names "k", which is not among the columns at pgtide.toml:4)");
    EXPECT_EQ(parse_error("[[tables]]\nname = \"a\"\nkey = []\n"),
              "tables[0].key must name at least one at pgtide.toml:3");
}

TEST(Config, BareTableNamesMeanPublicAndQuotedDotsDoNotCount) {
    const Config c = parse_config(R"([[tables]]
name = '"my.table"'
[[tables]]
name = 'sales."my.table"'
)",
                                  "pgtide.toml");
    ASSERT_EQ(c.tables.size(), 2u);
    EXPECT_EQ(c.tables[0].name, R"(public."my.table")");
    EXPECT_EQ(c.tables[1].name, R"(sales."my.table")");
}

TEST(ConfigError, InvalidToml) {
    EXPECT_EQ(parse_error("[source]\ndsn = = 1\n"),
              "invalid TOML at pgtide.toml:2:7: Error while parsing value: could not determine "
              "value type");
}

TEST(ConfigError, MissingFileIsNamed) {
    try {
        load_config_file("/nonexistent/pgtide.toml");
        FAIL() << "no error";
    } catch (const ConfigError& e) {
        EXPECT_STREQ(e.what(),
                     "cannot read the config file /nonexistent/pgtide.toml: No such file or "
                     "directory");
        EXPECT_EQ(e.code(), replicate::ExitCode::Usage);
    }
}

TEST(ConfigError, LoadedFileIsNamedInMessages) {
    const std::string path = ::testing::TempDir() + "pgtide_config_test.toml";
    std::ofstream(path) << "[source]\nslot = 1\n";
    try {
        load_config_file(path);
        FAIL() << "no error";
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()),
                  "source.slot must be a string (found integer) at " + path + ":2");
    }
    std::remove(path.c_str());
}

// ${ENV}

TEST(ConfigEnv, InterpolatesEveryStringValue) {
    const ScopedEnv password("PGTIDE_TEST_PASSWORD", "s3cret");
    const ScopedEnv publication("PGTIDE_TEST_PUB", "app");
    const ScopedEnv size("PGTIDE_TEST_SIZE", "2MiB");
    const ScopedEnv table("PGTIDE_TEST_TABLE", "orders");
    const Config c = parse_config(R"(
[source]
dsn = "host=db password=${PGTIDE_TEST_PASSWORD} port=$$5432 x=${PGTIDE_TEST_PUB}${PGTIDE_TEST_PUB}"
publications = ["${PGTIDE_TEST_PUB}", "other"]
[snapshot]
batch_bytes = "${PGTIDE_TEST_SIZE}"
[[tables]]
name = "sales.${PGTIDE_TEST_TABLE}"
)",
                                  "pgtide.toml");
    EXPECT_EQ(c.source.dsn, "host=db password=s3cret port=$5432 x=appapp");
    EXPECT_EQ(c.source.publications, (std::vector<std::string>{"app", "other"}));
    EXPECT_EQ(c.snapshot.batch_bytes, 2 * kMiB);
    ASSERT_EQ(c.tables.size(), 1u);
    EXPECT_EQ(c.tables[0].name, "sales.orders");
}

TEST(ConfigEnv, MissingVariableNamesTheKeyAndTheVariable) {
    ::unsetenv("PGTIDE_TEST_UNSET");
    EXPECT_EQ(parse_error("[source]\ndsn = \"password=${PGTIDE_TEST_UNSET}\"\n"),
              "source.dsn refers to the environment variable PGTIDE_TEST_UNSET, which is not "
              "set, at pgtide.toml:2");
    EXPECT_EQ(parse_error("[source]\npublications = [\"a\", \"${PGTIDE_TEST_UNSET}\"]\n"),
              "source.publications[1] refers to the environment variable PGTIDE_TEST_UNSET, "
              "which is not set, at pgtide.toml:2");
}

TEST(ConfigEnv, EmptyVariableIsSet) {
    const ScopedEnv empty("PGTIDE_TEST_EMPTY", "");
    EXPECT_EQ(parse_config("[source]\ndsn = \"a${PGTIDE_TEST_EMPTY}b\"\n", "t").source.dsn, "ab");
}

TEST(ConfigEnv, LoneDollarIsAnError) {
    const std::string expected =
        R"(source.dsn has a "$" that does not start ${NAME}; write "$$" for a "$" at )"
        "pgtide.toml:2";
    EXPECT_EQ(parse_error("[source]\ndsn = \"password=pa$s\"\n"), expected);
    EXPECT_EQ(parse_error("[source]\ndsn = \"password=${UNCLOSED\"\n"), expected);
    EXPECT_EQ(parse_error("[source]\ndsn = \"password=${}\"\n"), expected);
    EXPECT_EQ(parse_error("[source]\ndsn = \"password=${1A}\"\n"), expected);
    EXPECT_EQ(parse_error("[source]\ndsn = \"trailing$\"\n"), expected);
}

// validate()

TEST(ConfigValidate, MinimalConfigIsValid) {
    EXPECT_NO_THROW(validate(minimal()));
}

TEST(ConfigValidate, RequiredValuesSayHowToGiveThem) {
    Config c = minimal();
    c.source.dsn.clear();
    EXPECT_EQ(validate_error(c), "no source: set dsn in [source] or pass --source DSN");
    c = minimal();
    c.source.publications.clear();
    EXPECT_EQ(validate_error(c),
              "no publication: set publications in [source] or pass --publication NAME");
    c = minimal();
    c.destination.url.clear();
    EXPECT_EQ(validate_error(c), "no destination: set url in [destination] or pass --to "
                                 "sqlite:PATH or --to postgresql://...");
}

TEST(ConfigValidate, ValuesFromFlagsAreChecked) {
    Config c = minimal();
    c.source.slot = "has space";
    EXPECT_EQ(validate_error(c),
              R"(source.slot must be 1 to 63 characters of a-z, 0-9 and _ (found "has space"))");
    c.source.slot = std::string(63, 'a');
    EXPECT_NO_THROW(validate(c));
    c.source.slot = std::string(64, 'a');
    EXPECT_NE(validate_error(c), "(no error)");

    c = minimal();
    c.destination.url = "mysql://root:hunter2@db/app";
    EXPECT_EQ(validate_error(c), R"(destination.url must start with "sqlite:" or "postgresql://" )"
                                 R"((found "mysql://root:***@db/app"))");
    c.destination.url = "postgres://u:p@h/db";
    EXPECT_NO_THROW(validate(c));
    c.destination.url = "sqlite:/var/lib/pgtide/replica.db";
    EXPECT_NO_THROW(validate(c));
}

TEST(ConfigValidate, NumbersMustBePositive) {
    Config c = minimal();
    c.snapshot.parallel_tables = 0;
    EXPECT_EQ(validate_error(c), "snapshot.parallel_tables must be a positive integer (found 0)");
    c = minimal();
    c.snapshot.batch_bytes = 0;
    EXPECT_EQ(validate_error(c), "snapshot.batch_bytes must be a positive size (found 0)");
    c = minimal();
    c.stream.status_interval = 0ms;
    EXPECT_EQ(validate_error(c), "stream.status_interval must be longer than 0 (found 0ms)");
    c = minimal();
    c.stream.receive_timeout = 500ms;
    EXPECT_EQ(validate_error(c), "stream.receive_timeout must be at least 1s (found 500ms)");
    c = minimal();
    c.source.reconnect_deadline = -1ms;
    EXPECT_EQ(validate_error(c), "source.reconnect_deadline must be longer than 0 (found -1ms)");
    c = minimal();
    c.destination.url = "postgresql://replica.internal/app";
    c.destination.reconnect_deadline = 0ms;
    EXPECT_EQ(validate_error(c),
              "destination.reconnect_deadline must be longer than 0 (found 0ms)");
}

TEST(ConfigValidate, SpoolDirectory) {
    Config c = minimal();
    c.stream.spool_dir = "/var/spool/pgtide";
    EXPECT_NO_THROW(validate(c));
    c.stream.spool_dir = std::string("/tmp/a\0b", 8);
    EXPECT_EQ(validate_error(c), "stream.spool_dir must not contain a NUL character");
    EXPECT_EQ(parse_error("[stream]\nspool_dir = \"\"\n"),
              "stream.spool_dir must name a directory (leave it out for $TMPDIR or /tmp) at "
              "pgtide.toml:2");
    EXPECT_EQ(parse_error("[stream]\nspool_dir = 3\n"),
              "stream.spool_dir must be a string (found integer) at pgtide.toml:2");
}

TEST(ConfigValidate, Tables) {
    Config c = minimal();
    c.tables = {TableConfig{.name = "public.a"}, TableConfig{.name = "public.a"}};
    EXPECT_EQ(validate_error(c), "tables: public.a is listed twice");
    c.tables = {TableConfig{.name = "public.a",
                            .columns = std::vector<std::string>{"id"},
                            .key = std::vector<std::string>{"k"}}};
    EXPECT_EQ(validate_error(c),
              R"(tables: the key of public.a names "k", which is not among its columns)");
}

TEST(DestinationConfig, UrlHelpers) {
    DestinationConfig d{.url = "sqlite:data/replica.db"};
    EXPECT_TRUE(d.is_sqlite());
    EXPECT_FALSE(d.is_postgresql());
    EXPECT_EQ(d.sqlite_path(), "data/replica.db");
    d.url = "postgresql://h/db";
    EXPECT_TRUE(d.is_postgresql());
    EXPECT_FALSE(d.is_sqlite());
    d.url = "postgres://h/db";
    EXPECT_TRUE(d.is_postgresql());
}

// Sizes and durations

TEST(ParseSize, Table) {
    const std::pair<const char*, std::uint64_t> cases[] = {
        {"0", 0},
        {"100", 100},
        {"100B", 100},
        {"512KiB", 512 * 1024},
        {"4MiB", 4 * 1024 * 1024},
        {"4 MiB", 4 * 1024 * 1024},
        {"1GiB", 1024ull * 1024 * 1024},
        {"2TiB", 2ull << 40},
        {"4kB", 4000},
        {"4KB", 4000},
        {"4MB", 4000000},
        {"3GB", 3000000000ull},
        {"1TB", 1000000000000ull},
        {"18446744073709551615", 18446744073709551615ull},
        {"17179869183GiB", 17179869183ull << 30},
    };
    for (const auto& [text, bytes] : cases) {
        EXPECT_EQ(parse_size(text), bytes) << text;
    }
}

TEST(ParseSize, RejectsJunk) {
    for (const char* text :
         {"", "MiB", "-1", "+1", "1.5MiB", "4mib", "4 mb", "4  MiB", "4MiB ", " 4MiB", "4 ", "4Mi",
          "4MiBs", "0x10", "18446744073709551616", "16777216TiB", "1e3"}) {
        EXPECT_THROW(parse_size(text), std::invalid_argument) << '"' << text << '"';
    }
}

TEST(ParseDuration, Table) {
    const std::pair<const char*, std::chrono::milliseconds> cases[] = {
        {"0ms", 0ms},   {"100ms", 100ms},         {"10s", 10s}, {"5m", 5min},        {"1h", 1h},
        {"1m30s", 90s}, {"1h2m3s4ms", 3723004ms}, {"90s", 90s}, {"1s500ms", 1500ms}, {"25h", 25h},
    };
    for (const auto& [text, duration] : cases) {
        EXPECT_EQ(parse_duration(text), duration) << text;
    }
}

TEST(ParseDuration, RejectsJunk) {
    for (const char* text : {"", "10", "s", "10 s", "1.5s", "-1s", "10sec", "1d", "30s1m", "1s1s",
                             "1m 30s", "10S", "ms", "9223372036854775807h"}) {
        EXPECT_THROW(parse_duration(text), std::invalid_argument) << '"' << text << '"';
    }
}

// redact_dsn

TEST(RedactDsn, KeywordValue) {
    EXPECT_EQ(redact_dsn("host=db user=rep password=s3cret dbname=app"),
              "host=db user=rep password=*** dbname=app");
    EXPECT_EQ(redact_dsn("host=db password = 's3 cr\\'et' dbname=app"),
              "host=db password = *** dbname=app");
    EXPECT_EQ(redact_dsn("password=a\\ b host=db"), "password=*** host=db");
    EXPECT_EQ(redact_dsn("host=db sslpassword=key password="),
              "host=db sslpassword=*** password=***");
    EXPECT_EQ(redact_dsn("host=/var/run/postgresql dbname=app"),
              "host=/var/run/postgresql dbname=app");
    EXPECT_EQ(redact_dsn("host=db password s3cret"), "host=db password ***");
    EXPECT_EQ(redact_dsn("passfile=/home/u/.pgpass"), "passfile=/home/u/.pgpass");
    EXPECT_EQ(redact_dsn(""), "");
}

TEST(RedactDsn, Uri) {
    EXPECT_EQ(redact_dsn("postgresql://rep:s3cret@db:5432/app?sslmode=require"),
              "postgresql://rep:***@db:5432/app?sslmode=require");
    EXPECT_EQ(redact_dsn("postgres://rep:p%40ss@h1,h2/app"), "postgres://rep:***@h1,h2/app");
    EXPECT_EQ(redact_dsn("postgresql://rep:a@b@db/app"), "postgresql://rep:***@db/app");
    EXPECT_EQ(redact_dsn("postgresql://rep@db/app"), "postgresql://rep@db/app");
    EXPECT_EQ(redact_dsn("postgresql://db:5432/app"), "postgresql://db:5432/app");
    EXPECT_EQ(redact_dsn("postgresql:///app?host=/tmp&password=s3cret&sslmode=disable"),
              "postgresql:///app?host=/tmp&password=***&sslmode=disable");
    EXPECT_EQ(redact_dsn("postgresql://db/app?password=s3cret"),
              "postgresql://db/app?password=***");
}

} // namespace
} // namespace pgtide::app
