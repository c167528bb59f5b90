// The configuration: TOML (toml++) into plain structs, with messages that name file, line and key.
#include "src/config.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <toml++/toml.h>

namespace pgtide::app {
namespace {

using Names = std::span<const std::string_view>;

constexpr std::string_view kTopLevelKeys[] = {"source", "destination", "snapshot", "stream",
                                              "apply",  "metrics",     "log",      "tables"};
constexpr std::string_view kSourceKeys[] = {
    "dsn", "publications", "slot", "temporary_slot", "existing_slot", "reconnect_deadline"};
constexpr std::string_view kDestinationKeys[] = {"url", "deletes", "reconnect_deadline"};
constexpr std::string_view kSnapshotKeys[] = {"parallel_tables", "page_rows",     "batch_rows",
                                              "batch_bytes",     "max_row_bytes", "max_attempts",
                                              "split_rows",      "chunk_rows",    "commit_rows"};
constexpr std::string_view kStreamKeys[] = {
    "heartbeat_interval", "status_interval",           "large_transactions", "binary",
    "spool_dir",          "publication_poll_interval", "receive_timeout"};
constexpr std::string_view kApplyKeys[] = {"flush_interval", "batch_rows", "batch_bytes"};
constexpr std::string_view kMetricsKeys[] = {"listen"};
constexpr std::string_view kLogKeys[] = {"format", "level"};
constexpr std::string_view kTableKeys[] = {"name", "target", "columns", "key"};

constexpr std::string_view kSizeExamples =
    R"(a size such as "512KiB", "4MiB", "1GiB", "4MB" or a number of bytes)";
constexpr std::string_view kDurationExamples =
    R"(a duration such as "100ms", "10s", "5m", "1h" or "1m30s")";

template <class E> using Word = std::pair<std::string_view, E>;

constexpr Word<SourceConfig::ExistingSlot> kExistingSlotWords[] = {
    {"fail", SourceConfig::ExistingSlot::Fail},
    {"restart_snapshot", SourceConfig::ExistingSlot::RestartSnapshot}};
constexpr Word<DestinationConfig::Deletes> kDeletesWords[] = {
    {"hard", DestinationConfig::Deletes::Hard}, {"soft", DestinationConfig::Deletes::Soft}};
constexpr Word<StreamConfig::LargeTransactions> kLargeTransactionsWords[] = {
    {"stream", StreamConfig::LargeTransactions::Stream},
    {"off", StreamConfig::LargeTransactions::Off}};
constexpr Word<LogConfig::Format> kLogFormatWords[] = {{"text", LogConfig::Format::Text},
                                                       {"json", LogConfig::Format::Json}};
constexpr Word<LogConfig::Level> kLogLevelWords[] = {{"debug", LogConfig::Level::Debug},
                                                     {"info", LogConfig::Level::Info},
                                                     {"warn", LogConfig::Level::Warn},
                                                     {"error", LogConfig::Level::Error}};

std::string quote(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
        }
        out += c;
    }
    out += '"';
    return out;
}

std::string join(Names names) {
    std::string out;
    for (const std::string_view name : names) {
        if (!out.empty()) {
            out += ", ";
        }
        out += name;
    }
    return out;
}

template <class E> std::string join_quoted(std::span<const Word<E>> words) {
    std::string out;
    for (const auto& word : words) {
        if (!out.empty()) {
            out += ", ";
        }
        out += quote(word.first);
    }
    return out;
}

std::string_view type_name(const toml::node& node) {
    switch (node.type()) {
    case toml::node_type::string:
        return "string";
    case toml::node_type::integer:
        return "integer";
    case toml::node_type::floating_point:
        return "float";
    case toml::node_type::boolean:
        return "boolean";
    case toml::node_type::date:
        return "date";
    case toml::node_type::time:
        return "time";
    case toml::node_type::date_time:
        return "date-time";
    case toml::node_type::array:
        return "array";
    case toml::node_type::table:
        return "table";
    case toml::node_type::none:
        break;
    }
    return "nothing";
}

bool is_env_name(std::string_view name) {
    if (name.empty() || (name[0] >= '0' && name[0] <= '9')) {
        return false;
    }
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
               c == '_';
    });
}

// Replaces ${NAME} by the environment variable NAME and $$ by $. `key` and `at` are for messages.
std::string interpolate(std::string_view raw, const std::string& key, const std::string& at) {
    std::string out;
    out.reserve(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] != '$') {
            out += raw[i];
            continue;
        }
        if (i + 1 < raw.size() && raw[i + 1] == '$') {
            out += '$';
            ++i;
            continue;
        }
        if (i + 1 < raw.size() && raw[i + 1] == '{') {
            const std::size_t close = raw.find('}', i + 2);
            if (close != std::string_view::npos) {
                const std::string name(raw.substr(i + 2, close - i - 2));
                if (is_env_name(name)) {
                    const char* value = std::getenv(name.c_str());
                    if (value == nullptr) {
                        throw ConfigError(key + " refers to the environment variable " + name +
                                          ", which is not set," + at);
                    }
                    out += value;
                    i = close;
                    continue;
                }
            }
        }
        throw ConfigError(key + R"( has a "$" that does not start ${NAME}; write "$$" for a "$")" +
                          at);
    }
    return out;
}

// Problems shared by parsing (which adds the position) and validate(); nullopt when fine.

std::optional<std::string> slot_problem(std::string_view slot) {
    const bool ok =
        !slot.empty() && slot.size() <= 63 && std::all_of(slot.begin(), slot.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
        });
    if (ok) {
        return std::nullopt;
    }
    return "must be 1 to 63 characters of a-z, 0-9 and _ (found " + quote(slot) + ")";
}

std::optional<std::string> url_problem(const DestinationConfig& destination) {
    if (destination.url.empty()) {
        return "must not be empty";
    }
    if (destination.is_sqlite()) {
        if (destination.sqlite_path().empty()) {
            return R"(names no file: write "sqlite:PATH" (found "sqlite:"))";
        }
        return std::nullopt;
    }
    if (destination.is_postgresql()) {
        return std::nullopt;
    }
    return R"(must start with "sqlite:" or "postgresql://" (found )" +
           quote(redact_dsn(destination.url)) + ")";
}

std::optional<std::string> listen_problem(std::string_view listen) {
    const std::size_t colon = listen.rfind(':');
    if (colon != std::string_view::npos) {
        const std::string_view port = listen.substr(colon + 1);
        unsigned value = 0;
        const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
        if (ec == std::errc() && end == port.data() + port.size() && value >= 1 && value <= 65535) {
            return std::nullopt;
        }
    }
    return R"(must be HOST:PORT such as "127.0.0.1:9187" (found )" + quote(listen) + ")";
}

// One TOML table of the file, with the path that names its keys in messages.
class Section {
public:
    Section(const std::string& origin, const toml::table& table, std::string path,
            std::string header)
        : origin_(origin), table_(table), path_(std::move(path)), header_(std::move(header)) {}

    // Throws for the first key (in file order) that is not in `allowed`.
    void allow(Names allowed) const {
        for (const auto& [key, node] : table_) {
            const std::string_view name = key.str();
            if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
                throw ConfigError("unknown key " + quote(key_name(name)) +
                                  at(key.source().begin.line ? key.source() : node.source()) +
                                  "; allowed in " + header_ + ": " + join(allowed));
            }
        }
    }

    std::string key_name(std::string_view key) const {
        return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
    }

    std::string at(const toml::source_region& region) const {
        if (region.begin.line == 0) {
            return " in " + origin_;
        }
        return " at " + origin_ + ":" + std::to_string(region.begin.line);
    }

    [[noreturn]] void fail(std::string_view key, const toml::node& node,
                           const std::string& problem) const {
        throw ConfigError(key_name(key) + " " + problem + at(node.source()));
    }

    [[noreturn]] void wrong_type(std::string_view key, const toml::node& node,
                                 std::string_view expected) const {
        fail(key, node,
             "must be " + std::string(expected) + " (found " + std::string(type_name(node)) + ")");
    }

    const toml::node* find(std::string_view key) const { return table_.get(key); }

    // A table that is an element of this section's array `path`, e.g. the tables[1] of [[tables]].
    Section element(const toml::table& table, std::string path, std::string header) const {
        return Section(origin_, table, std::move(path), std::move(header));
    }

    // The sub-table at `key` (e.g. [source] of the top level), or nullopt when absent.
    std::optional<Section> section(std::string_view key, std::string header) const {
        const toml::node* node = find(key);
        if (node == nullptr) {
            return std::nullopt;
        }
        if (!node->is_table()) {
            wrong_type(key, *node, "a table (" + header + ")");
        }
        return Section(origin_, *node->as_table(), key_name(key), std::move(header));
    }

    std::string string_of(std::string_view key, const toml::node& node) const {
        if (!node.is_string()) {
            wrong_type(key, node, "a string");
        }
        return interpolate(node.as_string()->get(), key_name(key), at(node.source()));
    }

    std::optional<std::string> string(std::string_view key) const {
        const toml::node* node = find(key);
        if (node == nullptr) {
            return std::nullopt;
        }
        return string_of(key, *node);
    }

    std::optional<bool> boolean(std::string_view key) const {
        const toml::node* node = find(key);
        if (node == nullptr) {
            return std::nullopt;
        }
        if (!node->is_boolean()) {
            wrong_type(key, *node, "true or false");
        }
        return node->as_boolean()->get();
    }

    std::optional<std::int64_t> positive_integer(std::string_view key, std::int64_t max) const {
        const toml::node* node = find(key);
        if (node == nullptr) {
            return std::nullopt;
        }
        if (!node->is_integer()) {
            wrong_type(key, *node, "an integer");
        }
        const std::int64_t value = node->as_integer()->get();
        if (value < 1) {
            fail(key, *node, "must be a positive integer (found " + std::to_string(value) + ")");
        }
        if (value > max) {
            fail(key, *node,
                 "must be at most " + std::to_string(max) + " (found " + std::to_string(value) +
                     ")");
        }
        return value;
    }

    std::optional<int> positive_int(std::string_view key) const {
        const auto value = positive_integer(key, std::numeric_limits<int>::max());
        return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
    }

    std::optional<std::uint64_t> size(std::string_view key) const {
        const toml::node* node = find(key);
        if (node == nullptr) {
            return std::nullopt;
        }
        if (node->is_integer()) {
            const std::int64_t value = node->as_integer()->get();
            if (value < 1) {
                fail(key, *node, "must be a positive size (found " + std::to_string(value) + ")");
            }
            return static_cast<std::uint64_t>(value);
        }
        if (!node->is_string()) {
            wrong_type(key, *node, std::string(kSizeExamples));
        }
        const std::string text = string_of(key, *node);
        std::uint64_t value = 0;
        try {
            value = parse_size(text);
        } catch (const std::invalid_argument&) {
            fail(key, *node,
                 "must be " + std::string(kSizeExamples) + " (found " + quote(text) + ")");
        }
        if (value == 0) {
            fail(key, *node, "must be a positive size (found " + quote(text) + ")");
        }
        return value;
    }

    std::optional<std::chrono::milliseconds> duration(std::string_view key) const {
        const toml::node* node = find(key);
        if (node == nullptr) {
            return std::nullopt;
        }
        if (!node->is_string()) {
            wrong_type(key, *node, std::string(kDurationExamples));
        }
        const std::string text = string_of(key, *node);
        std::chrono::milliseconds value{};
        try {
            value = parse_duration(text);
        } catch (const std::invalid_argument&) {
            fail(key, *node,
                 "must be " + std::string(kDurationExamples) + " (found " + quote(text) + ")");
        }
        if (value.count() == 0) {
            fail(key, *node, "must be longer than 0 (found " + quote(text) + ")");
        }
        return value;
    }

    // An array of strings; `non_empty`: at least one element.
    std::optional<std::vector<std::string>> string_list(std::string_view key,
                                                        bool non_empty) const {
        const toml::node* node = find(key);
        if (node == nullptr) {
            return std::nullopt;
        }
        if (!node->is_array()) {
            wrong_type(key, *node, "an array of strings");
        }
        const toml::array& array = *node->as_array();
        if (non_empty && array.empty()) {
            fail(key, *node, "must name at least one");
        }
        std::vector<std::string> out;
        for (std::size_t i = 0; i < array.size(); ++i) {
            const std::string element_key = std::string(key) + "[" + std::to_string(i) + "]";
            std::string value = string_of(element_key, array[i]);
            if (value.empty()) {
                fail(element_key, array[i], "must not be empty");
            }
            out.push_back(std::move(value));
        }
        return out;
    }

    template <class E, std::size_t N>
    std::optional<E> word(std::string_view key, const Word<E> (&words)[N]) const {
        const std::optional<std::string> text = string(key);
        if (!text) {
            return std::nullopt;
        }
        for (const auto& [name, value] : words) {
            if (name == *text) {
                return value;
            }
        }
        fail(key, *find(key),
             "must be one of " + join_quoted(std::span<const Word<E>>(words)) + " (found " +
                 quote(*text) + ")");
    }

private:
    const std::string& origin_;
    const toml::table& table_;
    std::string path_;
    std::string header_;
};

template <class T> void assign(T& target, std::optional<T> value) {
    if (value) {
        target = std::move(*value);
    }
}

void read_source(const Section& s, SourceConfig& source) {
    s.allow(kSourceKeys);
    assign(source.dsn, s.string("dsn"));
    assign(source.publications, s.string_list("publications", /*non_empty=*/false));
    if (auto slot = s.string("slot")) {
        if (auto problem = slot_problem(*slot)) {
            s.fail("slot", *s.find("slot"), *problem);
        }
        source.slot = std::move(*slot);
    }
    assign(source.temporary_slot, s.boolean("temporary_slot"));
    assign(source.existing_slot, s.word("existing_slot", kExistingSlotWords));
    if (auto deadline = s.duration("reconnect_deadline")) {
        source.reconnect_deadline = *deadline;
    }
}

void read_destination(const Section& s, DestinationConfig& destination) {
    s.allow(kDestinationKeys);
    if (auto url = s.string("url")) {
        destination.url = std::move(*url);
        if (auto problem = url_problem(destination)) {
            s.fail("url", *s.find("url"), *problem);
        }
    }
    assign(destination.deletes, s.word("deletes", kDeletesWords));
    if (auto deadline = s.duration("reconnect_deadline")) {
        destination.reconnect_deadline = *deadline;
    }
}

void read_snapshot(const Section& s, SnapshotConfig& snapshot) {
    constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
    s.allow(kSnapshotKeys);
    assign(snapshot.parallel_tables, s.positive_int("parallel_tables"));
    assign(snapshot.page_rows, s.positive_integer("page_rows", kMax));
    assign(snapshot.batch_rows, s.positive_integer("batch_rows", kMax));
    assign(snapshot.batch_bytes, s.size("batch_bytes"));
    assign(snapshot.max_row_bytes, s.size("max_row_bytes"));
    assign(snapshot.max_attempts, s.positive_int("max_attempts"));
    if (auto split = s.positive_integer("split_rows", kMax)) {
        snapshot.split_rows = split;
    }
    assign(snapshot.chunk_rows, s.positive_integer("chunk_rows", kMax));
    if (auto commit = s.positive_integer("commit_rows", kMax)) {
        snapshot.commit_rows = commit;
    }
}

void read_stream(const Section& s, StreamConfig& stream) {
    s.allow(kStreamKeys);
    assign(stream.heartbeat_interval, s.duration("heartbeat_interval"));
    assign(stream.status_interval, s.duration("status_interval"));
    assign(stream.publication_poll_interval, s.duration("publication_poll_interval"));
    assign(stream.receive_timeout, s.duration("receive_timeout"));
    assign(stream.large_transactions, s.word("large_transactions", kLargeTransactionsWords));
    assign(stream.binary, s.boolean("binary"));
    if (auto dir = s.string("spool_dir")) {
        if (dir->empty()) {
            s.fail("spool_dir", *s.find("spool_dir"),
                   "must name a directory (leave it out for $TMPDIR or /tmp)");
        }
        stream.spool_dir = std::move(*dir);
    }
}

void read_apply(const Section& s, ApplyConfig& apply) {
    s.allow(kApplyKeys);
    assign(apply.flush_interval, s.duration("flush_interval"));
    assign(apply.batch_rows,
           s.positive_integer("batch_rows", std::numeric_limits<std::int64_t>::max()));
    assign(apply.batch_bytes, s.size("batch_bytes"));
}

void read_metrics(const Section& s, MetricsConfig& metrics) {
    s.allow(kMetricsKeys);
    if (auto listen = s.string("listen")) {
        if (auto problem = listen_problem(*listen)) {
            s.fail("listen", *s.find("listen"), *problem);
        }
        metrics.listen = std::move(*listen);
    }
}

void read_log(const Section& s, LogConfig& log) {
    s.allow(kLogKeys);
    assign(log.format, s.word("format", kLogFormatWords));
    assign(log.level, s.word("level", kLogLevelWords));
}

void read_tables(const Section& root, std::vector<TableConfig>& tables) {
    const toml::node* node = root.find("tables");
    if (node == nullptr) {
        return;
    }
    if (!node->is_array()) {
        root.wrong_type("tables", *node, "an array of tables ([[tables]])");
    }
    const toml::array& array = *node->as_array();
    for (std::size_t i = 0; i < array.size(); ++i) {
        const std::string path = "tables[" + std::to_string(i) + "]";
        if (!array[i].is_table()) {
            root.wrong_type(path, array[i], "a table ([[tables]])");
        }
        const Section s = root.element(*array[i].as_table(), path, "[[tables]]");
        s.allow(kTableKeys);
        TableConfig table;
        const std::optional<std::string> name = s.string("name");
        if (!name) {
            throw ConfigError(s.key_name("name") + " is required" + s.at(array[i].source()) +
                              R"(; write name = "schema.table")");
        }
        if (name->empty()) {
            s.fail("name", *s.find("name"), "must not be empty");
        }
        table.name = qualify_table_name(*name);
        for (const TableConfig& earlier : tables) {
            if (earlier.name == table.name) {
                s.fail("name", *s.find("name"),
                       "repeats " + table.name + " of an earlier [[tables]]");
            }
        }
        if (auto target = s.string("target")) {
            if (target->empty()) {
                s.fail("target", *s.find("target"), "must not be empty");
            }
            table.target = std::move(*target);
        }
        table.columns = s.string_list("columns", /*non_empty=*/true);
        table.key = s.string_list("key", /*non_empty=*/true);
        if (table.columns && table.key) {
            for (const std::string& column : *table.key) {
                if (std::find(table.columns->begin(), table.columns->end(), column) ==
                    table.columns->end()) {
                    s.fail("key", *s.find("key"),
                           "names " + quote(column) + ", which is not among the columns");
                }
            }
        }
        tables.push_back(std::move(table));
    }
}

[[noreturn]] void invalid(std::string_view what, std::string_view text) {
    throw std::invalid_argument("not " + std::string(what) + ": " + quote(text));
}

void check_positive(std::string_view key, std::int64_t value) {
    if (value < 1) {
        throw ConfigError(std::string(key) + " must be a positive integer (found " +
                          std::to_string(value) + ")");
    }
}

void check_positive(std::string_view key, std::chrono::milliseconds value) {
    if (value.count() < 1) {
        throw ConfigError(std::string(key) + " must be longer than 0 (found " +
                          std::to_string(value.count()) + "ms)");
    }
}

} // namespace

std::string qualify_table_name(std::string_view name) {
    bool in_quotes = false;
    for (const char c : name) {
        if (c == '"') {
            in_quotes = !in_quotes;
        } else if (c == '.' && !in_quotes) {
            return std::string(name);
        }
    }
    return "public." + std::string(name);
}

bool DestinationConfig::is_sqlite() const {
    return url.starts_with("sqlite:");
}

std::string DestinationConfig::sqlite_path() const {
    return url.substr(std::string_view("sqlite:").size());
}

bool DestinationConfig::is_postgresql() const {
    return url.starts_with("postgresql://") || url.starts_with("postgres://");
}

std::int64_t SnapshotConfig::split_rows_for(const DestinationConfig& destination) const {
    if (split_rows) {
        return *split_rows;
    }
    return destination.is_sqlite() ? 0 : 1000000;
}

std::int64_t SnapshotConfig::commit_rows_for(const DestinationConfig& destination,
                                             const ApplyConfig& apply) const {
    if (commit_rows) {
        return *commit_rows;
    }
    return destination.is_sqlite() ? 5 * apply.batch_rows : 1000000;
}

Config load_config_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw ConfigError("cannot read the config file " + path + ": " +
                          std::generic_category().message(errno));
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) {
        throw ConfigError("cannot read the config file " + path);
    }
    return parse_config(text.str(), path);
}

Config parse_config(std::string_view toml_text, const std::string& origin_name) {
    toml::table root_table;
    try {
        root_table = toml::parse(toml_text, origin_name);
    } catch (const toml::parse_error& e) {
        const toml::source_position begin = e.source().begin;
        throw ConfigError("invalid TOML at " + origin_name + ":" + std::to_string(begin.line) +
                          ":" + std::to_string(begin.column) + ": " + std::string(e.description()));
    }
    const Section root(origin_name, root_table, "", "the top level");
    root.allow(kTopLevelKeys);
    Config config;
    if (auto s = root.section("source", "[source]")) {
        read_source(*s, config.source);
    }
    if (auto s = root.section("destination", "[destination]")) {
        read_destination(*s, config.destination);
    }
    if (auto s = root.section("snapshot", "[snapshot]")) {
        read_snapshot(*s, config.snapshot);
    }
    if (auto s = root.section("stream", "[stream]")) {
        read_stream(*s, config.stream);
    }
    if (auto s = root.section("apply", "[apply]")) {
        read_apply(*s, config.apply);
    }
    if (auto s = root.section("metrics", "[metrics]")) {
        read_metrics(*s, config.metrics);
    }
    if (auto s = root.section("log", "[log]")) {
        read_log(*s, config.log);
    }
    read_tables(root, config.tables);
    return config;
}

void validate(const Config& config) {
    const SourceConfig& source = config.source;
    if (source.dsn.empty()) {
        throw ConfigError("no source: set dsn in [source] or pass --source DSN");
    }
    if (source.publications.empty()) {
        throw ConfigError(
            "no publication: set publications in [source] or pass --publication NAME");
    }
    for (const std::string& publication : source.publications) {
        if (publication.empty()) {
            throw ConfigError("source.publications must not contain an empty name");
        }
    }
    if (auto problem = slot_problem(source.slot)) {
        throw ConfigError("source.slot " + *problem);
    }
    if (source.reconnect_deadline) {
        check_positive("source.reconnect_deadline", *source.reconnect_deadline);
    }
    if (config.destination.url.empty()) {
        throw ConfigError("no destination: set url in [destination] or pass --to sqlite:PATH or "
                          "--to postgresql://...");
    }
    if (auto problem = url_problem(config.destination)) {
        throw ConfigError("destination.url " + *problem);
    }
    if (config.destination.reconnect_deadline) {
        // Not refused for a SQLite file, which has no connection to lose: a file that names
        // one destination or the other (--to) keeps working.
        check_positive("destination.reconnect_deadline", *config.destination.reconnect_deadline);
    }

    const SnapshotConfig& snapshot = config.snapshot;
    check_positive("snapshot.parallel_tables", snapshot.parallel_tables);
    check_positive("snapshot.page_rows", snapshot.page_rows);
    check_positive("snapshot.chunk_rows", snapshot.chunk_rows);
    check_positive("snapshot.batch_rows", snapshot.batch_rows);
    check_positive("snapshot.max_attempts", snapshot.max_attempts);
    if (snapshot.split_rows) {
        check_positive("snapshot.split_rows", *snapshot.split_rows);
    }
    if (snapshot.commit_rows) {
        check_positive("snapshot.commit_rows", *snapshot.commit_rows);
    }
    if (snapshot.batch_bytes == 0) {
        throw ConfigError("snapshot.batch_bytes must be a positive size (found 0)");
    }
    if (snapshot.max_row_bytes == 0) {
        throw ConfigError("snapshot.max_row_bytes must be a positive size (found 0)");
    }
    check_positive("stream.heartbeat_interval", config.stream.heartbeat_interval);
    check_positive("stream.status_interval", config.stream.status_interval);
    check_positive("stream.publication_poll_interval", config.stream.publication_poll_interval);
    if (config.stream.receive_timeout < std::chrono::seconds(1)) {
        throw ConfigError("stream.receive_timeout must be at least 1s (found " +
                          std::to_string(config.stream.receive_timeout.count()) + "ms)");
    }
    if (config.stream.spool_dir.find('\0') != std::string::npos) {
        throw ConfigError("stream.spool_dir must not contain a NUL character");
    }
    check_positive("apply.flush_interval", config.apply.flush_interval);
    check_positive("apply.batch_rows", config.apply.batch_rows);
    if (config.apply.batch_bytes == 0) {
        throw ConfigError("apply.batch_bytes must be a positive size (found 0)");
    }
    if (config.metrics.listen) {
        if (auto problem = listen_problem(*config.metrics.listen)) {
            throw ConfigError("metrics.listen " + *problem);
        }
    }

    std::set<std::string> names;
    for (const TableConfig& table : config.tables) {
        if (table.name.empty()) {
            throw ConfigError("tables: a table has an empty name");
        }
        if (!names.insert(table.name).second) {
            throw ConfigError("tables: " + table.name + " is listed twice");
        }
        if (table.target && table.target->empty()) {
            throw ConfigError("tables: the target of " + table.name + " must not be empty");
        }
        if (table.columns && table.columns->empty()) {
            throw ConfigError("tables: the columns of " + table.name + " must name at least one");
        }
        if (table.key && table.key->empty()) {
            throw ConfigError("tables: the key of " + table.name +
                              " must name at least one column");
        }
        if (table.columns && table.key) {
            for (const std::string& column : *table.key) {
                if (std::find(table.columns->begin(), table.columns->end(), column) ==
                    table.columns->end()) {
                    throw ConfigError("tables: the key of " + table.name + " names " +
                                      quote(column) + ", which is not among its columns");
                }
            }
        }
    }
}

std::uint64_t parse_size(std::string_view text) {
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
        ++digits;
    }
    if (digits == 0) {
        invalid("a size", text);
    }
    std::uint64_t number = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, number);
    if (ec != std::errc() || end != text.data() + digits) {
        invalid("a size (too large)", text);
    }
    std::string_view unit = text.substr(digits);
    if (unit.starts_with(' ')) {
        unit.remove_prefix(1);
        if (unit.empty()) {
            invalid("a size", text);
        }
    }
    static constexpr std::pair<std::string_view, std::uint64_t> kUnits[] = {
        {"", 1},
        {"B", 1},
        {"KiB", kKiB},
        {"MiB", kMiB},
        {"GiB", kGiB},
        {"TiB", 1024 * kGiB},
        {"kB", 1000},
        {"KB", 1000},
        {"MB", 1000 * 1000},
        {"GB", 1000 * 1000 * 1000},
        {"TB", std::uint64_t{1000} * 1000 * 1000 * 1000},
    };
    for (const auto& [name, factor] : kUnits) {
        if (name == unit) {
            if (number > std::numeric_limits<std::uint64_t>::max() / factor) {
                invalid("a size (too large)", text);
            }
            return number * factor;
        }
    }
    invalid("a size (units: B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)", text);
}

std::chrono::milliseconds parse_duration(std::string_view text) {
    struct Unit {
        std::string_view name;
        std::int64_t ms;
    };
    static constexpr Unit kUnits[] = {{"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
    if (text.empty()) {
        invalid("a duration", text);
    }
    std::int64_t total = 0;
    std::size_t next_unit = 0; // units go largest first, each at most once
    std::size_t i = 0;
    while (i < text.size()) {
        const std::size_t number_begin = i;
        while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
            ++i;
        }
        const std::size_t unit_begin = i;
        while (i < text.size() && text[i] >= 'a' && text[i] <= 'z') {
            ++i;
        }
        if (number_begin == unit_begin || unit_begin == i) {
            invalid("a duration", text);
        }
        std::int64_t number = 0;
        const auto [end, ec] =
            std::from_chars(text.data() + number_begin, text.data() + unit_begin, number);
        if (ec != std::errc() || end != text.data() + unit_begin) {
            invalid("a duration (too long)", text);
        }
        const std::string_view unit = text.substr(unit_begin, i - unit_begin);
        std::size_t u = next_unit;
        while (u < std::size(kUnits) && kUnits[u].name != unit) {
            ++u;
        }
        if (u == std::size(kUnits)) {
            invalid("a duration (units h, m, s, ms, largest first)", text);
        }
        next_unit = u + 1;
        constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
        if (number > kMax / kUnits[u].ms || total > kMax - number * kUnits[u].ms) {
            invalid("a duration (too long)", text);
        }
        total += number * kUnits[u].ms;
    }
    return std::chrono::milliseconds(total);
}

namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool is_secret_key(std::string_view key) {
    return key == "password" || key == "sslpassword";
}

struct Span {
    std::size_t begin;
    std::size_t end;
};

std::string mask(std::string_view text, const std::vector<Span>& spans) {
    std::string out;
    std::size_t copied = 0;
    for (const Span& span : spans) {
        out.append(text.substr(copied, span.begin - copied));
        out += "***";
        copied = span.end;
    }
    out.append(text.substr(copied));
    return out;
}

// postgresql://user:password@host/db?password=...: the userinfo ends at the last '@' before the
// first '/' or '?' of the authority (as libpq reads it); query parameters are key=value&...
std::string redact_uri(std::string_view uri) {
    std::vector<Span> spans;
    const std::size_t authority = uri.find("://") + 3;
    const std::size_t authority_end = std::min(uri.find('/', authority), uri.find('?', authority));
    const std::size_t at = uri.substr(0, authority_end).rfind('@');
    if (at != std::string_view::npos && at >= authority) {
        const std::size_t colon = uri.find(':', authority);
        if (colon < at) {
            spans.push_back({colon + 1, at});
        }
    }
    std::size_t query = uri.find('?', authority);
    while (query != std::string_view::npos) {
        const std::size_t key_begin = query + 1;
        const std::size_t param_end = std::min(uri.find('&', key_begin), uri.size());
        const std::size_t equals = uri.find('=', key_begin);
        if (equals < param_end && is_secret_key(uri.substr(key_begin, equals - key_begin))) {
            spans.push_back({equals + 1, param_end});
        }
        query = param_end < uri.size() ? param_end : std::string_view::npos;
    }
    return mask(uri, spans);
}

// key=value key='quoted \' value' ...: parsed as libpq's conninfo_parse does.
std::string redact_keyword_value(std::string_view dsn) {
    std::vector<Span> spans;
    const std::size_t n = dsn.size();
    std::size_t i = 0;
    const auto skip_space = [&] {
        while (i < n && is_space(dsn[i])) {
            ++i;
        }
    };
    while (true) {
        skip_space();
        if (i == n) {
            break;
        }
        const std::size_t key_begin = i;
        while (i < n && dsn[i] != '=' && !is_space(dsn[i])) {
            ++i;
        }
        const std::string_view key = dsn.substr(key_begin, i - key_begin);
        skip_space();
        if (i == n || dsn[i] != '=') {
            if (is_secret_key(key)) { // malformed: hide whatever follows
                spans.push_back({i, n});
                break;
            }
            continue;
        }
        ++i;
        skip_space();
        const std::size_t value_begin = i;
        if (i < n && dsn[i] == '\'') {
            ++i;
            while (i < n && dsn[i] != '\'') {
                i += (dsn[i] == '\\' && i + 1 < n) ? 2 : 1;
            }
            if (i < n) {
                ++i;
            }
        } else {
            while (i < n && !is_space(dsn[i])) {
                i += (dsn[i] == '\\' && i + 1 < n) ? 2 : 1;
            }
        }
        if (is_secret_key(key)) {
            spans.push_back({value_begin, i});
        }
    }
    return mask(dsn, spans);
}

// "scheme://..." (postgresql://, and any other URL a user may mistype into a DSN).
bool is_uri(std::string_view text) {
    const std::size_t scheme_end = text.find("://");
    if (scheme_end == std::string_view::npos || scheme_end == 0) {
        return false;
    }
    return std::all_of(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(scheme_end),
                       [](char c) {
                           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                  (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
                       });
}

} // namespace

std::string redact_dsn(std::string_view dsn) {
    if (is_uri(dsn)) {
        return redact_uri(dsn);
    }
    return redact_keyword_value(dsn);
}

} // namespace pgtide::app
