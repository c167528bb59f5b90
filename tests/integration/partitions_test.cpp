// Partitioned tables and several publications (issue 6, DESIGN §4 "Partitioned tables"): with
// publish_via_partition_root = true one destination table named after the root holds every
// partition's rows; with false, one table per leaf. Rows move between partitions by updates of
// the partition key; a second publication brings other tables. Destination equals source.
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/pgtide_process.hpp"
#include "tests/support/replication_test.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

class Partitions : public ReplicationTest {
protected:
    // Both publications, --once.
    void run_once_both() const {
        std::string out;
        std::string err;
        const int code = PgtideProcess::run(
            {"run", "--once", "--json", "--source", dsn(), "--publication", "pub_parts",
             "--publication", "pub_other", "--slot", slot(), "--to", "sqlite:" + sqlite_path_},
            &out, &err);
        ASSERT_EQ(code, 0) << "stdout:\n" << out << "\nstderr:\n" << err;
    }

    /// `other_tables`: what the second publication holds besides other1 and other2.
    void create_schema(bool via_root, const std::string& other_tables = "") const {
        exec("CREATE TABLE parts (region int NOT NULL, id bigint NOT NULL, v text, big text, "
             "PRIMARY KEY (region, id)) PARTITION BY LIST (region)");
        exec("CREATE TABLE parts_a PARTITION OF parts FOR VALUES IN (1, 2)");
        exec("CREATE TABLE parts_b PARTITION OF parts FOR VALUES IN (3, 4)");
        exec("CREATE TABLE parts_c PARTITION OF parts DEFAULT");
        exec("ALTER TABLE parts_a ALTER COLUMN big SET STORAGE EXTERNAL");
        exec("CREATE TABLE other1 (id int PRIMARY KEY, v text)");
        exec("CREATE TABLE other2 (k text PRIMARY KEY, n int)");
        // Copied by the snapshot.
        exec("INSERT INTO parts SELECT g % 6, g, 'v' || g, CASE WHEN g % 10 = 0 THEN "
             "repeat(md5(g::text), 100) END FROM generate_series(1, 300) g");
        exec("INSERT INTO other1 SELECT g, 'o' || g FROM generate_series(1, 50) g");
        exec("INSERT INTO other2 SELECT 'k' || g, g FROM generate_series(1, 50) g");
        exec(std::string("CREATE PUBLICATION pub_parts FOR TABLE parts WITH "
                         "(publish_via_partition_root = ") +
             (via_root ? "true" : "false") + ")");
        exec("CREATE PUBLICATION pub_other FOR TABLE other1, other2" + other_tables);
    }

    // Streamed: rows move between every pair of partitions, keys change inside a partition,
    // a row moves twice in one transaction, and the other publication's tables change too.
    void stream_changes() const {
        exec("UPDATE parts SET region = 3 WHERE region = 1 AND id % 4 = 1");             // a → b
        exec("UPDATE parts SET region = 9, v = 'to c' WHERE region = 4 AND id % 3 = 1"); // b → c
        exec("UPDATE parts SET region = 2 WHERE region = 5 AND id % 2 = 1");             // c → a
        exec("UPDATE parts SET region = 0 WHERE region = 2 AND id % 5 = 0");             // a → c
        exec("UPDATE parts SET id = id + 1000 WHERE region = 3 AND id % 7 = 0"); // key, same leaf
        exec("UPDATE parts SET v = v || '!' WHERE id % 5 = 2");
        exec("UPDATE parts SET big = repeat('x', 5000) WHERE id % 9 = 0");
        exec("DELETE FROM parts WHERE id % 11 = 0");
        exec("INSERT INTO parts SELECT g % 7, g, 'new' || g, NULL FROM generate_series(301, "
             "400) g");
        exec("BEGIN; UPDATE parts SET region = 3 WHERE region = 0 AND id = 6; "
             "UPDATE parts SET region = 1, v = 'back' WHERE region = 3 AND id = 6; COMMIT");
        exec("UPDATE other1 SET v = v || '?' WHERE id % 3 = 0");
        exec("DELETE FROM other1 WHERE id % 4 = 0");
        exec("UPDATE other2 SET k = k || 'x' WHERE n % 6 = 0");
        exec("INSERT INTO other2 VALUES ('z', 1)");
    }

    void expect_other_tables_equal() const {
        expect_equal("SELECT id::text, v FROM other1 ORDER BY other1.id",
                     "SELECT id, v FROM other1 ORDER BY id");
        expect_equal("SELECT k, n::text FROM other2 ORDER BY k COLLATE \"C\"",
                     "SELECT k, n FROM other2 ORDER BY k");
    }

    void expect_parts_equal(const std::string& table) const {
        // Qualified: the ::text copies in the select list have the same output names.
        expect_equal("SELECT region::text, id::text, v, big FROM " + table + " ORDER BY " + table +
                         ".region, " + table + ".id",
                     "SELECT region, id, v, big FROM " + table + " ORDER BY region, id");
    }

    std::vector<std::string> user_tables() const {
        std::vector<std::string> names;
        for (const std::string& t : SqliteFile(sqlite_path_).tables()) {
            if (t.rfind("_pgtide", 0) != 0) {
                names.push_back(t);
            }
        }
        return names;
    }
};

TEST_F(Partitions, ViaRootOneTableHoldsEveryPartition) {
    create_schema(true);
    run_once_both();
    EXPECT_EQ(user_tables(), (std::vector<std::string>{"other1", "other2", "parts"}));
    expect_parts_equal("parts");
    expect_other_tables_equal();

    stream_changes();
    run_once_both();
    expect_parts_equal("parts");
    expect_other_tables_equal();

    // TRUNCATE of the root, then rows again (PostgreSQL does not publish a TRUNCATE of a single
    // partition through the root).
    exec("BEGIN; TRUNCATE parts; INSERT INTO parts VALUES (1, 1, 'after', NULL), "
         "(4, 2, 'after', NULL), (8, 3, 'after', repeat('y', 3000)); COMMIT");
    exec("UPDATE parts SET region = 2 WHERE id = 2");
    run_once_both();
    EXPECT_EQ(user_tables(), (std::vector<std::string>{"other1", "other2", "parts"}));
    expect_parts_equal("parts");
    expect_other_tables_equal();
}

TEST_F(Partitions, NotViaRootOneTablePerLeaf) {
    create_schema(false);
    run_once_both();
    EXPECT_EQ(user_tables(),
              (std::vector<std::string>{"other1", "other2", "parts_a", "parts_b", "parts_c"}));
    for (const char* leaf : {"parts_a", "parts_b", "parts_c"}) {
        expect_parts_equal(leaf);
    }
    expect_other_tables_equal();

    stream_changes();
    run_once_both();
    for (const char* leaf : {"parts_a", "parts_b", "parts_c"}) {
        expect_parts_equal(leaf);
    }
    expect_other_tables_equal();

    // TRUNCATE of one leaf, then of the root.
    exec("BEGIN; TRUNCATE parts_b; INSERT INTO parts VALUES (3, 1, 'after', NULL); COMMIT");
    exec("UPDATE parts SET region = 9 WHERE region = 3 AND id = 1");
    run_once_both();
    for (const char* leaf : {"parts_a", "parts_b", "parts_c"}) {
        expect_parts_equal(leaf);
    }
    exec("BEGIN; TRUNCATE parts; INSERT INTO parts VALUES (2, 5, 'after root', NULL); COMMIT");
    run_once_both();
    EXPECT_EQ(user_tables(),
              (std::vector<std::string>{"other1", "other2", "parts_a", "parts_b", "parts_c"}));
    for (const char* leaf : {"parts_a", "parts_b", "parts_c"}) {
        expect_parts_equal(leaf);
    }
    expect_other_tables_equal();
}

// A leaf that another publication lists by itself is still published through the root when a
// publication with publish_via_partition_root holds the root (pgoutput publishes each change
// as the topmost published ancestor): one table, as PostgreSQL 16's pg_get_publication_tables
// lists it for several publications, not a stale copy of the leaf beside the root.
TEST_F(Partitions, LeafInAnotherPublicationIsPublishedThroughTheRoot) {
    create_schema(true, ", parts_c");
    run_once_both();
    EXPECT_EQ(user_tables(), (std::vector<std::string>{"other1", "other2", "parts"}));
    expect_parts_equal("parts");
    stream_changes();
    run_once_both();
    EXPECT_EQ(user_tables(), (std::vector<std::string>{"other1", "other2", "parts"}));
    expect_parts_equal("parts");
    expect_other_tables_equal();
}

// A table that joins the publications while pgtide is stopped, holding rows, is copied alone
// at start-up (under a temporary slot's snapshot of its own, copy_ranges_test.cpp covers it on
// both destinations and while running); so is one that joins empty and fills while pgtide is
// stopped again.
TEST_F(Partitions, TableAddedToThePublicationWhileStoppedIsCopied) {
    exec("CREATE TABLE a (id int PRIMARY KEY)");
    exec("CREATE TABLE b (id int PRIMARY KEY, v text)");
    exec("INSERT INTO b SELECT g, 'before' FROM generate_series(1, 50) g");
    exec("CREATE PUBLICATION pub FOR TABLE a");
    run_once();
    exec("ALTER PUBLICATION pub ADD TABLE b");
    exec("INSERT INTO b VALUES (51, 'after')");
    exec("INSERT INTO a VALUES (1)");
    std::string out;
    std::string err;
    EXPECT_EQ(PgtideProcess::run(run_args(true), &out, &err), 0) << out << err;
    EXPECT_NE(err.find("copying a table alone"), std::string::npos) << err;
    expect_equal("SELECT id::text, v FROM b ORDER BY b.id", "SELECT id, v FROM b ORDER BY id");
    expect_equal("SELECT id::text FROM a ORDER BY a.id", "SELECT id FROM a ORDER BY id");
    exec("INSERT INTO b VALUES (52, 'later')");
    run_once();
    expect_equal("SELECT id::text, v FROM b ORDER BY b.id", "SELECT id, v FROM b ORDER BY id");

    exec("CREATE TABLE c (id int PRIMARY KEY, v text)");
    exec("ALTER PUBLICATION pub ADD TABLE c");
    run_once(); // c joined empty
    exec("INSERT INTO c SELECT g, 'streamed' FROM generate_series(1, 20) g");
    exec("DELETE FROM c WHERE id = 3");
    run_once();
    exec("UPDATE c SET v = 'again' WHERE id % 2 = 0");
    run_once();
    expect_equal("SELECT id::text, v FROM c ORDER BY c.id", "SELECT id, v FROM c ORDER BY id");
}

} // namespace
} // namespace pgtide::testing
