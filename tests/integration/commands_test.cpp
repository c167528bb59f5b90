// `pgtide check`, `status` and `drop` on a real PostgreSQL, through the real binary.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <thread>
#include <variant>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

using namespace std::chrono_literals;

// ---- a small JSON reader, enough for the commands' one-object outputs -----------------------

struct Json;
using JsonObject = std::map<std::string, Json>;
using JsonArray = std::vector<Json>;

struct Json {
    std::variant<std::nullptr_t, bool, double, std::string, std::shared_ptr<JsonArray>,
                 std::shared_ptr<JsonObject>>
        v;

    bool is_null() const { return std::holds_alternative<std::nullptr_t>(v); }
    const std::string& str() const { return std::get<std::string>(v); }
    double num() const { return std::get<double>(v); }
    long long integer() const { return static_cast<long long>(std::get<double>(v)); }
    bool boolean() const { return std::get<bool>(v); }
    const JsonArray& arr() const { return *std::get<std::shared_ptr<JsonArray>>(v); }
    const Json& operator[](const std::string& key) const {
        const auto& o = *std::get<std::shared_ptr<JsonObject>>(v);
        const auto it = o.find(key);
        if (it == o.end()) {
            throw std::runtime_error("no key " + key);
        }
        return it->second;
    }
    bool has(const std::string& key) const {
        return std::get<std::shared_ptr<JsonObject>>(v)->count(key) > 0;
    }
};

class JsonParser {
public:
    explicit JsonParser(std::string_view text) : s_(text) {}

    Json parse_document() {
        Json j = value();
        ws();
        if (i_ != s_.size()) {
            throw std::runtime_error("trailing text after JSON at " + std::to_string(i_));
        }
        return j;
    }

private:
    void ws() {
        while (i_ < s_.size() &&
               (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) {
            ++i_;
        }
    }
    char peek() {
        ws();
        if (i_ >= s_.size()) {
            throw std::runtime_error("unexpected end of JSON");
        }
        return s_[i_];
    }
    void expect(char c) {
        if (peek() != c) {
            throw std::runtime_error(std::string("expected ") + c + " at " + std::to_string(i_));
        }
        ++i_;
    }
    bool literal(std::string_view word) {
        if (s_.substr(i_, word.size()) == word) {
            i_ += word.size();
            return true;
        }
        return false;
    }
    std::string string() {
        expect('"');
        std::string out;
        while (i_ < s_.size() && s_[i_] != '"') {
            char c = s_[i_++];
            if (c == '\\') {
                const char e = s_.at(i_++);
                switch (e) {
                case 'n':
                    c = '\n';
                    break;
                case 't':
                    c = '\t';
                    break;
                case 'r':
                    c = '\r';
                    break;
                case 'u':
                    c = char(std::stoi(std::string(s_.substr(i_, 4)), nullptr, 16));
                    i_ += 4;
                    break;
                default:
                    c = e;
                }
            }
            out += c;
        }
        expect('"');
        return out;
    }
    Json value() {
        const char c = peek();
        Json j;
        if (c == '{') {
            ++i_;
            auto o = std::make_shared<JsonObject>();
            if (peek() != '}') {
                for (;;) {
                    std::string key = string();
                    expect(':');
                    (*o)[key] = value();
                    if (peek() == ',') {
                        ++i_;
                        continue;
                    }
                    break;
                }
            }
            expect('}');
            j.v = o;
        } else if (c == '[') {
            ++i_;
            auto a = std::make_shared<JsonArray>();
            if (peek() != ']') {
                for (;;) {
                    a->push_back(value());
                    if (peek() == ',') {
                        ++i_;
                        continue;
                    }
                    break;
                }
            }
            expect(']');
            j.v = a;
        } else if (c == '"') {
            j.v = string();
        } else if (literal("null")) {
            j.v = nullptr;
        } else if (literal("true")) {
            j.v = true;
        } else if (literal("false")) {
            j.v = false;
        } else {
            std::size_t used = 0;
            j.v = std::stod(std::string(s_.substr(i_)), &used);
            i_ += used;
        }
        return j;
    }

    std::string_view s_;
    std::size_t i_ = 0;
};

Json parse_json(const std::string& text) {
    return JsonParser(text).parse_document();
}

// "0/1A2B" → bytes, as pg_lsn orders them.
unsigned long long lsn_value(const std::string& lsn) {
    const auto slash = lsn.find('/');
    return (std::stoull(lsn.substr(0, slash), nullptr, 16) << 32) |
           std::stoull(lsn.substr(slash + 1), nullptr, 16);
}

std::string lsn_text(unsigned long long v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%llX/%llX", v >> 32, v & 0xffffffffULL);
    return buf;
}

// An SQLite file that pgtide did not write (no metadata tables).
void make_foreign_sqlite_file(const std::string& path) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE other (x)", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
}

// ---- fixture --------------------------------------------------------------------------------

class Commands : public PgTest {
protected:
    void SetUp() override {
        PgTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        dir_ = std::filesystem::temp_directory_path() /
               ("pgtide-cmd-" + std::to_string(::getpid()) + "-" + dbname());
        std::filesystem::create_directories(dir_);
        sqlite_path_ = (dir_ / "replica.db").string();
        slot_ = "s_" + dbname();
    }
    void TearDown() override {
        // Leave no slot behind on the shared server.
        try {
            exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                 "WHERE slot_name = '" +
                 slot_ + "' AND NOT active");
        } catch (const std::exception&) {
        }
        if (!dir_.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(dir_, ec);
        }
    }

    std::vector<std::string> args(const std::string& command, std::vector<std::string> extra = {},
                                  const std::string& source_dsn = "",
                                  const std::string& publication = "pub") const {
        std::vector<std::string> a{command};
        a.insert(a.end(), extra.begin(), extra.end());
        a.insert(a.end(), {"--source", source_dsn.empty() ? dsn() : source_dsn, "--publication",
                           publication, "--slot", slot_, "--to", "sqlite:" + sqlite_path_});
        return a;
    }

    struct Result {
        int code;
        std::string out;
        std::string err;
    };

    Result pgtide(std::vector<std::string> a) const {
        Result r;
        r.code = PgtideProcess::run(std::move(a), &r.out, &r.err);
        if (std::getenv("PGTIDE_SHOW_OUTPUT") != nullptr) { // to read the outputs by eye
            std::cerr << "exit " << r.code << "\n" << r.out << r.err << "\n";
        }
        return r;
    }

    /// `run --once --json`; the LSN it reached.
    std::string run_once() const {
        const Result r = pgtide(args("run", {"--once", "--json"}));
        EXPECT_EQ(r.code, 0) << r.out << r.err;
        return parse_json(r.out)["lsn"].str();
    }

    std::string slot_count() const {
        return query_value("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" + slot_ +
                           "'");
    }

    std::filesystem::path dir_;
    std::string sqlite_path_;
    std::string slot_;
};

std::string describe(const Commands* /*unused*/, const std::string& out, const std::string& err) {
    return "stdout:\n" + out + "\nstderr:\n" + err;
}

// ---- check ----------------------------------------------------------------------------------

TEST_F(Commands, CheckPassesOnAGoodSetup) {
    exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    exec("CREATE TABLE b (x text, y bigint, v text, PRIMARY KEY (x, y))");
    exec("ALTER TABLE b REPLICA IDENTITY FULL");
    exec("CREATE PUBLICATION pub FOR TABLE a, b");
    const Result r = pgtide(args("check"));
    ASSERT_EQ(r.code, 0) << describe(this, r.out, r.err);
    EXPECT_NE(r.out.find("ok   wal_level: wal_level = logical\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("ok   publication pub: publication \"pub\" lists 2 tables and publishes "
                         "insert, update, delete, truncate\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("ok   keys: every published table has a usable key: public.a (id), "
                         "public.b (x, y)\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("ok   replica identity public.a: REPLICA IDENTITY DEFAULT: deletes and "
                         "key changes carry the primary key (id)\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("ok   replica identity public.b: REPLICA IDENTITY FULL: deletes and key "
                         "changes carry the whole old row (more WAL per update and delete)\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("ok   slot " + slot_ + ": replication slot " + slot_ +
                         " does not exist yet; `pgtide run` creates it\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("\npgtide check: 13 passed, 0 warnings, 0 failed\n"), std::string::npos)
        << r.out;
    // check changes nothing: no slot, no destination file.
    EXPECT_EQ(slot_count(), "0");
    EXPECT_FALSE(std::filesystem::exists(sqlite_path_));

    // After a run, the slot is recognised as this destination's, and --json says the same.
    run_once();
    const Result again = pgtide(args("check", {"--json"}));
    ASSERT_EQ(again.code, 0) << describe(this, again.out, again.err);
    const Json j = parse_json(again.out);
    EXPECT_TRUE(j["ok"].boolean());
    EXPECT_EQ(j["exit_code"].integer(), 0);
    bool saw_slot = false;
    for (const auto& c : j["checks"].arr()) {
        EXPECT_EQ(c["status"].str(), "ok") << c["check"].str() << ": " << c["message"].str();
        if (c["check"].str() == "slot " + slot_) {
            saw_slot = true;
            EXPECT_EQ(c["message"].str().rfind("replication slot " + slot_ +
                                                   " is this destination's (inactive, "
                                                   "wal_status reserved, retains ",
                                               0),
                      0u)
                << c["message"].str();
        }
    }
    EXPECT_TRUE(saw_slot) << again.out;
}

TEST_F(Commands, CheckSumsUpManyTablesInAFewLines) {
    // 13 tables keyed by their primary key, one with REPLICA IDENTITY FULL, one keyed by its
    // replica identity index: more than check lists one by one.
    for (int i = 1; i <= 13; ++i) {
        char name[8];
        std::snprintf(name, sizeof name, "t%02d", i);
        exec(std::string("CREATE TABLE ") + name + " (id int PRIMARY KEY, v text)");
    }
    exec("CREATE TABLE b (id int PRIMARY KEY, v text)");
    exec("ALTER TABLE b REPLICA IDENTITY FULL");
    exec("CREATE TABLE u (k int NOT NULL, v text)");
    exec("CREATE UNIQUE INDEX u_k ON u (k)");
    exec("ALTER TABLE u REPLICA IDENTITY USING INDEX u_k");
    exec("CREATE PUBLICATION pub FOR ALL TABLES");
    const Result r = pgtide(args("check"));
    ASSERT_EQ(r.code, 0) << describe(this, r.out, r.err);
    EXPECT_NE(r.out.find("\nok   keys: every one of the 15 published tables has a usable key: "
                         "public.b (id), public.t01 (id), public.t02 (id), public.t03 (id), "
                         "public.t04 (id), public.t05 (id), public.t06 (id), public.t07 (id), "
                         "public.t08 (id), public.t09 (id) and 5 more\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("\nok   replica identity: 13 tables (public.t01, public.t02, public.t03, "
                         "public.t04, public.t05, public.t06, public.t07, public.t08, public.t09, "
                         "public.t10 and 3 more): REPLICA IDENTITY DEFAULT: deletes and key "
                         "changes carry the primary key\n"),
              std::string::npos)
        << r.out;
    // A verdict no other table shares keeps its own line, with its own details.
    EXPECT_NE(r.out.find("\nok   replica identity public.b: REPLICA IDENTITY FULL: deletes and "
                         "key changes carry the whole old row (more WAL per update and "
                         "delete)\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("\nok   replica identity public.u: REPLICA IDENTITY USING INDEX u_k: "
                         "deletes and key changes carry (k)\n"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("replica identity public.t"), std::string::npos) << r.out;

    // A failing table always has its own line; the others are still summed up.
    exec("CREATE TABLE nokey (v text)");
    const Result bad = pgtide(args("check"));
    EXPECT_EQ(bad.code, 3) << describe(this, bad.out, bad.err);
    EXPECT_NE(bad.out.find("\nFAIL replica identity public.nokey: REPLICA IDENTITY DEFAULT "
                           "without a primary key: PostgreSQL refuses UPDATE and DELETE on this "
                           "table while a publication publishes them; fix: ALTER TABLE "
                           "\"public\".\"nokey\" REPLICA IDENTITY FULL (or USING INDEX a unique "
                           "index on NOT NULL columns)\n"),
              std::string::npos)
        << bad.out;
    EXPECT_NE(bad.out.find("\nok   replica identity: 13 tables (public.t01, "), std::string::npos)
        << bad.out;
    EXPECT_EQ(bad.out.find("replica identity public.t"), std::string::npos) << bad.out;
}

TEST_F(Commands, CheckFailsWithExit3ForAKeylessTable) {
    exec("CREATE TABLE good (id int PRIMARY KEY)");
    exec("CREATE TABLE nokey (v text)");
    exec("CREATE PUBLICATION pub FOR TABLE good, nokey");
    const Result r = pgtide(args("check"));
    EXPECT_EQ(r.code, 3) << describe(this, r.out, r.err);
    EXPECT_NE(r.out.find("\nFAIL keys: table public.nokey has no usable key: give it a primary "
                         "key (ALTER TABLE ... ADD PRIMARY KEY), a replica identity index (ALTER "
                         "TABLE ... REPLICA IDENTITY USING INDEX ...), or set key = [...] in its "
                         "[[tables]] entry\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("\nFAIL replica identity public.nokey: REPLICA IDENTITY DEFAULT without "
                         "a primary key: PostgreSQL refuses UPDATE and DELETE on this table while "
                         "a publication publishes them; fix: ALTER TABLE \"public\".\"nokey\" "
                         "REPLICA IDENTITY FULL (or USING INDEX a unique index on NOT NULL "
                         "columns)\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("\npgtide check: 11 passed, 0 warnings, 2 failed\n"), std::string::npos)
        << r.out;
}

TEST_F(Commands, CheckFailsWithExit3ForAMissingPublication) {
    exec("CREATE TABLE a (id int PRIMARY KEY)");
    exec("CREATE PUBLICATION pub FOR TABLE a");
    exec("CREATE PUBLICATION empty_pub");
    Result r = pgtide(args("check", {}, "", "nopub"));
    EXPECT_EQ(r.code, 3) << describe(this, r.out, r.err);
    EXPECT_NE(r.out.find("\nFAIL publication nopub: publication \"nopub\" does not exist; fix: "
                         "CREATE PUBLICATION \"nopub\" FOR TABLE ...; or fix "
                         "source.publications\n"),
              std::string::npos)
        << r.out;

    r = pgtide(args("check", {"--json"}, "", "empty_pub"));
    EXPECT_EQ(r.code, 3) << describe(this, r.out, r.err);
    const Json j = parse_json(r.out);
    EXPECT_FALSE(j["ok"].boolean());
    EXPECT_EQ(j["exit_code"].integer(), 3);
    int failures = 0;
    for (const auto& c : j["checks"].arr()) {
        if (c["status"].str() == "fail") {
            ++failures;
            EXPECT_EQ(c["check"].str(), "publication empty_pub");
            EXPECT_EQ(c["message"].str(), "publication \"empty_pub\" lists no tables");
            EXPECT_EQ(c["fix"].str(), "ALTER PUBLICATION \"empty_pub\" ADD TABLE ...");
        }
    }
    EXPECT_EQ(failures, 1) << r.out;
}

TEST_F(Commands, CheckFailsWhenTheKeyIsNotInTheReplicaIdentity) {
    // The configured key is the primary key, but deletes carry the replica identity index's
    // columns only.
    exec("CREATE TABLE t (id int PRIMARY KEY, code text NOT NULL UNIQUE)");
    exec("ALTER TABLE t REPLICA IDENTITY USING INDEX t_code_key");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    const std::string config = sqlite_path_ + ".toml";
    {
        std::ofstream f(config);
        f << "[[tables]]\nname = \"t\"\nkey = [\"id\"]\n";
    }
    const Result r = pgtide(args("check", {"-c", config}));
    EXPECT_EQ(r.code, 3) << describe(this, r.out, r.err);
    EXPECT_NE(r.out.find("key column \"id\" of table public.t is not part of its replica "
                         "identity, so deletes and key changes would not carry it"),
              std::string::npos)
        << r.out;
}

TEST_F(Commands, CheckAndStatusNeverPrintThePassword) {
    exec("CREATE TABLE a (id int PRIMARY KEY)");
    exec("CREATE PUBLICATION pub FOR TABLE a");
    const std::string secret_dsn = dsn() + " password=Sup3rSecretPw";
    const Result first = pgtide(args("run", {"--once"}, secret_dsn));
    ASSERT_EQ(first.code, 0) << describe(this, first.out, first.err);
    for (const auto& command : {"check", "status"}) {
        const Result r = pgtide(args(command, {}, secret_dsn));
        EXPECT_EQ(r.code, 0) << describe(this, r.out, r.err);
        EXPECT_EQ((r.out + r.err).find("Sup3rSecretPw"), std::string::npos) << r.out << r.err;
    }
}

// One line of `check`'s text output: "FAIL <check>: <message>[; fix: <fix>]".
std::string verdict_line(const std::string& out, const std::string& prefix) {
    const std::string text = "\n" + out;
    const auto at = text.find("\n" + prefix);
    if (at == std::string::npos) {
        return {};
    }
    const auto end = text.find('\n', at + 1);
    return text.substr(at + 1, end - at - 1);
}

TEST_F(Commands, CheckFailsForARoleWithoutReplicationAndWithoutSelect) {
    exec("CREATE TABLE a (id int PRIMARY KEY)");
    exec("CREATE TABLE b (id int PRIMARY KEY)");
    exec("CREATE PUBLICATION pub FOR TABLE a, b");
    const std::string role = "r_" + dbname();
    exec("CREATE ROLE " + role + " LOGIN");
    exec("GRANT SELECT ON b TO " + role);
    const Result r = pgtide(args("check", {}, dsn() + " user=" + role));
    exec("DROP OWNED BY " + role + "; DROP ROLE " + role);
    EXPECT_EQ(r.code, 3) << describe(this, r.out, r.err);
    EXPECT_EQ(verdict_line(r.out, "FAIL role:"),
              "FAIL role: role " + role +
                  " has neither REPLICATION nor SUPERUSER; fix: ALTER ROLE \"" + role +
                  "\" REPLICATION")
        << r.out;
    EXPECT_EQ(verdict_line(r.out, "FAIL select privilege:"),
              "FAIL select privilege: role " + role +
                  " cannot SELECT from public.a; fix: GRANT "
                  "SELECT ON public.a TO \"" +
                  role + "\"")
        << r.out;
}

TEST_F(Commands, CheckFailsWhenTheSourceIsUnreachableAndHidesThePassword) {
    const Result r = pgtide(
        args("check", {}, "host=127.0.0.1 port=1 dbname=app user=nobody password=Hunter2Secret"));
    EXPECT_EQ(r.code, 3) << describe(this, r.out, r.err);
    const std::string line = verdict_line(r.out, "FAIL source:");
    EXPECT_EQ(line.rfind("FAIL source: cannot connect (host=127.0.0.1 port=1 dbname=app "
                         "user=nobody password=",
                         0),
              0u)
        << r.out;
    EXPECT_NE(line.find("Connection refused Is the server running on that host and accepting "
                        "TCP/IP connections?; fix: check source.dsn, that PostgreSQL runs and "
                        "listens there, and that pg_hba.conf lets this role in"),
              std::string::npos)
        << r.out;
    EXPECT_EQ((r.out + r.err).find("Hunter2Secret"), std::string::npos) << r.out << r.err;
}

TEST_F(Commands, CheckFailsForASlotTheDestinationCannotProveItsOwn) {
    exec("CREATE TABLE a (id int PRIMARY KEY)");
    exec("CREATE PUBLICATION pub FOR TABLE a");
    exec("SELECT pg_create_logical_replication_slot('" + slot_ + "', 'pgoutput')");
    const Result r = pgtide(args("check"));
    EXPECT_EQ(r.code, 3) << describe(this, r.out, r.err);
    const std::string line = verdict_line(r.out, "FAIL slot " + slot_ + ":");
    EXPECT_EQ(line.rfind("FAIL slot " + slot_ + ": replication slot " + slot_ +
                             " exists (inactive, wal_status reserved",
                         0),
              0u)
        << r.out;
    EXPECT_NE(line.find(") and this destination cannot prove it created it; fix: drop it (SELECT "
                        "pg_drop_replication_slot('" +
                        slot_ +
                        "')), choose another source.slot, or set existing_slot = "
                        "\"restart_snapshot\""),
              std::string::npos)
        << r.out;
}

TEST_F(Commands, CheckFailsForADestinationThatCannotBeWritten) {
    exec("CREATE TABLE a (id int PRIMARY KEY)");
    exec("CREATE PUBLICATION pub FOR TABLE a");
    {
        std::ofstream f(sqlite_path_);
        f << "this is a text file, not an SQLite database, and it is long enough to tell\n";
    }
    Result r = pgtide(args("check"));
    EXPECT_EQ(r.code, 2) << describe(this, r.out, r.err);
    EXPECT_EQ(verdict_line(r.out, "FAIL destination:"),
              "FAIL destination: sqlite destination " + sqlite_path_ +
                  ": reading its schema: file is not a database (SQLite code 26); fix: point "
                  "destination.url at an SQLite file pgtide created, or at a new path")
        << r.out;

    // A destination in a directory that does not exist.
    std::vector<std::string> a = args("check");
    const std::string missing = (dir_ / "no" / "such" / "dir").string();
    a.back() = "sqlite:" + missing + "/x.db";
    r = pgtide(a);
    EXPECT_EQ(r.code, 2) << describe(this, r.out, r.err);
    EXPECT_EQ(verdict_line(r.out, "FAIL destination:"),
              "FAIL destination: directory " + missing +
                  " does not exist; fix: create it (mkdir -p " + missing +
                  ") or fix destination.url")
        << r.out;
}

TEST_F(Commands, CheckFailsWhenNoReplicationSlotIsFree) {
    PgServer small({"max_replication_slots = 1"});
    small.exec("postgres", "CREATE TABLE a (id int PRIMARY KEY)");
    small.exec("postgres", "CREATE PUBLICATION pub FOR TABLE a");
    small.exec("postgres", "SELECT pg_create_logical_replication_slot('someone_else', 'pgoutput')");
    const Result r = pgtide(args("check", {}, small.dsn()));
    EXPECT_EQ(r.code, 3) << describe(this, r.out, r.err);
    EXPECT_EQ(verdict_line(r.out, "FAIL max_replication_slots:"),
              "FAIL max_replication_slots: 1 of max_replication_slots 1 in use; pgtide needs 1 "
              "more; fix: ALTER SYSTEM SET max_replication_slots = 2; then restart PostgreSQL (or "
              "drop unused slots: SELECT slot_name FROM pg_replication_slots WHERE NOT active)")
        << r.out;
}

TEST_F(Commands, CheckFailsWhenWalLevelIsNotLogical) {
    PgServer replica_level({"wal_level = replica"});
    replica_level.exec("postgres", "CREATE TABLE a (id int PRIMARY KEY)");
    replica_level.exec("postgres", "CREATE PUBLICATION pub FOR TABLE a");
    const Result r = pgtide(args("check", {}, replica_level.dsn()));
    EXPECT_EQ(r.code, 3) << describe(this, r.out, r.err);
    EXPECT_EQ(verdict_line(r.out, "FAIL wal_level:"),
              "FAIL wal_level: wal_level is replica, not logical; fix: ALTER SYSTEM SET wal_level "
              "= logical; then restart PostgreSQL")
        << r.out;
    // `run` refuses the same way, before it creates anything.
    const Result run = pgtide(args("run", {"--once"}, replica_level.dsn()));
    EXPECT_EQ(run.code, 3) << describe(this, run.out, run.err);
    EXPECT_NE(run.err.find("error: wal_level is replica on the source, not logical: ALTER SYSTEM "
                           "SET wal_level = logical; then restart PostgreSQL"),
              std::string::npos)
        << run.err;
    EXPECT_EQ(replica_level.query_value("postgres", "SELECT count(*) FROM pg_replication_slots"),
              "0");
}

// Configuration errors through the binary: exit 2, the file, line and key named.
TEST_F(Commands, ConfigurationErrorsNameTheFileLineAndKey) {
    struct Case {
        std::string toml;
        std::string expected; // in stderr, with "<file>:<line>"
    };
    const std::vector<Case> cases = {
        {"[source]\ndsn = \"x\"\nslot_name = \"s\"\n", "unknown key \"source.slot_name\" at "},
        {"[snapshot]\nparallel_tables = \"four\"\n", "snapshot.parallel_tables"},
        {"[apply]\nflush_interval = \"100 parsecs\"\n", "apply.flush_interval"},
        {"[snapshot]\nbatch_bytes = \"4 parsecs\"\n", "snapshot.batch_bytes"},
        {"[destination]\ndeletes = \"sometimes\"\n", "destination.deletes"},
        {"[source]\ndsn = \"${PGTIDE_TEST_UNSET_VARIABLE}\"\n", "PGTIDE_TEST_UNSET_VARIABLE"},
        {"[snapshot]\npage_rows = 0\n", "snapshot.page_rows"},
        {"[snapshot]\nchunk_rows = 0\n", "snapshot.chunk_rows"},
        {"[snapshot]\ncommit_rows = 0\n", "snapshot.commit_rows"},
    };
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const std::string path = (dir_ / ("bad" + std::to_string(i) + ".toml")).string();
        {
            std::ofstream f(path);
            f << cases[i].toml;
        }
        for (const char* command : {"run", "check"}) {
            const Result r = pgtide(args(command, {"-c", path}));
            EXPECT_EQ(r.code, 2) << command << " " << cases[i].toml << describe(this, r.out, r.err);
            EXPECT_NE(r.err.find(path + ":"), std::string::npos) << command << "\n" << r.err;
            EXPECT_NE(r.err.find(cases[i].expected), std::string::npos) << command << "\n" << r.err;
        }
    }
}

// ---- status ---------------------------------------------------------------------------------

TEST_F(Commands, StatusAfterRunOnceShowsTheExactCheckpointAndTables) {
    exec("CREATE TABLE a (id int PRIMARY KEY, v text)");
    exec("CREATE TABLE b (id int PRIMARY KEY)");
    exec("INSERT INTO a SELECT g, 'v' || g FROM generate_series(1, 25) g");
    exec("INSERT INTO b SELECT g FROM generate_series(1, 7) g");
    exec("CREATE PUBLICATION pub FOR TABLE a, b");
    run_once();
    exec("INSERT INTO a VALUES (100, 'streamed'), (101, 'streamed')");
    exec("DELETE FROM b WHERE id = 1");
    const std::string reached = run_once();
    const std::string stored =
        SqliteFile(sqlite_path_)
            .value("SELECT lsn FROM _pgtide_checkpoint WHERE slot_name = '" + slot_ + "'");
    ASSERT_EQ(lsn_text(std::stoull(stored)), reached);

    const Result r = pgtide(args("status", {"--json"}));
    ASSERT_EQ(r.code, 0) << describe(this, r.out, r.err);
    const Json j = parse_json(r.out);
    EXPECT_EQ(j["slot"].str(), slot_);
    EXPECT_EQ(j["destination"].str(), "sqlite:" + sqlite_path_);
    const Json& cp = j["checkpoint"];
    EXPECT_EQ(cp["lsn"].str(), reached);
    EXPECT_EQ(cp["epoch"].integer(), 1);
    EXPECT_EQ(cp["phase"].str(), "streaming");
    EXPECT_EQ(cp["database"].str(), dbname());
    EXPECT_EQ(cp["system_identifier"].str(),
              query_value("SELECT system_identifier::text FROM pg_control_system()"));
    EXPECT_FALSE(cp["lease_held"].boolean()); // released by the clean exit of run --once

    // Lag: the source's position minus the checkpoint, both as status read them.
    const Json& src = j["source"];
    EXPECT_TRUE(src["reachable"].boolean());
    const auto current = lsn_value(src["current_lsn"].str());
    ASSERT_GE(current, lsn_value(reached));
    EXPECT_EQ(j["lag"]["bytes"].integer(), (long long)(current - lsn_value(reached)));

    // The slot as pg_replication_slots shows it (an inactive slot does not move).
    const Json& slot = j["replication_slot"];
    EXPECT_TRUE(slot["exists"].boolean());
    EXPECT_FALSE(slot["active"].boolean());
    EXPECT_EQ(slot["wal_status"].str(), "reserved");
    const Rows pg_slot = query("SELECT restart_lsn::text, confirmed_flush_lsn::text FROM "
                               "pg_replication_slots WHERE slot_name = '" +
                               slot_ + "'");
    ASSERT_EQ(pg_slot.size(), 1u);
    EXPECT_EQ(slot["restart_lsn"].str(), *pg_slot[0][0]);
    EXPECT_EQ(slot["confirmed_flush_lsn"].str(), *pg_slot[0][1]);
    EXPECT_EQ(slot["retained_wal_bytes"].integer(),
              (long long)(current - lsn_value(*pg_slot[0][0])));

    const JsonArray& tables = j["tables"].arr();
    ASSERT_EQ(tables.size(), 2u) << r.out;
    EXPECT_EQ(tables[0]["source_table"].str(), "public.a");
    EXPECT_EQ(tables[0]["target_table"].str(), "a");
    EXPECT_EQ(tables[0]["state"].str(), "ready");
    EXPECT_EQ(tables[0]["epoch"].integer(), 1);
    EXPECT_EQ(tables[0]["rows_copied"].integer(), 25);
    EXPECT_EQ(tables[0]["rows"].integer(), 27);
    EXPECT_EQ(tables[1]["source_table"].str(), "public.b");
    EXPECT_EQ(tables[1]["state"].str(), "ready");
    EXPECT_EQ(tables[1]["rows_copied"].integer(), 7);
    EXPECT_EQ(tables[1]["rows"].integer(), 6);

    // The text form says the same in words.
    const Result text = pgtide(args("status"));
    ASSERT_EQ(text.code, 0) << describe(this, text.out, text.err);
    EXPECT_NE(text.out.find("checkpoint:   " + reached + " in epoch 1, phase streaming"),
              std::string::npos)
        << text.out;
    EXPECT_NE(text.out.find("  public.a -> a: ready, epoch 1, copied 25 rows at "),
              std::string::npos)
        << text.out;
    EXPECT_NE(text.out.find(", 27 rows now\n"), std::string::npos) << text.out;
}

TEST_F(Commands, StatusAndDropWhileARunHoldsTheDestination) {
    exec("CREATE TABLE a (id int PRIMARY KEY)");
    exec("INSERT INTO a SELECT generate_series(1, 10)");
    exec("CREATE PUBLICATION pub FOR TABLE a");
    PgtideProcess run(args("run"));
    exec("INSERT INTO a VALUES (11)");
    const auto target = lsn_value(pg().current_wal_lsn());
    // Bounded wait (a guard, not pacing) until the runner has checkpointed past the insert.
    bool caught_up = false;
    for (int i = 0; i < 2400 && !caught_up && run.running(); ++i) {
        try {
            const std::string lsn = SqliteFile(sqlite_path_)
                                        .value("SELECT lsn FROM _pgtide_checkpoint WHERE "
                                               "slot_name = '" +
                                               slot_ + "'");
            caught_up = std::stoull(lsn) >= target &&
                        query_value("SELECT active::text FROM pg_replication_slots WHERE "
                                    "slot_name = '" +
                                    slot_ + "'") == "true";
        } catch (const std::exception&) {
        }
        if (!caught_up) {
            std::this_thread::sleep_for(25ms);
        }
    }
    ASSERT_TRUE(caught_up) << run.stderr_text();

    const Result r = pgtide(args("status", {"--json"}));
    ASSERT_EQ(r.code, 0) << describe(this, r.out, r.err);
    const Json j = parse_json(r.out);
    EXPECT_TRUE(j["checkpoint"]["lease_held"].boolean());
    EXPECT_TRUE(j["replication_slot"]["active"].boolean());
    EXPECT_EQ(j["replication_slot"]["active_pid"].integer(),
              std::stoll(query_value("SELECT active_pid::text FROM pg_replication_slots WHERE "
                                     "slot_name = '" +
                                     slot_ + "'")));
    EXPECT_EQ(j["tables"].arr().at(0)["rows"].integer(), 11);

    const Result drop = pgtide(args("drop", {"--yes"}));
    EXPECT_EQ(drop.code, 4) << describe(this, drop.out, drop.err);
    EXPECT_NE(drop.err.find("a pgtide process holds sqlite:" + sqlite_path_ + " (lease until "),
              std::string::npos)
        << drop.err;
    EXPECT_EQ(slot_count(), "1");

    run.kill(SIGTERM);
    EXPECT_EQ(run.wait(), 0) << run.stderr_text();
}

// ---- drop -----------------------------------------------------------------------------------

TEST_F(Commands, DropRemovesTheSlotThenHasNothingToDrop) {
    exec("CREATE TABLE a (id int PRIMARY KEY)");
    exec("INSERT INTO a SELECT generate_series(1, 5)");
    exec("CREATE PUBLICATION pub FOR TABLE a");
    const std::string reached = run_once();
    ASSERT_EQ(slot_count(), "1");
    const std::string system =
        query_value("SELECT system_identifier::text FROM pg_control_system()");
    const std::string restart = query_value(
        "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = '" + slot_ + "'");

    const Result first = pgtide(args("drop", {"--yes"}));
    ASSERT_EQ(first.code, 0) << describe(this, first.out, first.err);
    EXPECT_EQ(slot_count(), "0");
    EXPECT_EQ(first.out.rfind("dropped: replication slot " + slot_ + " on the source (system " +
                                  system + ", database " + dbname() + "; it held WAL from " +
                                  restart + ", ",
                              0),
              0u)
        << first.out;
    EXPECT_NE(first.out.find("\nkept: sqlite:" + sqlite_path_ +
                             " with its tables and metadata (checkpoint " + reached +
                             ", epoch 1)\n"),
              std::string::npos)
        << first.out;
    EXPECT_NE(first.out.find("\nnext: "), std::string::npos) << first.out;
    // The destination is untouched.
    EXPECT_EQ(SqliteFile(sqlite_path_).value("SELECT count(*) FROM a"), "5");

    const Result second = pgtide(args("drop", {"--yes"}));
    ASSERT_EQ(second.code, 0) << describe(this, second.out, second.err);
    EXPECT_EQ(second.out.rfind("nothing to drop: replication slot " + slot_ +
                                   " does not exist on the source (system " + system +
                                   ", database " + dbname() + ")\n",
                               0),
              0u)
        << second.out;

    // The next run reports the lost slot and says how to go on.
    const Result after = pgtide(args("run", {"--once"}));
    EXPECT_EQ(after.code, 5) << describe(this, after.out, after.err);
}

TEST_F(Commands, DropRefusesADestinationOfAnotherDatabase) {
    exec("CREATE TABLE a (id int PRIMARY KEY)");
    exec("CREATE PUBLICATION pub FOR TABLE a");
    run_once();
    ASSERT_EQ(slot_count(), "1");
    const std::string other = pg().create_database();
    const std::string system =
        query_value("SELECT system_identifier::text FROM pg_control_system()");

    const Result r = pgtide(args("drop", {"--yes"}, pg().dsn(other)));
    EXPECT_EQ(r.code, 4) << describe(this, r.out, r.err);
    EXPECT_NE(r.err.find("sqlite:" + sqlite_path_ + " was filled from system " + system +
                         ", database " + dbname() + ", but the source is system " + system +
                         ", database " + other + "; refusing to drop replication slot " + slot_ +
                         " there"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(slot_count(), "1");
}

TEST_F(Commands, DropRefusesASlotTheDestinationDidNotCreate) {
    exec("CREATE TABLE a (id int PRIMARY KEY)");
    exec("CREATE PUBLICATION pub FOR TABLE a");
    exec("SELECT pg_create_logical_replication_slot('" + slot_ + "', 'pgoutput')");
    // A destination file without a checkpoint for the slot.
    {
        const Result r = pgtide(args("drop", {"--yes"}));
        EXPECT_EQ(r.code, 2) << describe(this, r.out, r.err); // no destination file at all
    }
    make_foreign_sqlite_file(sqlite_path_);
    const Result r = pgtide(args("drop", {"--yes"}));
    EXPECT_EQ(r.code, 4) << describe(this, r.out, r.err);
    EXPECT_NE(r.err.find("sqlite:" + sqlite_path_ + " has no checkpoint for slot " + slot_ +
                         ", so it cannot prove that replication slot " + slot_ +
                         " on the source is its own; nothing was dropped"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(slot_count(), "1");
}

} // namespace
} // namespace pgtide::testing
