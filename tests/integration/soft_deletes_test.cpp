// End-to-end: `destination.deletes = "soft"` into SQLite and into PostgreSQL. Rows deleted on
// the source (deletes, truncates, the old key of a key change) stay in the destination marked
// `_pgtide_deleted = 1`, with the values they had; the live rows equal the source row by row;
// a table copied anew keeps its deleted rows; hard deletes refuse a table that has them.
#include <csignal>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/pgtide_process.hpp"
#include "tests/support/replication_test.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

// `gone` and `gone_w` (not published) hold, on the source, the rows the destination must keep
// marked deleted. `big` is stored out of line for one row in ten: updates that leave it alone
// send it unchanged ('u'), and a key change of such a row moves it.
constexpr const char* kCreateSource = R"sql(
CREATE TABLE t (id bigint PRIMARY KEY, v text, big text);
ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE w (k int PRIMARY KEY, label text);
CREATE TABLE gone (id bigint, v text, big text);
CREATE TABLE gone_w (k int, label text);
INSERT INTO t SELECT g, 'v ' || g,
    CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 400) ELSE 'small ' || g END
    FROM generate_series(1, 1000) g;
INSERT INTO w SELECT g, 'w ' || g FROM generate_series(1, 50) g;
CREATE PUBLICATION pub FOR TABLE t, w;
)sql";

constexpr const char* kLiveT = "SELECT id, v, big FROM t WHERE _pgtide_deleted = 0 ORDER BY id";
constexpr const char* kDeletedT = "SELECT id, v, big FROM t WHERE _pgtide_deleted = 1 ORDER BY id";
constexpr const char* kLiveW = "SELECT k, label FROM w WHERE _pgtide_deleted = 0 ORDER BY k";
constexpr const char* kDeletedW = "SELECT k, label FROM w WHERE _pgtide_deleted = 1 ORDER BY k";

class SoftDeletes : public ReplicationTest, public ::testing::WithParamInterface<const char*> {
protected:
    bool postgres() const { return std::string(GetParam()) == "postgresql"; }

    std::string config_path() const { return (dir_ / "pgtide.toml").string(); }

    /// pgtide.toml for publication "pub" into this test's destination; soft deletes or not;
    /// then `tuning` (TOML sections).
    void write_config(bool soft, const std::string& tuning = "") {
        if (postgres() && dest_db_.empty()) {
            dest_db_ = pg().create_database();
        }
        const std::string url = postgres() ? "postgresql://postgres@/" + dest_db_ +
                                                 "?host=" + pg().socket_dir() +
                                                 "&port=" + std::to_string(pg().port())
                                           : "sqlite:" + sqlite_path_;
        std::ofstream f(config_path());
        f << "[source]\ndsn = \"" << dsn() << "\"\npublications = [\"pub\"]\nslot = \"" << slot()
          << "\"\n[destination]\nurl = \"" << url << "\"\n"
          << (soft ? "deletes = \"soft\"\n" : "") << tuning;
    }

    /// `command -c pgtide.toml`, with --once for "run".
    std::vector<std::string> args(std::string command) const {
        std::vector<std::string> a{std::move(command), "-c", config_path()};
        if (a[0] == "run") {
            a.push_back("--once");
        }
        return a;
    }

    /// `pgtide run --once`; its exit code, with its output in `err`.
    int run_once(std::string* err) const {
        std::string out;
        return PgtideProcess::run(args("run"), &out, err);
    }

    Rows dest_rows(const std::string& sql) const {
        return postgres() ? pg().query(dest_db_, sql) : SqliteFile(sqlite_path_).rows(sql);
    }

    void dest_exec(const std::string& sql) const {
        if (postgres()) {
            pg().exec(dest_db_, sql);
        } else {
            write_sqlite(sqlite_path_, sql);
        }
    }

    /// The source's rows of `source_sql` equal the destination's rows of `dest_sql`, in order,
    /// and there are `rows` of them.
    void expect_rows(const std::string& source_sql, const std::string& dest_sql,
                     std::size_t rows) const {
        const Rows source = query(source_sql);
        const Rows dest = dest_rows(dest_sql);
        ASSERT_EQ(source.size(), rows) << source_sql;
        ASSERT_EQ(dest.size(), source.size()) << dest_sql;
        for (std::size_t i = 0; i < source.size(); ++i) {
            ASSERT_EQ(source[i], dest[i]) << "row " << i << " of " << dest_sql;
        }
    }

    std::string dest_db_; ///< the PostgreSQL destination database, when postgres()
};

TEST_P(SoftDeletes, DeletedRowsStayMarkedAndLiveRowsEqualTheSource) {
    exec(kCreateSource);

    // Bootstrapped with hard deletes: switching to soft adds the column, every row live.
    write_config(false);
    std::string err;
    ASSERT_EQ(run_once(&err), 0) << err;
    write_config(true);
    ASSERT_EQ(run_once(&err), 0) << err;
    expect_rows("SELECT id, v, big FROM t ORDER BY id", kLiveT, 1000);
    expect_rows("SELECT k, label FROM w ORDER BY k", kLiveW, 50);
    EXPECT_EQ(dest_rows(kDeletedT).size(), 0u);

    // Deletes, updates leaving `big` unchanged, key changes (some of rows whose `big` is out of
    // line), a delete and an insert of one key in one transaction, rows inserted and deleted
    // between two runs, and a truncate followed by inserts, one of a key the truncate removed.
    exec(
        "INSERT INTO gone SELECT id, v, big FROM t WHERE id <= 100; DELETE FROM t WHERE id <= 100");
    exec("UPDATE t SET v = 'updated ' || id WHERE id BETWEEN 101 AND 200");
    exec("INSERT INTO gone SELECT id, v, big FROM t WHERE id BETWEEN 201 AND 210;"
         "UPDATE t SET id = id + 10000 WHERE id BETWEEN 201 AND 210");
    exec("DELETE FROM t WHERE id = 300; INSERT INTO t VALUES (300, 'back', 'again')");
    exec("INSERT INTO t SELECT g, 'late ' || g, 'x' FROM generate_series(2000, 2100) g");
    exec("INSERT INTO gone SELECT id, v, big FROM t WHERE id >= 2050 AND id < 3000;"
         "DELETE FROM t WHERE id >= 2050 AND id < 3000");
    exec("INSERT INTO gone_w SELECT k, label FROM w WHERE k <> 1; TRUNCATE w;"
         "INSERT INTO w VALUES (1, 'one again'), (1000, 'new')");
    ASSERT_EQ(run_once(&err), 0) << err;
    expect_rows("SELECT id, v, big FROM t ORDER BY id", kLiveT, 1000 - 100 + 50);
    expect_rows("SELECT id, v, big FROM gone ORDER BY id", kDeletedT, 100 + 10 + 51);
    expect_rows("SELECT k, label FROM w ORDER BY k", kLiveW, 2);
    expect_rows("SELECT k, label FROM gone_w ORDER BY k", kDeletedW, 49);
    // `pgtide status` tells how many rows are marked deleted.
    std::string out;
    ASSERT_EQ(PgtideProcess::run(args("status"), &out, &err), 0) << out << err;
    EXPECT_NE(out.find("1111 rows now (161 marked deleted)"), std::string::npos) << out;
    EXPECT_NE(out.find("51 rows now (49 marked deleted)"), std::string::npos) << out;
    std::vector<std::string> status_json = args("status");
    status_json.push_back("--json");
    ASSERT_EQ(PgtideProcess::run(status_json, &out, &err), 0) << out << err;
    EXPECT_NE(out.find("\"rows\":1111,\"rows_deleted\":161"), std::string::npos) << out;
    // Marked at the version of their delete, which is past the snapshot.
    for (const char* table : {"t", "w"}) {
        EXPECT_EQ(dest_rows(std::string("SELECT count(*) FROM ") + table +
                            " WHERE _pgtide_deleted = 1 AND _pgtide_lsn <= (SELECT "
                            "consistent_lsn FROM _pgtide_checkpoint)"),
                  Rows{{"0"}})
            << table;
    }

    // A copy of t anew (resync): the deleted rows stay, and a row the destination has that the
    // source has not (written there by hand) is found gone by the copy and marked deleted.
    dest_exec("INSERT INTO t (id, v, big, _pgtide_lsn) VALUES (5000, 'stray', 'x', 1)");
    exec("INSERT INTO gone VALUES (5000, 'stray', 'x')");
    exec("INSERT INTO gone SELECT id, v, big FROM t WHERE id = 400; DELETE FROM t WHERE id = 400");
    exec("UPDATE t SET v = 'after ' || id WHERE id BETWEEN 500 AND 510");
    std::vector<std::string> resync = args("resync");
    resync.push_back("public.t");
    ASSERT_EQ(PgtideProcess::run(resync, &out, &err), 0) << out << err;
    ASSERT_EQ(run_once(&err), 0) << err;
    expect_rows("SELECT id, v, big FROM t ORDER BY id", kLiveT, 1000 - 100 + 50 - 1);
    expect_rows("SELECT id, v, big FROM gone ORDER BY id", kDeletedT, 100 + 10 + 51 + 2);
    expect_rows("SELECT k, label FROM gone_w ORDER BY k", kDeletedW, 49);
    EXPECT_EQ(dest_rows("SELECT state FROM _pgtide_tables WHERE source_table = 'public.t'"),
              Rows{{"ready"}});

    // Hard deletes on a destination that keeps deleted rows: refused, naming the column and
    // the setting; nothing changes.
    write_config(false);
    exec("INSERT INTO gone SELECT id, v, big FROM t WHERE id = 600; DELETE FROM t WHERE id = 600");
    // `pgtide check` says so before any run.
    EXPECT_EQ(PgtideProcess::run(args("check"), &out, &err), 2) << out << err;
    EXPECT_NE(out.find(std::string("FAIL deletes: destination tables ") +
                       (postgres() ? "public.t, public.w" : "t, w") +
                       " keep rows deleted on the source"),
              std::string::npos)
        << out;
    EXPECT_EQ(run_once(&err), 1);
    EXPECT_NE(err.find("_pgtide_deleted"), std::string::npos) << err;
    EXPECT_NE(err.find("deletes = \"soft\""), std::string::npos) << err;
    expect_rows("SELECT id, v, big FROM gone WHERE id <> 600 ORDER BY id", kDeletedT,
                100 + 10 + 51 + 2);

    // Soft again: goes on from where it stopped. A key deleted long ago is inserted again:
    // its row is live again, with the new values.
    write_config(true);
    EXPECT_EQ(PgtideProcess::run(args("check"), &out, &err), 0) << out << err;
    EXPECT_NE(out.find("soft: rows deleted on the source stay"), std::string::npos) << out;
    exec("INSERT INTO t VALUES (50, 'again', 'new'); DELETE FROM gone WHERE id = 50");
    ASSERT_EQ(run_once(&err), 0) << err;
    expect_rows("SELECT id, v, big FROM t ORDER BY id", kLiveT, 1000 - 100 + 50 - 2 + 1);
    expect_rows("SELECT id, v, big FROM gone ORDER BY id", kDeletedT, 100 + 10 + 51 + 3 - 1);

    // A new epoch (--resnapshot) copies every table anew: the rows marked deleted stay, and the
    // row deleted while stopped, whose delete the new epoch never streams, is found gone.
    exec("INSERT INTO gone SELECT id, v, big FROM t WHERE id = 700; DELETE FROM t WHERE id = 700");
    std::vector<std::string> resnapshot = args("run");
    resnapshot.push_back("--resnapshot");
    ASSERT_EQ(PgtideProcess::run(resnapshot, &out, &err), 0) << out << err;
    EXPECT_EQ(dest_rows("SELECT epoch FROM _pgtide_checkpoint"), Rows{{"2"}});
    expect_rows("SELECT id, v, big FROM t ORDER BY id", kLiveT, 1000 - 100 + 50 - 2 + 1 - 1);
    expect_rows("SELECT id, v, big FROM gone ORDER BY id", kDeletedT, 100 + 10 + 51 + 3 - 1 + 1);
    expect_rows("SELECT k, label FROM w ORDER BY k", kLiveW, 2);
    expect_rows("SELECT k, label FROM gone_w ORDER BY k", kDeletedW, 49);
}

// A copy anew (resync) of a table with rows marked deleted, killed with SIGKILL in the middle
// and then finished by the next run, which goes on from where the copy got: the rows marked
// deleted stay, through the first run's marks, the second's removal of the rows of chunks cut
// short (PostgreSQL), and the end of the copy.
TEST_P(SoftDeletes, CopyAnewKilledMidwayKeepsTheDeletedRows) {
    exec("CREATE TABLE c (id bigint PRIMARY KEY, v text, n int);"
         "INSERT INTO c SELECT g, 'c' || g, g FROM generate_series(1, 120000) g;"
         "ANALYZE c;"
         "CREATE TABLE gone (id bigint, v text, n int);"
         "CREATE PUBLICATION pub FOR TABLE c");
    write_config(true, "[snapshot]\nsplit_rows = 30000\nparallel_tables = 2\nbatch_rows = 500\n"
                       "chunk_rows = 1000\ncommit_rows = 10000\n");
    std::string err;
    ASSERT_EQ(run_once(&err), 0) << err;
    exec("INSERT INTO gone SELECT * FROM c WHERE id % 500 = 7; DELETE FROM c WHERE id % 500 = 7");
    ASSERT_EQ(run_once(&err), 0) << err;
    constexpr const char* kLive = "SELECT id, v, n FROM c WHERE _pgtide_deleted = 0 ORDER BY id";
    constexpr const char* kDeleted = "SELECT id, v, n FROM c WHERE _pgtide_deleted = 1 ORDER BY id";
    expect_rows("SELECT id, v, n FROM gone ORDER BY id", kDeleted, 240);

    // `pgtide resync` with no pgtide running copies the table by itself: killed mid-copy.
    std::string out;
    std::vector<std::string> resync = args("resync");
    resync.push_back("public.c");
    const auto copied = [&]() -> long {
        try {
            const Rows r = dest_rows("SELECT rows_copied FROM _pgtide_tables WHERE source_table = "
                                     "'public.c' AND state = 'copying'");
            return r.size() == 1 && r[0][0] ? std::stol(*r[0][0]) : -1;
        } catch (const std::exception&) {
            return -1;
        }
    };
    {
        PgtideProcess p(resync);
        ASSERT_TRUE(wait_for([&] { return copied() > 10000 || !p.running(); })) << p.stderr_text();
        ASSERT_TRUE(p.running()) << "the copy ended before it could be killed\n" << p.stderr_text();
        p.kill(SIGKILL);
        p.wait();
    }
    ASSERT_LT(copied(), 120000 - 240) << "c was not copying when killed";
    // Deleted while stopped, copied by the next run: marked too.
    exec("INSERT INTO gone SELECT * FROM c WHERE id % 1000 = 3; DELETE FROM c WHERE id % 1000 = 3");
    std::string log;
    ASSERT_EQ(run_once(&log), 0) << log;
    EXPECT_NE(log.find("resuming a table's copy"), std::string::npos) << log;
    if (postgres()) {
        EXPECT_NE(log.find("removed the rows of the chunks"), std::string::npos) << log;
    }
    expect_rows("SELECT id, v, n FROM c ORDER BY id", kLive, 120000 - 240 - 120);
    expect_rows("SELECT id, v, n FROM gone ORDER BY id", kDeleted, 240 + 120);

    // A new epoch killed mid-copy, then a key it had copied deleted on the source, then a new
    // epoch again: the first epoch's copied row of that key, marked by the second, must not
    // stay beside the key's older marked row (into PostgreSQL, that would fail the key).
    std::vector<std::string> resnapshot = args("run");
    resnapshot.push_back("--resnapshot");
    std::string copied_key;
    {
        PgtideProcess p(resnapshot);
        ASSERT_TRUE(wait_for([&] { return copied() > 10000 || !p.running(); })) << p.stderr_text();
        ASSERT_TRUE(p.running()) << "the copy ended before it could be killed\n" << p.stderr_text();
        p.kill(SIGKILL);
        p.wait();
        const Rows live = dest_rows("SELECT max(id) FROM c WHERE _pgtide_deleted = 0");
        ASSERT_TRUE(live.size() == 1 && live[0][0]) << "the killed epoch copied nothing";
        copied_key = *live[0][0];
    }
    exec("INSERT INTO gone SELECT * FROM c WHERE id = " + copied_key +
         "; DELETE FROM c WHERE id = " + copied_key);
    ASSERT_EQ(PgtideProcess::run(resnapshot, &out, &log), 0) << log;
    expect_rows("SELECT id, v, n FROM c ORDER BY id", kLive, 120000 - 240 - 120 - 1);
    expect_rows("SELECT id, v, n FROM gone ORDER BY id", kDeleted, 240 + 120 + 1);
}

INSTANTIATE_TEST_SUITE_P(Destinations, SoftDeletes, ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                             return std::string(param.param);
                         });

} // namespace
} // namespace pgtide::testing
