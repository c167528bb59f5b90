// `pgtide bench` on the test server, through the real binary: its JSON, that it drops all it
// created, and its refusals. Figures are checked for shape only, never for speed.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/support/command.hpp"
#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"

namespace pgtide::testing {
namespace {

// ---- just enough JSON -----------------------------------------------------------------------

struct Value;
using Object = std::map<std::string, Value>;
using Array = std::vector<Value>;

struct Value {
    std::variant<std::nullptr_t, bool, double, std::string, std::shared_ptr<Array>,
                 std::shared_ptr<Object>>
        v;

    bool is_null() const { return std::holds_alternative<std::nullptr_t>(v); }
    bool is_number() const { return std::holds_alternative<double>(v); }
    double num() const { return std::get<double>(v); }
    const std::string& str() const { return std::get<std::string>(v); }
    bool boolean() const { return std::get<bool>(v); }
    const Array& arr() const { return *std::get<std::shared_ptr<Array>>(v); }
    const Object& obj() const { return *std::get<std::shared_ptr<Object>>(v); }
    const Value& operator[](const std::string& key) const {
        const auto it = obj().find(key);
        if (it == obj().end()) {
            throw std::runtime_error("no key " + key);
        }
        return it->second;
    }
};

class Parser {
public:
    explicit Parser(const std::string& text) : s_(text) {}

    Value document() {
        Value v = value();
        skip_space();
        if (i_ != s_.size()) {
            throw std::runtime_error("text after the JSON value at " + std::to_string(i_));
        }
        return v;
    }

private:
    void skip_space() {
        while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])) != 0) {
            ++i_;
        }
    }
    char next() {
        skip_space();
        if (i_ >= s_.size()) {
            throw std::runtime_error("unexpected end of JSON");
        }
        return s_[i_];
    }
    void expect(char c) {
        if (next() != c) {
            throw std::runtime_error(std::string("expected ") + c + " at " + std::to_string(i_));
        }
        ++i_;
    }
    std::string string() {
        expect('"');
        std::string out;
        while (i_ < s_.size() && s_[i_] != '"') {
            char c = s_[i_++];
            if (c == '\\') {
                c = s_.at(i_++);
                if (c == 'n') {
                    c = '\n';
                } else if (c == 'u') {
                    c = char(std::stoi(s_.substr(i_, 4), nullptr, 16));
                    i_ += 4;
                }
            }
            out += c;
        }
        expect('"');
        return out;
    }
    Value value() {
        Value v;
        const char c = next();
        if (c == '{') {
            ++i_;
            auto o = std::make_shared<Object>();
            while (next() != '}') {
                std::string key = string();
                expect(':');
                (*o)[key] = value();
                if (next() == ',') {
                    ++i_;
                }
            }
            ++i_;
            v.v = o;
        } else if (c == '[') {
            ++i_;
            auto a = std::make_shared<Array>();
            while (next() != ']') {
                a->push_back(value());
                if (next() == ',') {
                    ++i_;
                }
            }
            ++i_;
            v.v = a;
        } else if (c == '"') {
            v.v = string();
        } else if (s_.compare(i_, 4, "null") == 0) {
            i_ += 4;
        } else if (s_.compare(i_, 4, "true") == 0) {
            i_ += 4;
            v.v = true;
        } else if (s_.compare(i_, 5, "false") == 0) {
            i_ += 5;
            v.v = false;
        } else {
            std::size_t used = 0;
            v.v = std::stod(s_.substr(i_), &used);
            i_ += used;
        }
        return v;
    }

    const std::string& s_;
    std::size_t i_ = 0;
};

// ---- fixture --------------------------------------------------------------------------------

class BenchCommand : public PgTest {
protected:
    void SetUp() override {
        PgTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        tmp_ = make_temp_dir("pgtide-bench-test");
    }
    void TearDown() override {
        if (!tmp_.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(tmp_, ec);
        }
    }

    struct Result {
        int code = 0;
        std::string out;
        std::string err;
    };

    // `pgtide bench ARGS` with TMPDIR pointing at the test's own directory.
    Result bench(std::vector<std::string> args, std::vector<std::string> env = {}) const {
        args.insert(args.begin(), "bench");
        env.push_back("TMPDIR=" + tmp_);
        PgtideProcess p(std::move(args), std::move(env));
        Result r;
        r.code = p.wait();
        r.out = p.stdout_text();
        r.err = p.stderr_text();
        if (std::getenv("PGTIDE_SHOW_OUTPUT") != nullptr) { // to read the output by eye
            std::cerr << "exit " << r.code << "\n" << r.out << r.err << "\n";
        }
        return r;
    }

    // What bench may leave behind: its schema and publication here, its slots anywhere.
    std::string leftovers() const {
        return query_value(
            "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'pgtide_bench') || ' ' || "
            "(SELECT count(*) FROM pg_publication WHERE pubname = 'pgtide_bench') || ' ' || "
            "(SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'pgtide_bench%')");
    }

    bool tmp_is_empty() const { return std::filesystem::is_empty(tmp_); }

    std::string tmp_;
};

// Every figure of every scenario has a name and positive numbers; CPU and peak RSS are either
// absent (null: a reference measured inside the bench) or non-negative, and pgtide's RSS is
// there.
void expect_figures(const Value& scenario, std::size_t count) {
    const Array& figures = scenario["figures"].arr();
    ASSERT_EQ(figures.size(), count) << scenario["scenario"].str();
    for (const Value& f : figures) {
        const std::string name = f["name"].str();
        EXPECT_FALSE(name.empty());
        for (const char* key :
             {"rows", "bytes", "seconds", "rows_per_s", "mb_per_s", "pgtide_over_this"}) {
            ASSERT_TRUE(f[key].is_number()) << name << " " << key;
            EXPECT_GT(f[key].num(), 0) << name << " " << key;
        }
        for (const char* key : {"cpu_seconds", "peak_rss_mb"}) {
            if (!f[key].is_null()) {
                EXPECT_GE(f[key].num(), 0) << name << " " << key;
            }
        }
        EXPECT_TRUE(f["note"].str().find("WRONGLY") == std::string::npos) << name;
    }
    EXPECT_GT(figures[0]["peak_rss_mb"].num(), 0);
    EXPECT_EQ(figures[0]["pgtide_over_this"].num(), 1.0);
}

Value parse_bench(const std::string& out) {
    return Parser(out).document();
}

TEST_F(BenchCommand, MeasuresBothScenariosAndDropsEverything) {
    const Result r = bench({"--source", dsn(), "--scale", "0.001", "--json"});
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const Value j = parse_bench(r.out);
    EXPECT_EQ(j["scale"].num(), 0.001);
    EXPECT_FALSE(j["postgresql"].str().empty());
    EXPECT_FALSE(j["sqlite"].str().empty());
    EXPECT_TRUE(j["verified"].boolean());
    EXPECT_EQ(j["narrow_rows"].num(), 2000);
    EXPECT_EQ(j["wide_rows"].num(), 300);
    EXPECT_EQ(j["changes"].num(), 1000);
    const Array& scenarios = j["scenarios"].arr();
    ASSERT_EQ(scenarios.size(), 2u);
    EXPECT_EQ(scenarios[0]["scenario"].str(), "snapshot");
    EXPECT_TRUE(scenarios[0]["verified"].boolean());
    EXPECT_EQ(scenarios[0]["figures"].arr()[0]["rows"].num(), 2300);
    expect_figures(scenarios[0], 3); // pgtide, (a) COPY drain, (b) SQLite INSERT
    EXPECT_EQ(scenarios[1]["scenario"].str(), "stream_txn10");
    EXPECT_TRUE(scenarios[1]["verified"].boolean());
    EXPECT_GT(scenarios[1]["wal_bytes"].num(), 0);
    expect_figures(scenarios[1], 2); // pgtide, the decoding reference
    EXPECT_EQ(scenarios[1]["figures"].arr()[0]["rows"].num(), 1000);

    EXPECT_EQ(leftovers(), "0 0 0");
    EXPECT_TRUE(tmp_is_empty()) << "the temporary destination and scratch files are removed";
}

TEST_F(BenchCommand, PrintsTablesAndDrainsWithoutPgRecvlogical) {
    // No PATH: neither pg_recvlogical nor pg_config is found, so pgtide's own replication
    // connection drains the stream reference. The schema an interrupted bench left (with the
    // mark) is taken over.
    exec("CREATE SCHEMA pgtide_bench; COMMENT ON SCHEMA pgtide_bench IS 'created by pgtide "
         "bench; dropped when it ends'; CREATE TABLE pgtide_bench.narrow (id int)");
    const Result r = bench({"--source=" + dsn(), "--scale=0.001"}, {"PATH=/nonexistent"});
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("\nSnapshot into SQLite: narrow + wide, 2300 rows, "), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("pgtide ÷ this"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\n  (b) SQLite prepared INSERT "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\nStream into SQLite: 1000 changes on narrow in transactions of 10 "),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("\n  walsender drain, pgtide's connection "), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("dropping what an interrupted pgtide bench left behind"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(leftovers(), "0 0 0");
    EXPECT_TRUE(tmp_is_empty());
}

TEST_F(BenchCommand, RefusesASchemaItDidNotCreateAndLeavesItAlone) {
    exec("CREATE SCHEMA pgtide_bench; COMMENT ON SCHEMA pgtide_bench IS 'mine'; "
         "CREATE TABLE pgtide_bench.narrow (id int); INSERT INTO pgtide_bench.narrow VALUES (7)");
    const Result r = bench({"--source", dsn(), "--scale", "0.001", "--json"});
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("schema pgtide_bench already exists and pgtide bench did not create it"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(query_value("SELECT obj_description('pgtide_bench'::regnamespace, 'pg_namespace')"),
              "mine");
    EXPECT_EQ(query_value("SELECT string_agg(id::text, ',') FROM pgtide_bench.narrow"), "7");
    EXPECT_EQ(query_value("SELECT count(*) FROM pg_class WHERE relnamespace = "
                          "'pgtide_bench'::regnamespace"),
              "1");
    EXPECT_EQ(leftovers(), "1 0 0");
    EXPECT_TRUE(tmp_is_empty());
}

TEST_F(BenchCommand, RoleWithoutReplicationIsSourceNotReady) {
    const std::string role = "bench_plain_" + dbname();
    exec("CREATE ROLE " + role + " LOGIN");
    const Result r = bench({"--source", dsn() + " user=" + role, "--scale", "0.001"});
    exec("DROP ROLE " + role);
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    EXPECT_NE(r.err.find("role: role " + role + " has neither REPLICATION nor SUPERUSER"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(leftovers(), "0 0 0");
}

TEST_F(BenchCommand, UsageErrors) {
    EXPECT_EQ(bench({"--scale", "0.1"}).code, 2);
    EXPECT_EQ(bench({"--source", dsn(), "--scale", "0"}).code, 2);
    EXPECT_EQ(bench({"--source", dsn(), "--to", "mysql://x"}).code, 2);
    EXPECT_EQ(bench({"--source", dsn(), "--rows", "5"}).code, 2);
    const Result help = bench({"--help"});
    EXPECT_EQ(help.code, 0);
    EXPECT_NE(help.out.find("Usage: pgtide bench --source DSN"), std::string::npos) << help.out;
    EXPECT_EQ(leftovers(), "0 0 0");
}

} // namespace
} // namespace pgtide::testing
