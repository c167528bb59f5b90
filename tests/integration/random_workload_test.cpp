// A seeded randomized workload (issue 6): every kind of change over five tables with varied keys
// and TOAST values, applied while `pgtide run` streams, while it is stopped (SIGTERM), and then
// caught up by `run --once`; every row of every table is compared with the source.
//
// Replay a failure with the seed it printed: PGTIDE_WORKLOAD_SEED=<seed> ctest -R RandomWorkload
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include "tests/support/pgtide_process.hpp"
#include "tests/support/replication_test.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

constexpr const char* kSeedVariable = "PGTIDE_WORKLOAD_SEED";

// The seed of this run: $PGTIDE_WORKLOAD_SEED, else a fresh one.
std::uint64_t workload_seed() {
    if (const char* env = std::getenv(kSeedVariable); env != nullptr && *env != '\0') {
        return std::stoull(env);
    }
    return std::random_device{}() % 1000000000ULL;
}

// One persistent session on the source (a connection per statement would dominate the run).
class Session {
public:
    explicit Session(const std::string& dsn) : conn_(PQconnectdb(dsn.c_str())) {
        if (PQstatus(conn_.get()) != CONNECTION_OK) {
            throw std::runtime_error("connect: " + std::string(PQerrorMessage(conn_.get())));
        }
        PQsetNoticeProcessor(
            conn_.get(), [](void*, const char*) {}, nullptr);
    }

    /// Runs one statement; the rows it changed (0 for DDL, TRUNCATE, transaction control).
    std::int64_t exec(const std::string& sql) {
        Result r(PQexec(conn_.get(), sql.c_str()));
        const auto status = PQresultStatus(r.get());
        if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
            throw std::runtime_error(std::string(PQresultErrorMessage(r.get())) +
                                     "  while running: " + sql.substr(0, 400));
        }
        const char* n = PQcmdTuples(r.get());
        return (n != nullptr && *n != '\0') ? std::stoll(n) : 0;
    }

    /// The single value of a one-row, one-column query.
    std::int64_t value(const std::string& sql) {
        Result r(PQexec(conn_.get(), sql.c_str()));
        if (PQresultStatus(r.get()) != PGRES_TUPLES_OK || PQntuples(r.get()) != 1) {
            throw std::runtime_error(std::string(PQresultErrorMessage(r.get())) +
                                     "  while running: " + sql);
        }
        return std::stoll(PQgetvalue(r.get(), 0, 0));
    }

private:
    struct ConnCloser {
        void operator()(PGconn* c) const { PQfinish(c); }
    };
    struct ResultCloser {
        void operator()(PGresult* r) const { PQclear(r); }
    };
    using Result = std::unique_ptr<PGresult, ResultCloser>;
    std::unique_ptr<PGconn, ConnCloser> conn_;
};

struct WorkloadStats {
    std::int64_t changes = 0; ///< rows changed by committed statements outside rolled-back parts
    std::int64_t transactions = 0;
    std::int64_t rolled_back_transactions = 0;
    std::int64_t rolled_back_savepoints = 0;
    std::int64_t key_changes = 0;
    std::int64_t toast_kept_updates = 0; ///< updates of w_big/w_uuid leaving the TOAST column
    std::int64_t toast_writes = 0;       ///< updates writing the TOAST column
    std::int64_t truncates = 0;
    std::int64_t largest_transaction = 0;

    std::string str() const {
        std::ostringstream s;
        s << "changes=" << changes << " transactions=" << transactions
          << " rolled_back_transactions=" << rolled_back_transactions
          << " rolled_back_savepoints=" << rolled_back_savepoints << " key_changes=" << key_changes
          << " toast_kept_updates=" << toast_kept_updates << " toast_writes=" << toast_writes
          << " truncates=" << truncates << " largest_transaction=" << largest_transaction;
        return s.str();
    }
};

// The five tables, their keys and how a statement picks existing rows: every choice is made by
// the seeded generator and every row by ORDER BY key, so one seed gives one workload.
//   w_big   bigint key, doc text STORAGE EXTERNAL (uncompressed TOAST), `extra` added midway
//   w_text  text key '<generation>:<origin>'
//   w_comp  (int, text) key, numeric and bool columns, `note` added while pgtide is stopped
//   w_uuid  uuid key, REPLICA IDENTITY FULL, payload text (compressed, mostly TOAST), bytea
//   w_misc  bigint key; takes the 20,000-row transaction
struct TableSpec {
    const char* name;
    const char* key;     ///< the key as the left side of IN (SELECT ...)
    const char* columns; ///< the key columns, for the select list and ORDER BY
};

constexpr TableSpec kTables[] = {
    {"w_big", "id", "id"}, {"w_text", "k", "k"},   {"w_comp", "(a, b)", "a, b"},
    {"w_uuid", "u", "u"},  {"w_misc", "id", "id"},
};

class Workload {
public:
    Workload(Session& session, std::uint64_t seed)
        : s_(session), rng_(seed), salt_(std::to_string(seed % 100000)) {}

    const WorkloadStats& stats() const { return stats_; }

    static void create_tables(Session& s) {
        s.exec("CREATE TABLE w_big (id bigint PRIMARY KEY, v int, s text, doc text)");
        s.exec("ALTER TABLE w_big ALTER COLUMN doc SET STORAGE EXTERNAL");
        s.exec("CREATE TABLE w_text (k text PRIMARY KEY, n bigint, note text)");
        s.exec("CREATE TABLE w_comp (a int, b text, v numeric(12,3), flag bool, "
               "PRIMARY KEY (a, b))");
        s.exec("CREATE TABLE w_uuid (u uuid PRIMARY KEY, n int, payload text, bin bytea)");
        s.exec("ALTER TABLE w_uuid REPLICA IDENTITY FULL");
        s.exec("CREATE TABLE w_misc (id bigint PRIMARY KEY, grp int, label text)");
    }

    /// Rows for the snapshot: `n` per table.
    void initial_rows(int n) {
        for (int t = 0; t < 5; ++t) {
            s_.exec(insert_sql(t, n));
        }
    }

    /// One random transaction: 1..6 statements, sometimes a savepoint rolled back inside it,
    /// sometimes rolled back as a whole.
    void transaction() {
        const bool rollback_all = chance(0.05);
        const int statements = chance(0.5) ? 1 : uniform(2, 6);
        const int savepoint_at = chance(0.12) ? uniform(0, statements) : -1;
        s_.exec("BEGIN");
        std::int64_t changes = 0;
        for (int i = 0; i < statements; ++i) {
            if (i == savepoint_at) {
                s_.exec("SAVEPOINT sp");
                for (int j = uniform(1, 3); j > 0; --j) {
                    random_statement();
                }
                s_.exec("ROLLBACK TO SAVEPOINT sp");
                ++stats_.rolled_back_savepoints;
            }
            changes += random_statement();
        }
        finish(changes, rollback_all);
    }

    /// One source transaction of exactly `rows` changes on w_misc (60% inserts, 25% updates,
    /// 15% deletes).
    void large_transaction(std::int64_t rows) {
        s_.exec("BEGIN");
        const std::int64_t inserts = rows * 60 / 100;
        const std::int64_t updates = rows * 25 / 100;
        const std::int64_t deletes = rows - inserts - updates;
        std::int64_t changes = s_.exec(insert_sql(4, inserts));
        changes += s_.exec("UPDATE w_misc SET grp = grp + 1, label = label || '+' WHERE id IN "
                           "(SELECT id FROM w_misc ORDER BY id DESC LIMIT " +
                           std::to_string(updates) + ")");
        changes += s_.exec("DELETE FROM w_misc WHERE id IN (SELECT id FROM w_misc ORDER BY id "
                           "LIMIT " +
                           std::to_string(deletes) + ")");
        if (changes != rows) {
            throw std::runtime_error("the large transaction changed " + std::to_string(changes) +
                                     " rows, not " + std::to_string(rows));
        }
        finish(changes, false);
    }

    /// TRUNCATE of `tables` (indexes into kTables), then a few inserts, in one transaction.
    void truncate(const std::vector<int>& tables) {
        s_.exec("BEGIN");
        std::string sql = "TRUNCATE ";
        for (std::size_t i = 0; i < tables.size(); ++i) {
            sql += (i ? ", " : "") + std::string(kTables[tables[i]].name);
        }
        s_.exec(sql);
        ++stats_.truncates;
        std::int64_t changes = 0;
        for (int t : tables) {
            changes += s_.exec(insert_sql(t, uniform(1, 30)));
        }
        finish(changes, false);
    }

    /// Key changes of rows whose TOAST value stays as it is (sent as unchanged TOAST with the
    /// new key): random statements do this too, this makes sure each part has some.
    void rekey_toasted_rows() {
        const std::string n = std::to_string(++generation_);
        s_.exec("BEGIN");
        std::int64_t changes = s_.exec("UPDATE w_big SET id = id + " + n + "000000000000 WHERE " +
                                       pick(0, 10, "octet_length(doc) > 2000"));
        changes += s_.exec("UPDATE w_uuid SET u = md5(u::text || '" + n + "')::uuid WHERE " +
                           pick(3, 10, "octet_length(payload) > 4000"));
        stats_.key_changes += changes;
        finish(changes, false);
    }

    /// ALTER TABLE ADD COLUMN without a default, then rows that write it.
    void add_big_extra() {
        s_.exec("ALTER TABLE w_big ADD COLUMN extra int");
        big_extra_ = true;
        s_.exec("BEGIN");
        std::int64_t changes = s_.exec(insert_sql(0, 20));
        changes += s_.exec("UPDATE w_big SET extra = v % 97 WHERE id IN (SELECT id FROM w_big "
                           "ORDER BY id LIMIT 50)");
        finish(changes, false);
    }

    /// ALTER TABLE ADD COLUMN with a default (the existing rows hold it without WAL), while
    /// pgtide is stopped, then rows that write it.
    void add_comp_note() {
        s_.exec("ALTER TABLE w_comp ADD COLUMN note text DEFAULT 'before the note'");
        comp_note_ = true;
        s_.exec("BEGIN");
        std::int64_t changes = s_.exec(insert_sql(2, 20));
        changes += s_.exec("UPDATE w_comp SET note = 'n' || a WHERE (a, b) IN (SELECT a, b FROM "
                           "w_comp ORDER BY a, b LIMIT 50)");
        finish(changes, false);
    }

private:
    int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
    bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

    void finish(std::int64_t changes, bool rollback) {
        if (rollback) {
            s_.exec("ROLLBACK");
            ++stats_.rolled_back_transactions;
            return;
        }
        s_.exec("COMMIT");
        ++stats_.transactions;
        stats_.changes += changes;
        stats_.largest_transaction = std::max(stats_.largest_transaction, changes);
    }

    int rows_per_statement() {
        const double x = std::uniform_real_distribution<double>(0, 1)(rng_);
        if (x < 0.6) {
            return 1;
        }
        if (x < 0.88) {
            return uniform(2, 20);
        }
        if (x < 0.98) {
            return uniform(21, 300);
        }
        return uniform(301, 2000);
    }

    // A doc of 2,240 to 7,968 bytes: stored out of line (STORAGE EXTERNAL), uncompressed.
    std::string big_doc(const std::string& id_expr, int variant) const {
        return "repeat(md5(" + id_expr + "::text || '" + salt_ + "/" + std::to_string(variant) +
               "'), (70 + ((" + id_expr + " + " + std::to_string(variant) + ") % 180))::int)";
    }

    // 1,920 to 8,288 hex digits: compressed, mostly still out of line.
    std::string uuid_payload(const std::string& g_expr, int variant) const {
        return "(SELECT string_agg(md5(" + g_expr + "::text || i::text || '" +
               std::to_string(variant) + "'), '') FROM generate_series(1, (60 + (" + g_expr +
               " % 200))::int) i)";
    }

    std::string insert_sql(int table, std::int64_t rows) {
        const std::int64_t first = next_origin_;
        next_origin_ += rows;
        const std::string range = "generate_series(" + std::to_string(first) + ", " +
                                  std::to_string(first + rows - 1) + ") g";
        const std::string gen = std::to_string(++generation_);
        switch (table) {
        case 0: // a quarter of the rows get a TOASTed doc
            return "INSERT INTO w_big (id, v, s, doc" + std::string(big_extra_ ? ", extra" : "") +
                   ") SELECT g, (g * 7) % 1000, 's' || g, CASE WHEN g % 4 = 0 THEN " +
                   big_doc("g", 0) + " WHEN g % 4 = 1 THEN NULL ELSE 'short ' || g END" +
                   (big_extra_ ? ", CASE WHEN g % 3 = 0 THEN NULL ELSE g % 1000 END" : "") +
                   " FROM " + range;
        case 1:
            return "INSERT INTO w_text SELECT 'g" + gen +
                   ":' || g, g * 3, CASE WHEN g % 5 = 0 THEN NULL ELSE 'note ' || md5(g::text) "
                   "END FROM " +
                   range;
        case 2:
            return "INSERT INTO w_comp (a, b, v, flag" + std::string(comp_note_ ? ", note" : "") +
                   ") SELECT (g % 50)::int, 'b' || g, (g % 100000) / 7.0, g % 3 = 0" +
                   (comp_note_ ? ", 'note ' || g" : "") + " FROM " + range;
        case 3:
            return "INSERT INTO w_uuid SELECT md5('" + salt_ +
                   "' || g)::uuid, (g % 1000)::int, CASE WHEN g % 3 = 0 THEN " +
                   uuid_payload("g", 0) +
                   " ELSE 'p' || g END, CASE WHEN g % 7 = 0 THEN NULL ELSE decode(md5(g::text), "
                   "'hex') END FROM " +
                   range;
        default:
            return "INSERT INTO w_misc SELECT g, (g % 17)::int, 'label ' || g FROM " + range;
        }
    }

    // `rows` existing rows of the table, chosen by key order from a random offset.
    std::string pick(int table, int rows, const std::string& where = "") {
        const TableSpec& t = kTables[table];
        const std::int64_t count = s_.value("SELECT count(*) FROM " + std::string(t.name) +
                                            (where.empty() ? std::string() : " WHERE " + where));
        const std::int64_t offset =
            count > rows ? std::uniform_int_distribution<std::int64_t>(0, count - rows)(rng_) : 0;
        return std::string(t.key) + " IN (SELECT " + t.columns + " FROM " + t.name +
               (where.empty() ? std::string() : " WHERE " + where) + " ORDER BY " + t.columns +
               " OFFSET " + std::to_string(offset) + " LIMIT " + std::to_string(rows) + ")";
    }

    // One random statement; the rows it changed.
    std::int64_t random_statement() {
        const int table = uniform(0, 4);
        const int rows = rows_per_statement();
        const int op = uniform(0, 99);
        const std::string n = std::to_string(++generation_);
        if (op < 34) {
            return s_.exec(insert_sql(table, rows));
        }
        if (op < 48) { // delete
            return s_.exec("DELETE FROM " + std::string(kTables[table].name) + " WHERE " +
                           pick(table, rows));
        }
        if (op < 64) { // key change
            std::string sql;
            switch (table) {
            case 0: { // often rows with an out-of-line doc, sometimes rewriting the doc too
                const bool toasted = chance(0.6);
                const bool rewrite = chance(0.3);
                sql = "UPDATE w_big SET id = id + " + n + "000000000000" +
                      (rewrite ? ", doc = doc || 'k'" : "") + " WHERE " +
                      pick(0, rows, toasted ? "octet_length(doc) > 2000" : "");
                break;
            }
            case 1:
                sql = "UPDATE w_text SET k = 'g" + n + ":' || split_part(k, ':', 2) WHERE " +
                      pick(1, rows);
                break;
            case 2:
                sql = chance(0.5)
                          ? "UPDATE w_comp SET a = a + " + std::to_string(uniform(1, 9)) +
                                " WHERE " + pick(2, rows)
                          : "UPDATE w_comp SET b = b || 'x', v = v + 1 WHERE " + pick(2, rows);
                break;
            case 3:
                sql = "UPDATE w_uuid SET u = md5(u::text || '" + n + "')::uuid WHERE " +
                      pick(3, rows, chance(0.6) ? "octet_length(payload) > 1000" : "");
                break;
            default:
                sql = "UPDATE w_misc SET id = id + " + n + "000000000000 WHERE " + pick(4, rows);
                break;
            }
            const std::int64_t changed = s_.exec(sql);
            stats_.key_changes += changed;
            return changed;
        }
        // Updates that keep the key.
        std::string sql;
        switch (table) {
        case 0:
            if (chance(0.35)) { // writes the TOAST column
                const int v = uniform(1, 1000);
                const std::string value = chance(0.7)   ? big_doc("id", v)
                                          : chance(0.5) ? std::string("NULL")
                                                        : "'short " + std::to_string(v) + "'";
                const std::int64_t changed =
                    s_.exec("UPDATE w_big SET doc = " + value + ", v = v - 1 WHERE " +
                            pick(0, rows, chance(0.5) ? "octet_length(doc) > 2000" : ""));
                stats_.toast_writes += changed;
                return changed;
            } else {
                const std::int64_t changed = s_.exec(
                    "UPDATE w_big SET v = v + 1, s = s || '.'" +
                    std::string(big_extra_ ? ", extra = coalesce(extra, 0) + 1" : "") + " WHERE " +
                    pick(0, rows, chance(0.6) ? "octet_length(doc) > 2000" : ""));
                stats_.toast_kept_updates += changed;
                return changed;
            }
        case 1:
            sql = "UPDATE w_text SET n = n + 1, note = CASE WHEN n % 4 = 0 THEN NULL ELSE "
                  "'updated " +
                  n + "' END WHERE " + pick(1, rows);
            break;
        case 2:
            sql = "UPDATE w_comp SET v = v + 1.125, flag = NOT flag" +
                  std::string(comp_note_ ? ", note = 'u" + n + "'" : "") + " WHERE " +
                  pick(2, rows);
            break;
        case 3:
            if (chance(0.3)) {
                const std::int64_t changed =
                    s_.exec("UPDATE w_uuid SET payload = " + uuid_payload("n", uniform(1, 1000)) +
                            " WHERE " + pick(3, rows));
                stats_.toast_writes += changed;
                return changed;
            } else {
                const std::int64_t changed =
                    s_.exec("UPDATE w_uuid SET n = n + 1, bin = CASE WHEN bin IS NULL THEN "
                            "'\\x00ff'::bytea "
                            "ELSE NULL END WHERE " +
                            pick(3, rows, chance(0.6) ? "octet_length(payload) > 1000" : ""));
                stats_.toast_kept_updates += changed;
                return changed;
            }
        default:
            sql = "UPDATE w_misc SET grp = grp + 1 WHERE " + pick(4, rows);
            break;
        }
        return s_.exec(sql);
    }

    Session& s_;
    std::mt19937_64 rng_;
    std::string salt_;
    std::int64_t next_origin_ = 1;
    std::int64_t generation_ = 0;
    bool big_extra_ = false;
    bool comp_note_ = false;
    WorkloadStats stats_;
};

// Source and destination queries giving every column of a table in the same text forms.
struct Comparison {
    const char* table;
    const char* source_sql;
    const char* dest_sql;
};

constexpr Comparison kComparisons[] = {
    {"w_big", "SELECT id::text, v::text, s, doc, extra::text FROM w_big",
     "SELECT id, v, s, doc, extra FROM w_big"},
    {"w_text", "SELECT k, n::text, note FROM w_text", "SELECT k, n, note FROM w_text"},
    {"w_comp", "SELECT a::text, b, v::text, flag::int::text, note FROM w_comp",
     "SELECT a, b, v, flag, note FROM w_comp"},
    {"w_uuid", "SELECT u::text, n::text, payload, bin::text FROM w_uuid",
     "SELECT u, n, payload, bin FROM w_uuid"},
    {"w_misc", "SELECT id::text, grp::text, label FROM w_misc",
     "SELECT id, grp, label FROM w_misc"},
};

std::string show_row(const Row& row) {
    std::string s = "(";
    for (std::size_t i = 0; i < row.size(); ++i) {
        s += i ? ", " : "";
        if (!row[i]) {
            s += "NULL";
        } else if (row[i]->size() > 60) {
            s += "'" + row[i]->substr(0, 40) + "…' (" + std::to_string(row[i]->size()) + " bytes)";
        } else {
            s += "'" + *row[i] + "'";
        }
    }
    return s + ")";
}

class RandomWorkload : public ReplicationTest, public ::testing::WithParamInterface<const char*> {
protected:
    std::string config_path() const { return (dir_ / "pgtide.toml").string(); }

    /// The "postgresql" parameters replay the workload into a PostgreSQL destination (a second
    /// database of the same server); the others into SQLite, with that large_transactions.
    /// "…soft": with soft deletes (only the rows not marked deleted are compared, and rows
    /// marked deleted must be gone from the source).
    bool postgres() const { return param().rfind("postgresql", 0) == 0; }
    bool soft() const { return param().ends_with("soft"); }
    std::string param() const { return GetParam(); }

    std::string dest_url() const {
        return "postgresql://postgres@/" + dest_db_ + "?host=" + pg().socket_dir() +
               "&port=" + std::to_string(pg().port());
    }

    /// One value from the destination (SQLite file or PostgreSQL database), nullopt while absent.
    std::optional<std::string> destination_value(const std::string& sql) const {
        if (!postgres()) {
            return dest_value(sql);
        }
        try {
            return pg().query_value(dest_db_, sql);
        } catch (const std::exception&) {
            return std::nullopt;
        }
    }

    void write_config() {
        const std::string large_transactions = soft() ? "" : param();
        if (postgres()) {
            dest_db_ = pg().create_database();
        }
        std::ofstream f(config_path());
        f << "[source]\ndsn = \"" << dsn() << "\"\npublications = [\"pub\"]\nslot = \"" << slot()
          << "\"\n[destination]\nurl = \"" << (postgres() ? dest_url() : "sqlite:" + sqlite_path_)
          << "\"\n"
          << (soft() ? "deletes = \"soft\"\n" : "");
        if (!large_transactions.empty() && !postgres()) {
            f << "[stream]\nlarge_transactions = \"" << large_transactions << "\"\n";
        }
    }

    std::vector<std::string> config_args(bool once) const {
        std::vector<std::string> a{"run", "-c", config_path()};
        if (once) {
            a.push_back("--once");
            a.push_back("--json");
        }
        return a;
    }

    std::int64_t source_lsn() const {
        return std::stoll(query_value("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"));
    }

    std::int64_t checkpoint_lsn() const {
        const auto v = destination_value("SELECT lsn FROM _pgtide_checkpoint");
        return v ? std::stoll(*v) : 0;
    }

    // Every row of every table, as sorted multisets (text keys sort differently in SQLite).
    void expect_tables_equal() const {
        // Soft deletes: the live rows equal the source's (a row marked deleted cannot hide a
        // live one: each key has one row).
        const std::string live = soft() ? " WHERE _pgtide_deleted = 0" : "";
        std::int64_t marked = 0;
        for (const Comparison& c : kComparisons) {
            Rows want = query(c.source_sql);
            // PostgreSQL keeps the source's types: the source's query reads it the same way.
            Rows got = postgres() ? pg().query(dest_db_, c.source_sql + live)
                                  : SqliteFile(sqlite_path_).rows(c.dest_sql + live);
            if (soft()) {
                marked += std::stoll(*destination_value(std::string("SELECT count(*) FROM ") +
                                                        c.table + " WHERE _pgtide_deleted = 1"));
            }
            std::sort(want.begin(), want.end());
            std::sort(got.begin(), got.end());
            if (want == got) {
                continue;
            }
            Rows missing(want.size());
            Rows extra(got.size());
            missing.erase(std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                                              missing.begin()),
                          missing.end());
            extra.erase(std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                                            extra.begin()),
                        extra.end());
            std::string detail;
            for (std::size_t i = 0; i < missing.size() && i < 5; ++i) {
                detail += "\n  source only: " + show_row(missing[i]);
            }
            for (std::size_t i = 0; i < extra.size() && i < 5; ++i) {
                detail += "\n  destination only: " + show_row(extra[i]);
            }
            ADD_FAILURE() << c.table << ": source has " << want.size() << " rows, destination "
                          << got.size() << "; " << missing.size() << " source rows missing or "
                          << "different, " << extra.size() << " destination rows extra or "
                          << "different" << detail;
        }
        if (soft()) {
            EXPECT_GT(marked, 0) << "the workload deletes rows: some must be marked deleted";
        }
    }

    std::string dest_db_; ///< the PostgreSQL destination database, when postgres()
};

TEST_P(RandomWorkload, DestinationEqualsSourceRowByRow) {
    const std::uint64_t seed = workload_seed();
    std::cout << "[ workload ] seed " << seed << " (replay: " << kSeedVariable << "=" << seed
              << "), PostgreSQL " << pg().major_version() << std::endl;
    RecordProperty("seed", std::to_string(seed));
    SCOPED_TRACE("workload seed " + std::to_string(seed) + " (replay: " + kSeedVariable + "=" +
                 std::to_string(seed) + ")");
    // Large transactions spill to disk on the source (or stream, once pgtide asks for it).
    exec("ALTER DATABASE " + dbname() + " SET logical_decoding_work_mem = '64kB'");

    Session session(dsn());
    Workload::create_tables(session);
    Workload w(session, seed);
    w.initial_rows(500);
    session.exec("CREATE PUBLICATION pub FOR TABLE w_big, w_text, w_comp, w_uuid, w_misc");
    write_config();

    // Part 1, while `pgtide run` streams: random transactions, one of 20,000 rows, a truncate,
    // an added column.
    std::mt19937_64 plan(seed ^ 0x5eedULL);
    const auto at = [&plan](int lo, int hi) {
        return std::uniform_int_distribution<int>(lo, hi)(plan);
    };
    const int part1 = 260;
    const int part2 = 200;
    const int large_at = at(20, part1 - 20);
    const int truncate_at = at(0, part1 - 1);
    const int add_column_at = at(part1 / 3, 2 * part1 / 3);
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point stopped_at;
    {
        started = std::chrono::steady_clock::now();
        PgtideProcess pgtide(config_args(false));
        ASSERT_TRUE(wait_for([&] {
            return destination_value("SELECT phase FROM _pgtide_checkpoint") == "streaming";
        })) << pgtide.stderr_text();
        std::int64_t halfway = 0;
        for (int i = 0; i < part1; ++i) {
            if (i == large_at) {
                w.large_transaction(20000);
            }
            if (i == truncate_at) {
                w.truncate({1});
            }
            if (i == add_column_at) {
                w.add_big_extra();
            }
            if (i == part1 / 2) {
                halfway = source_lsn();
            }
            w.transaction();
        }
        w.rekey_toasted_rows();
        // pgtide has applied at least the first half while running; stop it in the middle of
        // the rest.
        ASSERT_TRUE(wait_for([&] { return checkpoint_lsn() >= halfway || !pgtide.running(); }))
            << pgtide.stderr_text();
        ASSERT_TRUE(pgtide.running()) << pgtide.stderr_text();
        pgtide.kill(SIGTERM);
        ASSERT_EQ(pgtide.wait(), 0) << pgtide.stderr_text();
        stopped_at = std::chrono::steady_clock::now();
    }

    // Part 2, while pgtide is stopped: more transactions, a TRUNCATE of two tables at once, a
    // second added column.
    const int truncate2_at = at(0, part2 - 1);
    const int add_column2_at = at(part2 / 4, 3 * part2 / 4);
    for (int i = 0; i < part2 || (w.stats().changes < 52000 && i < 10 * part2); ++i) {
        if (i == truncate2_at) {
            w.truncate({2, 3});
        }
        if (i == add_column2_at) {
            w.add_comp_note();
        }
        w.transaction();
    }
    w.rekey_toasted_rows();
    const auto stopped_end = std::chrono::steady_clock::now();
    std::cout << "[ workload ] " << w.stats().str() << std::endl;
    ASSERT_GE(w.stats().changes, 50000) << w.stats().str();

    // Catch up.
    std::string out;
    std::string err;
    ASSERT_EQ(PgtideProcess::run(config_args(true), &out, &err), 0) << out << "\n" << err;
    const auto caught_up = std::chrono::steady_clock::now();
    expect_tables_equal();
    const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
    std::cout << "[ workload ] running " << seconds(stopped_at - started) << " s, stopped "
              << seconds(stopped_end - stopped_at) << " s, catch-up "
              << seconds(caught_up - stopped_end) << " s, comparison "
              << seconds(std::chrono::steady_clock::now() - caught_up) << " s" << std::endl;
}

INSTANTIATE_TEST_SUITE_P(LargeTransactions, RandomWorkload,
                         ::testing::Values("", "off", "postgresql", "soft", "postgresql_soft"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                             return std::string(*param.param ? param.param : "default");
                         });

// What the workload found, pinned down: an update that changes the key and leaves an
// out-of-line TOAST column alone sends that column as 'u' (unchanged) with the new key; the row
// must move with its old value, not vanish.
class WorkloadFindings : public ReplicationTest {};

TEST_F(WorkloadFindings, KeyChangeWithUnchangedToastColumnMovesTheRow) {
    exec("CREATE TABLE t (id bigint PRIMARY KEY, v int, doc text)");
    exec("ALTER TABLE t ALTER COLUMN doc SET STORAGE EXTERNAL");
    exec("INSERT INTO t SELECT g, g, repeat(md5(g::text), 100) FROM generate_series(1, 4) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    run_once();
    exec("UPDATE t SET id = id + 100 WHERE id <= 2");       // doc unchanged: 'u'
    exec("UPDATE t SET id = id + 100, v = 0 WHERE id = 3"); // doc unchanged, another column
    exec("INSERT INTO t VALUES (5, 5, repeat('q', 4000))"); // streamed with its value
    exec("BEGIN; UPDATE t SET id = 50 WHERE id = 5; UPDATE t SET v = -1 WHERE id = 50; COMMIT");
    run_once();
    expect_equal("SELECT id::text, v::text, doc FROM t ORDER BY t.id",
                 "SELECT id, v, doc FROM t ORDER BY id");
}

// The same under REPLICA IDENTITY FULL, where the old row carries the TOAST value itself.
TEST_F(WorkloadFindings, KeyChangeWithUnchangedToastColumnUnderReplicaIdentityFull) {
    exec("CREATE TABLE t (id uuid PRIMARY KEY, v int, doc text)");
    exec("ALTER TABLE t REPLICA IDENTITY FULL");
    exec("INSERT INTO t SELECT md5(g::text)::uuid, g, (SELECT string_agg(md5(g::text || i::text), "
         "'') FROM generate_series(1, 150) i) FROM generate_series(1, 4) g");
    exec("CREATE PUBLICATION pub FOR TABLE t");
    run_once();
    exec("UPDATE t SET id = md5(id::text)::uuid WHERE v <= 2"); // doc unchanged: 'u'
    exec("UPDATE t SET id = md5(id::text)::uuid, v = 0 WHERE v = 3");
    run_once();
    expect_equal("SELECT id::text, v::text, doc FROM t ORDER BY t.id",
                 "SELECT id, v, doc FROM t ORDER BY id");
}

} // namespace
} // namespace pgtide::testing
