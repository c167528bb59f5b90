// ReplicationTest: a fresh source database and a private SQLite destination per test, with the
// helpers every end-to-end test needs (run pgtide, read the destination, compare row by row).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {

class ReplicationTest : public PgTest {
protected:
    void SetUp() override {
        PgTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        // The source's text forms in comparison queries, as pgtide's sessions print them.
        for (const char* setting : {"TimeZone = 'UTC'", "extra_float_digits = 1",
                                    "bytea_output = 'hex'", "DateStyle = 'ISO'"}) {
            exec("ALTER DATABASE " + dbname() + " SET " + setting);
        }
        dir_ = std::filesystem::temp_directory_path() /
               ("pgtide-it-" + std::to_string(::getpid()) + "-" + dbname());
        std::filesystem::create_directories(dir_);
        sqlite_path_ = (dir_ / "replica.db").string();
    }

    void TearDown() override {
        if (!dir_.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(dir_, ec);
        }
    }

    std::string slot() const { return "s_" + dbname(); }

    /// `pgtide run [--once --json]` with flags for this test's source, publication `pub`,
    /// slot and destination.
    std::vector<std::string> run_args(bool once) const {
        std::vector<std::string> a{"run"};
        if (once) {
            a.push_back("--once");
            a.push_back("--json");
        }
        for (const std::string& s :
             {std::string("--source"), dsn(), std::string("--publication"), std::string("pub"),
              std::string("--slot"), slot(), std::string("--to"), "sqlite:" + sqlite_path_}) {
            a.push_back(s);
        }
        return a;
    }

    /// Runs `pgtide run --once` to completion, expecting exit 0; returns its JSON summary.
    std::string run_once() const {
        std::string out;
        std::string err;
        const int code = PgtideProcess::run(run_args(true), &out, &err);
        EXPECT_EQ(code, 0) << "stdout:\n" << out << "\nstderr:\n" << err;
        return out;
    }

    /// One value from the destination, or nullopt while the file or table is not there yet.
    std::optional<std::string> dest_value(const std::string& sql) const {
        try {
            const Rows r = SqliteFile(sqlite_path_).rows(sql);
            if (r.size() == 1 && r[0].size() == 1) {
                return r[0][0];
            }
        } catch (const std::exception&) {
        }
        return std::nullopt;
    }

    /// Bounded wait (60 s) until `done()`; polls, never sleeps blindly.
    static bool wait_for(const std::function<bool()>& done) {
        using namespace std::chrono_literals;
        for (int i = 0; i < 6000; ++i) {
            if (done()) {
                return true;
            }
            std::this_thread::sleep_for(10ms);
        }
        return false;
    }

    /// Bounded wait until the destination answers `sql` with `expected`.
    bool wait_for_dest(const std::string& sql, const std::string& expected) const {
        return wait_for([&] { return dest_value(sql) == expected; });
    }

    /// The source's rows of `source_sql` equal the destination's rows of `dest_sql`, in order.
    void expect_equal(const std::string& source_sql, const std::string& dest_sql) const {
        const Rows source = query(source_sql);
        const Rows dest = SqliteFile(sqlite_path_).rows(dest_sql);
        ASSERT_EQ(source.size(), dest.size()) << source_sql;
        for (std::size_t i = 0; i < source.size(); ++i) {
            ASSERT_EQ(source[i], dest[i]) << "row " << i << " of " << dest_sql;
        }
    }

    std::filesystem::path dir_;
    std::string sqlite_path_;
};

} // namespace pgtide::testing
