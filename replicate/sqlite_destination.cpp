// SqliteDestination: versioned, tombstone-aware apply into SQLite, and the metadata tables.
#include "replicate/sqlite_destination.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>
#include <variant>

#include <sqlite3.h>

#include "replicate/errors.hpp"
#include "schema/codec.hpp"
#include "schema/decode_error.hpp"
#include "schema/sql_quote.hpp"

namespace pgtide::replicate {

namespace {

using schema::quote_identifier;

constexpr int kBusyTimeoutMs = 5000;
constexpr const char* kLsnColumn = "_pgtide_lsn";
constexpr const char* kDeletedColumn = "_pgtide_deleted";

constexpr const char* kCreateMetadata = R"sql(
CREATE TABLE IF NOT EXISTS "_pgtide_checkpoint" (
    "slot_name" TEXT NOT NULL PRIMARY KEY,
    "system_identifier" TEXT NOT NULL,
    "timeline" INTEGER NOT NULL,
    "database" TEXT NOT NULL,
    "epoch" INTEGER NOT NULL,
    "phase" TEXT NOT NULL,
    "consistent_lsn" INTEGER NOT NULL,
    "lsn" INTEGER NOT NULL,
    "owner" TEXT NOT NULL,
    "lease_until" INTEGER NOT NULL,
    "updated_at" INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS "_pgtide_tables" (
    "slot_name" TEXT NOT NULL,
    "source_table" TEXT NOT NULL,
    "target_table" TEXT NOT NULL,
    "state" TEXT NOT NULL,
    "epoch" INTEGER NOT NULL,
    "copy_lsn" INTEGER NOT NULL,
    "rows_copied" INTEGER NOT NULL,
    "updated_at" INTEGER NOT NULL,
    "source_oid" INTEGER NOT NULL DEFAULT 0,
    "membership" TEXT NOT NULL DEFAULT '',
    "copy_key" TEXT NOT NULL DEFAULT '',
    "source_columns" TEXT NOT NULL DEFAULT '',
    PRIMARY KEY ("slot_name", "source_table")
);
CREATE TABLE IF NOT EXISTS "_pgtide_tombstones" (
    "target_table" TEXT NOT NULL,
    "key" TEXT NOT NULL,
    "lsn" INTEGER NOT NULL,
    PRIMARY KEY ("target_table", "key")
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS "_pgtide_columns" (
    "target_table" TEXT NOT NULL,
    "column_name" TEXT NOT NULL,
    "type_oid" INTEGER NOT NULL,
    "element_oid" INTEGER NOT NULL,
    "typmod" INTEGER NOT NULL,
    "source_type" TEXT NOT NULL,
    PRIMARY KEY ("target_table", "column_name")
) WITHOUT ROWID;
)sql";

// SQLite folds identifier case for ASCII letters only.
bool same_identifier(const std::string& a, const std::string& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               const auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? char(c + 32) : c; };
               return lower(x) == lower(y);
           });
}

DestinationErrorKind kind_of(int code) {
    switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return DestinationErrorKind::Busy;
    case SQLITE_FULL:
        return DestinationErrorKind::Full;
    case SQLITE_READONLY:
        return DestinationErrorKind::ReadOnly;
    case SQLITE_CANTOPEN:
        return DestinationErrorKind::CantOpen;
    case SQLITE_IOERR:
        return DestinationErrorKind::Io;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return DestinationErrorKind::Corrupt;
    case SQLITE_CONSTRAINT:
        return DestinationErrorKind::Constraint;
    default:
        return DestinationErrorKind::Other;
    }
}

// What the user can do about a failure, by SQLite result code; "" when there is nothing to say.
// The destination transaction that failed is rolled back and the checkpoint stays where it was,
// so the next run resumes from it.
std::string hint(int code) {
    switch (code & 0xff) {
    case SQLITE_FULL:
        return "; the file system holding it is full (or a quota or file size limit was "
               "reached): free space, then run pgtide again, which resumes from the last "
               "checkpoint";
    case SQLITE_READONLY:
        if (code == SQLITE_READONLY_DIRECTORY) {
            return "; its directory is not writable for this user, and SQLite must create the "
                   "-wal and -shm files beside the database: make the directory writable";
        }
        return "; the file, its -wal and -shm files or their directory are not writable for "
               "this user (or the mount is read-only): fix the permissions, then run pgtide "
               "again";
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return "; another connection held a write lock on the database for longer than the "
               "busy timeout (" +
               std::to_string(kBusyTimeoutMs / 1000) +
               " s): end that writer's transaction (readers never block pgtide), then run "
               "pgtide again";
    case SQLITE_CANTOPEN:
        return "; check that its directory exists and that this user may create files there";
    default:
        return "";
    }
}

std::int64_t lsn_to_int(schema::Lsn lsn) {
    if (lsn.value() > std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
        throw InternalError("LSN " + lsn.str() + " does not fit a signed 64-bit integer");
    }
    return std::int64_t(lsn.value());
}

std::int64_t now_unix_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Resets a statement when the step that used it is over, whatever happened.
class ResetGuard {
public:
    explicit ResetGuard(sqlite3_stmt* stmt) : stmt_(stmt) {}
    ~ResetGuard() { sqlite3_reset(stmt_); }
    ResetGuard(const ResetGuard&) = delete;
    ResetGuard& operator=(const ResetGuard&) = delete;

private:
    sqlite3_stmt* stmt_;
};

// Binds with the value's exact storage class. Text and blobs are bound without a copy: every
// parameter is rebound before each step, so no stale pointer is ever read.
void bind_value(sqlite3_stmt* stmt, int index, const schema::Value& v) {
    int rc = SQLITE_OK;
    if (const auto* i = std::get_if<std::int64_t>(&v)) {
        rc = sqlite3_bind_int64(stmt, index, *i);
    } else if (const auto* d = std::get_if<double>(&v)) {
        if (std::isnan(*d)) {
            rc = sqlite3_bind_text(stmt, index, "NaN", 3, SQLITE_STATIC); // DESIGN §5
        } else {
            rc = sqlite3_bind_double(stmt, index, *d);
        }
    } else if (const auto* s = std::get_if<std::string>(&v)) {
        rc = sqlite3_bind_text64(stmt, index, s->data(), s->size(), SQLITE_STATIC, SQLITE_UTF8);
    } else if (const auto* b = std::get_if<schema::Blob>(&v)) {
        if (b->bytes.empty()) {
            rc = sqlite3_bind_zeroblob(stmt, index, 0); // an empty BLOB, not NULL
        } else {
            rc = sqlite3_bind_blob64(stmt, index, b->bytes.data(), b->bytes.size(), SQLITE_STATIC);
        }
    } else if (std::holds_alternative<schema::Null>(v)) {
        rc = sqlite3_bind_null(stmt, index);
    } else {
        throw InternalError("an unchanged-TOAST value cannot be written here");
    }
    if (rc != SQLITE_OK) {
        throw InternalError("binding parameter " + std::to_string(index) +
                            " failed: " + sqlite3_errstr(rc));
    }
}

void bind_int(sqlite3_stmt* stmt, int index, std::int64_t v) {
    sqlite3_bind_int64(stmt, index, v);
}

void bind_str(sqlite3_stmt* stmt, int index, const std::string& s) {
    sqlite3_bind_text64(stmt, index, s.data(), s.size(), SQLITE_STATIC, SQLITE_UTF8);
}

std::string column_text(sqlite3_stmt* stmt, int index) {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, index));
    return p ? std::string(p, std::size_t(sqlite3_column_bytes(stmt, index))) : std::string();
}

std::string where_key(const schema::Table& table, int first_param) {
    std::string sql;
    for (std::size_t k = 0; k < table.key_columns.size(); ++k) {
        if (k > 0) {
            sql += " AND ";
        }
        sql += quote_identifier(table.columns[table.key_columns[k]].name) + " = ?" +
               std::to_string(first_param + int(k));
    }
    return sql;
}

bool is_key_column(const schema::Table& table, std::size_t column) {
    return std::find(table.key_columns.begin(), table.key_columns.end(), column) !=
           table.key_columns.end();
}

void check_row(const schema::Table& table, const schema::Row& row, std::size_t expected,
               const char* what) {
    if (row.size() != expected) {
        throw InternalError(std::string(what) + " for " + table.target + " has " +
                            std::to_string(row.size()) + " values, expected " +
                            std::to_string(expected));
    }
}

// " DEFAULT <literal>" for a column with a missing value on the source (the value rows older
// than the column hold), else "". SQLite gives existing rows the default without rewriting them.
std::string missing_default(const schema::Table& table, const schema::TableColumn& c) {
    if (!c.missing_text) {
        return "";
    }
    schema::Value v;
    try {
        v = schema::decode_text(c.type, *c.missing_text);
    } catch (const schema::DecodeError& e) {
        throw DefiniteError(ExitCode::Other, std::string(e.what()) +
                                                 " in the missing value of column \"" + c.name +
                                                 "\" of " + table.qualified());
    }
    if (const auto* i = std::get_if<std::int64_t>(&v)) {
        return " DEFAULT " + std::to_string(*i);
    }
    if (const auto* d = std::get_if<double>(&v)) {
        if (std::isinf(*d)) {
            return *d > 0 ? " DEFAULT 9e999" : " DEFAULT -9e999";
        }
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", *d);
        return std::string(" DEFAULT ") + buf;
    }
    if (const auto* s = std::get_if<std::string>(&v)) {
        return " DEFAULT " + schema::quote_sqlite_literal(*s);
    }
    if (const auto* b = std::get_if<schema::Blob>(&v)) {
        static const char* const digits = "0123456789abcdef";
        std::string hex = " DEFAULT X'";
        for (const unsigned char ch : b->bytes) {
            hex += digits[ch >> 4];
            hex += digits[ch & 15];
        }
        return hex + "'";
    }
    return "";
}

} // namespace

void SqliteDestination::DbCloser::operator()(sqlite3* db) const {
    sqlite3_close_v2(db);
}

void SqliteDestination::StmtFinalizer::operator()(sqlite3_stmt* s) const {
    sqlite3_finalize(s);
}

SqliteDestination::SqliteDestination(std::string path, Deletes deletes)
    : path_(std::move(path)), deletes_(deletes) {
    // SQLite's memory statistics take a process-wide mutex on every allocation, several per
    // row written; nothing reads them. Only possible before SQLite initialises (else ignored).
    static const int memstatus_off = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    (void)memstatus_off;
    sqlite3* raw = nullptr;
    const int rc = sqlite3_open_v2(path_.c_str(), &raw,
                                   SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                       SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
                                   nullptr);
    db_.reset(raw); // closed on every path, even when opening failed
    if (rc != SQLITE_OK) {
        fail(rc, "opening the database");
    }
    // SQLite opens a write-protected file read-only without a word; the first write would fail
    // much later, after the source was contacted. Say so now.
    if (sqlite3_db_readonly(db_.get(), "main") == 1) {
        throw DestinationError(DestinationErrorKind::ReadOnly, SQLITE_READONLY,
                               "sqlite destination " + path_ +
                                   ": opening the database: the file is read-only for this user" +
                                   hint(SQLITE_READONLY));
    }
    sqlite3_extended_result_codes(db_.get(), 1);
    sqlite3_busy_timeout(db_.get(), kBusyTimeoutMs);

    {
        Statement wal = prepare("PRAGMA journal_mode=WAL", "setting journal_mode=WAL");
        ResetGuard guard(wal.get());
        const std::string what = "setting journal_mode=WAL";
        if (step(wal.get(), what) != SQLITE_ROW) {
            fail(SQLITE_ERROR, what);
        }
        const std::string mode = column_text(wal.get(), 0);
        const bool in_memory = path_.empty() || path_ == ":memory:";
        if (mode != "wal" && !(in_memory && mode == "memory")) {
            throw DestinationError(DestinationErrorKind::Other, 0,
                                   "sqlite destination " + path_ +
                                       ": cannot use WAL journal mode (got '" + mode + "')");
        }
    }
    exec("PRAGMA synchronous=FULL", "setting synchronous=FULL");
    exec("PRAGMA foreign_keys=OFF", "setting foreign_keys=OFF");
    exec("PRAGMA cache_size=-16384", "setting cache_size");
    exec(kCreateMetadata, "creating the metadata tables");
    // A destination written before pgtide recorded source OIDs (0: unknown) or publication
    // memberships ('': unknown) or copy keys ('': copy from the start) gains the columns.
    const auto add_column = [this](const char* column, const char* ddl) {
        const std::string what = "reading the columns of _pgtide_tables";
        Statement has = prepare(std::string("SELECT count(*) FROM pragma_table_info("
                                            "'_pgtide_tables') WHERE name = '") +
                                    column + "'",
                                what);
        if (step(has.get(), what) == SQLITE_ROW && sqlite3_column_int(has.get(), 0) == 0) {
            exec(std::string(R"(ALTER TABLE "_pgtide_tables" ADD COLUMN )") + ddl,
                 std::string("adding ") + column + " to _pgtide_tables");
        }
    };
    add_column("source_oid", R"("source_oid" INTEGER NOT NULL DEFAULT 0)");
    add_column("membership", R"("membership" TEXT NOT NULL DEFAULT '')");
    add_column("copy_key", R"("copy_key" TEXT NOT NULL DEFAULT '')");
    add_column("source_columns", R"("source_columns" TEXT NOT NULL DEFAULT '')");

    begin_ = prepare("BEGIN IMMEDIATE", "preparing BEGIN");
    commit_ = prepare("COMMIT", "preparing COMMIT");
    rollback_ = prepare("ROLLBACK", "preparing ROLLBACK");
}

SqliteDestination::~SqliteDestination() = default;
SqliteDestination::SqliteDestination(SqliteDestination&&) noexcept = default;
SqliteDestination& SqliteDestination::operator=(SqliteDestination&&) noexcept = default;

void SqliteDestination::fail(int code, const std::string& what) const {
    const int extended = db_ ? sqlite3_extended_errcode(db_.get()) : code;
    const int reported = (extended & 0xff) == (code & 0xff) ? extended : code;
    std::string message = "sqlite destination " + path_ + ": " + what + ": ";
    message += db_ ? sqlite3_errmsg(db_.get()) : sqlite3_errstr(code);
    const int system_errno = db_ ? sqlite3_system_errno(db_.get()) : 0;
    if ((reported & 0xff) == SQLITE_IOERR && system_errno != 0) {
        message += std::string(": ") + std::strerror(system_errno);
    }
    message += " (sqlite code " + std::to_string(reported) + ")";
    message += hint(reported);
    throw DestinationError(kind_of(reported), reported, message);
}

SqliteDestination::Statement SqliteDestination::prepare(const std::string& sql,
                                                        const std::string& what) {
    sqlite3_stmt* raw = nullptr;
    const int rc = sqlite3_prepare_v3(db_.get(), sql.c_str(), int(sql.size() + 1),
                                      SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    Statement stmt(raw);
    if (rc != SQLITE_OK) {
        fail(rc, what);
    }
    return stmt;
}

void SqliteDestination::exec(const std::string& sql, const std::string& what) {
    const int rc = sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) {
        fail(rc, what);
    }
}

int SqliteDestination::step(sqlite3_stmt* stmt, const std::string& what) {
    const int rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        fail(rc, what);
    }
    return rc;
}

int SqliteDestination::step(sqlite3_stmt* stmt, const char* action, const std::string& object) {
    const int rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        fail(rc, std::string(action) + " " + object);
    }
    return rc;
}

sqlite3_stmt* SqliteDestination::metadata_statement(Statement& slot, const char* sql) {
    if (!slot) {
        slot = prepare(sql, "preparing a metadata statement");
    }
    return slot.get();
}

bool SqliteDestination::table_exists(const std::string& name) {
    Statement stmt = prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                             "looking up table " + name);
    bind_str(stmt.get(), 1, name); // sqlite_schema.name compares with SQLite's case folding
    ResetGuard guard(stmt.get());
    return step(stmt.get(), "looking up table", name) == SQLITE_ROW;
}

// ---- transactions ------------------------------------------------------------------------

void SqliteDestination::begin() {
    ResetGuard guard(begin_.get());
    step(begin_.get(), "BEGIN IMMEDIATE");
}

void SqliteDestination::commit() {
    ResetGuard guard(commit_.get());
    step(commit_.get(), "COMMIT");
}

void SqliteDestination::rollback() {
    // What the cache learnt inside the transaction may be undone with it.
    tombstones_.clear();
    if (sqlite3_get_autocommit(db_.get()) != 0) {
        return;
    }
    ResetGuard guard(rollback_.get());
    step(rollback_.get(), "ROLLBACK");
}

bool SqliteDestination::in_transaction() const {
    return sqlite3_get_autocommit(db_.get()) == 0;
}

// ---- tables ------------------------------------------------------------------------------

void SqliteDestination::ensure_table(const schema::Table& table) {
    const std::string& target = table.target;
    const std::string what = "creating table " + target;
    if (table.key_columns.empty()) {
        throw InternalError("table " + table.qualified() +
                            " reached the destination without a key");
    }
    for (const schema::TableColumn& c : table.columns) {
        if (same_identifier(c.name, kLsnColumn) || same_identifier(c.name, kDeletedColumn)) {
            throw DestinationError(DestinationErrorKind::Schema, 0,
                                   "sqlite destination " + path_ + ": column \"" + c.name +
                                       "\" of " + table.qualified() +
                                       " collides with a column pgtide reserves");
        }
    }
    tables_.erase(target);

    if (!table_exists(target)) {
        std::string sql = "CREATE TABLE " + quote_identifier(target) + " (";
        for (std::size_t i = 0; i < table.columns.size(); ++i) {
            const schema::TableColumn& c = table.columns[i];
            sql += quote_identifier(c.name) + " " + schema::storage_class_name(c.storage);
            if (is_key_column(table, i)) {
                sql += " NOT NULL";
            }
            sql += ", ";
        }
        sql += quote_identifier(kLsnColumn) + " INTEGER NOT NULL, ";
        if (deletes_ == Deletes::Soft) {
            sql += quote_identifier(kDeletedColumn) + " INTEGER NOT NULL DEFAULT 0, ";
        }
        sql += "PRIMARY KEY (";
        for (std::size_t k = 0; k < table.key_columns.size(); ++k) {
            sql += (k > 0 ? ", " : "") + quote_identifier(table.columns[table.key_columns[k]].name);
        }
        sql += "))";
        exec(sql, what);
        return;
    }

    // The table exists: read its columns (name, declared type, position in the primary key).
    struct Existing {
        std::string name;
        std::string type;
        int pk = 0;
    };
    std::vector<Existing> existing;
    {
        Statement info = prepare("SELECT name, type, pk FROM pragma_table_info(?1)",
                                 "reading the columns of " + target);
        bind_str(info.get(), 1, target);
        ResetGuard guard(info.get());
        while (step(info.get(), "reading the columns of", target) == SQLITE_ROW) {
            existing.push_back(Existing{column_text(info.get(), 0), column_text(info.get(), 1),
                                        sqlite3_column_int(info.get(), 2)});
        }
    }
    const auto schema_error = [&](const std::string& message) {
        return DestinationError(DestinationErrorKind::Schema, 0,
                                "sqlite destination " + path_ + ": table " + target + " (for " +
                                    table.qualified() + ") " + message);
    };
    const auto find = [&](const std::string& name) -> const Existing* {
        for (const Existing& e : existing) {
            if (same_identifier(e.name, name)) {
                return &e;
            }
        }
        return nullptr;
    };

    if (find(kLsnColumn) == nullptr) {
        throw schema_error("exists but has no _pgtide_lsn column: it was not created by pgtide; "
                           "drop or rename it, or choose another target name");
    }
    const Existing* deleted = find(kDeletedColumn);
    if (deleted != nullptr && deletes_ == Deletes::Hard) {
        // Its rows marked deleted would come back as live rows, and deleted ones would go.
        throw schema_error("has a _pgtide_deleted column: it keeps rows deleted on the source "
                           "(destination.deletes = \"soft\"); set deletes = \"soft\" again, or "
                           "drop the table to start it anew with hard deletes");
    }
    std::vector<const Existing*> existing_key;
    for (const Existing& e : existing) {
        if (e.pk > 0) {
            existing_key.push_back(&e);
        }
    }
    std::sort(existing_key.begin(), existing_key.end(),
              [](const Existing* a, const Existing* b) { return a->pk < b->pk; });
    bool same_key = existing_key.size() == table.key_columns.size();
    for (std::size_t k = 0; same_key && k < existing_key.size(); ++k) {
        same_key = same_identifier(existing_key[k]->name, table.columns[table.key_columns[k]].name);
    }
    if (!same_key) {
        const auto names = [](const std::vector<std::string>& v) {
            std::string s;
            for (const std::string& n : v) {
                s += (s.empty() ? "" : ", ") + n;
            }
            return "(" + s + ")";
        };
        std::vector<std::string> have;
        std::vector<std::string> want;
        for (const Existing* e : existing_key) {
            have.push_back(e->name);
        }
        for (const std::size_t c : table.key_columns) {
            want.push_back(table.columns[c].name);
        }
        throw schema_error("has primary key " + names(have) + " but the source key is " +
                           names(want) + "; drop the table or map the source to another target");
    }

    std::vector<std::string> additions;
    for (const schema::TableColumn& c : table.columns) {
        const char* type = schema::storage_class_name(c.storage);
        if (const Existing* e = find(c.name)) {
            if (!same_identifier(e->type, type)) {
                throw schema_error("declares column \"" + e->name + "\" as " + e->type +
                                   " but the source column needs " + type +
                                   "; re-create the table to follow the type change");
            }
        } else {
            additions.push_back("ALTER TABLE " + quote_identifier(target) + " ADD COLUMN " +
                                quote_identifier(c.name) + " " + type + missing_default(table, c));
        }
    }
    if (deleted == nullptr && deletes_ == Deletes::Soft) {
        // A table written with hard deletes holds live rows only.
        additions.push_back("ALTER TABLE " + quote_identifier(target) + " ADD COLUMN " +
                            quote_identifier(kDeletedColumn) + " INTEGER NOT NULL DEFAULT 0");
    }
    for (const std::string& sql : additions) {
        exec(sql, "adding a column to " + target);
    }
}

SqliteDestination::TableStatements& SqliteDestination::statements_for(const schema::Table& table) {
    auto it = tables_.find(table.target);
    if (it != tables_.end()) {
        const TableStatements& s = it->second;
        bool same = s.key_columns == table.key_columns && s.columns.size() == table.columns.size();
        for (std::size_t i = 0; same && i < s.columns.size(); ++i) {
            same = s.columns[i] == table.columns[i].name;
        }
        if (same) {
            return it->second;
        }
        tables_.erase(it);
    }
    if (table.key_columns.empty()) {
        throw InternalError("table " + table.qualified() +
                            " reached the destination without a key");
    }
    TableStatements s;
    for (const schema::TableColumn& c : table.columns) {
        s.columns.push_back(c.name);
    }
    s.key_columns = table.key_columns;
    return tables_.emplace(table.target, std::move(s)).first->second;
}

bool SqliteDestination::may_have_tombstones(const std::string& target) {
    auto it = tombstones_.find(target);
    if (it == tombstones_.end()) {
        Statement stmt = prepare(
            "SELECT EXISTS (SELECT 1 FROM \"_pgtide_tombstones\" WHERE \"target_table\" = ?1)",
            "looking for tombstones of " + target);
        bind_str(stmt.get(), 1, target);
        const int rc = step(stmt.get(), "looking for tombstones of " + target);
        const bool any = rc == SQLITE_ROW && sqlite3_column_int(stmt.get(), 0) != 0;
        it = tombstones_.emplace(target, any).first;
    }
    return it->second;
}

void SqliteDestination::raise_tombstone(const std::string& target, const std::string& key,
                                        schema::Lsn version) {
    tombstones_[target] = true;
    sqlite3_stmt* stmt = metadata_statement(
        tombstone_,
        R"(INSERT INTO "_pgtide_tombstones" ("target_table", "key", "lsn") VALUES (?1, ?2, ?3)
           ON CONFLICT ("target_table", "key") DO UPDATE SET "lsn" = excluded."lsn"
           WHERE excluded."lsn" > "_pgtide_tombstones"."lsn")");
    ResetGuard guard(stmt);
    bind_str(stmt, 1, target);
    bind_str(stmt, 2, key);
    bind_int(stmt, 3, lsn_to_int(version));
    step(stmt, "recording a tombstone for", target);
}

// ---- apply -------------------------------------------------------------------------------

namespace {

// INSERT … SELECT <row> WHERE NOT EXISTS (tombstone) ON CONFLICT (key) DO UPDATE … WHERE
// <version>. Parameters: ?1..?N the columns, ?N+1 the version, ?N+2 the target table,
// ?N+3 the encoded key. `snapshot` selects copy_rows' strict comparisons.
// Without tombstones, `rows` rows at once: a VALUES list whose row r has the columns
// ?(r*N+1)..?(r*N+N), and the version ?(rows*N+1). One statement for many rows spares SQLite
// its per-statement work (a statement transaction, cursors opened and closed, a reset): a
// quarter of the writer's CPU in a copy.
std::string versioned_insert_sql(const schema::Table& table, Deletes deletes, bool snapshot,
                                 bool tombstones = true, int rows = 1) {
    const int n = int(table.columns.size());
    const std::string version = "?" + std::to_string(n + 1);
    const std::string target = quote_identifier(table.target);
    std::string cols;
    std::string params;
    std::string sets;
    for (int i = 0; i < n; ++i) {
        const std::string name = quote_identifier(table.columns[std::size_t(i)].name);
        cols += name + ", ";
        params += "?" + std::to_string(i + 1) + ", ";
        if (!is_key_column(table, std::size_t(i))) {
            sets += name + " = excluded." + name + ", ";
        }
    }
    if (deletes == Deletes::Soft) {
        sets += quote_identifier(kDeletedColumn) + " = 0, "; // live again; inserted rows: DEFAULT
    }
    const std::string lsn = quote_identifier(kLsnColumn);
    std::string key;
    for (std::size_t k = 0; k < table.key_columns.size(); ++k) {
        key += (k > 0 ? ", " : "") + quote_identifier(table.columns[table.key_columns[k]].name);
    }
    if (!tombstones) {
        const std::string last = "?" + std::to_string(rows * n + 1);
        std::string values;
        for (int r = 0; r < rows; ++r) {
            values += r > 0 ? ", (" : "(";
            for (int i = 0; i < n; ++i) {
                values += "?" + std::to_string(r * n + i + 1) + ", ";
            }
            values += last + ")";
        }
        return "INSERT INTO " + target + " (" + cols + lsn + ") VALUES " + values +
               " ON CONFLICT (" + key + ") DO UPDATE SET " + sets + lsn + " = excluded." + lsn +
               " WHERE excluded." + lsn + (snapshot ? " > " : " >= ") + target + "." + lsn;
    }
    return "INSERT INTO " + target + " (" + cols + lsn + ") SELECT " + params + version +
           " WHERE NOT EXISTS (SELECT 1 FROM \"_pgtide_tombstones\" WHERE \"target_table\" = ?" +
           std::to_string(n + 2) + " AND \"key\" IN (?" + std::to_string(n + 3) + ", '" +
           std::string(kTableTombstoneKey) + "') AND \"lsn\" " + (snapshot ? ">=" : ">") + " " +
           version + ") ON CONFLICT (" + key + ") DO UPDATE SET " + sets + lsn + " = excluded." +
           lsn + " WHERE excluded." + lsn + (snapshot ? " > " : " >= ") + target + "." + lsn;
}

/// Rows per many-row copy statement (versioned_insert_sql's `rows`): as many as SQLite's
/// parameter limit allows, up to 64.
int rows_per_copy_statement(sqlite3* db, const schema::Table& table) {
    const int limit = sqlite3_limit(db, SQLITE_LIMIT_VARIABLE_NUMBER, -1);
    const int per_row = int(table.columns.size());
    return std::max(1, std::min(64, (limit - 1) / std::max(1, per_row)));
}

} // namespace

void SqliteDestination::copy_rows(const schema::Table& table, const std::vector<schema::Row>& rows,
                                  schema::Lsn version) {
    for (const schema::Row& row : rows) {
        check_row(table, row, table.columns.size(), "snapshot row");
    }
    TableStatements& s = statements_for(table);
    const int n = int(table.columns.size());
    const std::int64_t v = lsn_to_int(version);
    if (!may_have_tombstones(table.target)) {
        if (!s.copy_untombstoned) {
            s.copy_untombstoned = prepare(versioned_insert_sql(table, deletes_, true, false),
                                          "preparing the copy of " + table.target);
            s.copy_many = prepare(versioned_insert_sql(table, deletes_, true, false,
                                                       rows_per_copy_statement(db_.get(), table)),
                                  "preparing the copy of " + table.target);
        }
        std::size_t done = 0;
        const auto many =
            std::size_t((sqlite3_bind_parameter_count(s.copy_many.get()) - 1) / std::max(n, 1));
        for (sqlite3_stmt* stmt = s.copy_many.get(); rows.size() - done >= many; done += many) {
            ResetGuard guard(stmt);
            for (std::size_t r = 0; r < many; ++r) {
                const schema::Row& row = rows[done + r];
                for (int i = 0; i < n; ++i) {
                    bind_value(stmt, int(r) * n + i + 1, row[std::size_t(i)]);
                }
            }
            bind_int(stmt, int(many) * n + 1, v);
            step(stmt, "copying rows into", table.target);
        }
        sqlite3_stmt* stmt = s.copy_untombstoned.get();
        for (; done < rows.size(); ++done) {
            ResetGuard guard(stmt);
            for (int i = 0; i < n; ++i) {
                bind_value(stmt, i + 1, rows[done][std::size_t(i)]);
            }
            bind_int(stmt, n + 1, v);
            step(stmt, "copying a row into", table.target);
        }
        return;
    }
    if (!s.copy) {
        s.copy = prepare(versioned_insert_sql(table, deletes_, /*snapshot=*/true),
                         "preparing the copy of " + table.target);
    }
    sqlite3_stmt* stmt = s.copy.get();
    for (const schema::Row& row : rows) {
        ResetGuard guard(stmt);
        for (int i = 0; i < n; ++i) {
            bind_value(stmt, i + 1, row[std::size_t(i)]);
        }
        const std::string key = encode_tombstone_key(row, table.key_columns);
        bind_int(stmt, n + 1, v);
        bind_str(stmt, n + 2, table.target);
        bind_str(stmt, n + 3, key);
        step(stmt, "copying a row into", table.target);
    }
}

void SqliteDestination::upsert(const schema::Table& table, const schema::Row& row,
                               schema::Lsn version) {
    check_row(table, row, table.columns.size(), "stream row");
    TableStatements& s = statements_for(table);
    const int n = int(row.size());
    const bool partial = std::any_of(row.begin(), row.end(), [](const schema::Value& v) {
        return std::holds_alternative<schema::UnchangedToast>(v);
    });

    if (!partial && !may_have_tombstones(table.target)) {
        if (!s.upsert_untombstoned) {
            s.upsert_untombstoned = prepare(versioned_insert_sql(table, deletes_, false, false),
                                            "preparing the upsert into " + table.target);
        }
        sqlite3_stmt* stmt = s.upsert_untombstoned.get();
        ResetGuard guard(stmt);
        for (int i = 0; i < n; ++i) {
            bind_value(stmt, i + 1, row[std::size_t(i)]);
        }
        bind_int(stmt, n + 1, lsn_to_int(version));
        step(stmt, "upserting a row into", table.target);
        return;
    }
    if (!partial) {
        if (!s.upsert) {
            s.upsert = prepare(versioned_insert_sql(table, deletes_, /*snapshot=*/false),
                               "preparing the upsert into " + table.target);
        }
        sqlite3_stmt* stmt = s.upsert.get();
        ResetGuard guard(stmt);
        for (int i = 0; i < n; ++i) {
            bind_value(stmt, i + 1, row[std::size_t(i)]);
        }
        const std::string key = encode_tombstone_key(row, table.key_columns);
        bind_int(stmt, n + 1, lsn_to_int(version));
        bind_str(stmt, n + 2, table.target);
        bind_str(stmt, n + 3, key);
        step(stmt, "upserting a row into", table.target);
        return;
    }

    // Some columns are unchanged TOAST: only an existing row can supply them, so this is an
    // UPDATE of the other columns (no row: skipped). An existing row at v has no tombstone
    // above v, so L >= v needs no tombstone check.
    std::vector<bool> unchanged(row.size());
    for (std::size_t i = 0; i < row.size(); ++i) {
        unchanged[i] = std::holds_alternative<schema::UnchangedToast>(row[i]);
        if (unchanged[i] && is_key_column(table, i)) {
            throw InternalError("key column \"" + table.columns[i].name + "\" of " +
                                table.qualified() + " arrived as unchanged TOAST");
        }
    }
    Statement& slot = s.partial[unchanged];
    const int first_key = n + 2; // ?1..?N columns (unchanged ones unused), ?N+1 version
    if (!slot) {
        const std::string lsn = quote_identifier(kLsnColumn);
        std::string sql = "UPDATE " + quote_identifier(table.target) + " SET ";
        for (int i = 0; i < n; ++i) {
            if (!unchanged[std::size_t(i)] && !is_key_column(table, std::size_t(i))) {
                sql += quote_identifier(table.columns[std::size_t(i)].name) + " = ?" +
                       std::to_string(i + 1) + ", ";
            }
        }
        if (deletes_ == Deletes::Soft) {
            sql += quote_identifier(kDeletedColumn) + " = 0, ";
        }
        sql += lsn + " = ?" + std::to_string(n + 1) + " WHERE " + where_key(table, first_key) +
               " AND " + lsn + " <= ?" + std::to_string(n + 1);
        slot = prepare(sql, "preparing a partial update of " + table.target);
    }
    sqlite3_stmt* stmt = slot.get();
    ResetGuard guard(stmt);
    for (int i = 0; i < n; ++i) {
        if (!unchanged[std::size_t(i)] && !is_key_column(table, std::size_t(i))) {
            bind_value(stmt, i + 1, row[std::size_t(i)]);
        }
    }
    bind_int(stmt, n + 1, lsn_to_int(version));
    for (std::size_t k = 0; k < table.key_columns.size(); ++k) {
        bind_value(stmt, first_key + int(k), row[table.key_columns[k]]);
    }
    step(stmt, "updating a row of", table.target);
}

void SqliteDestination::remove(const schema::Table& table, const schema::Row& key,
                               schema::Lsn version, bool record_tombstone) {
    check_row(table, key, table.key_columns.size(), "deleted key");
    TableStatements& s = statements_for(table);
    if (!s.remove) {
        const std::string lsn = quote_identifier(kLsnColumn);
        const std::string change = deletes_ == Deletes::Soft
                                       ? "UPDATE " + quote_identifier(table.target) + " SET " +
                                             quote_identifier(kDeletedColumn) + " = 1, " + lsn +
                                             " = ?1"
                                       : "DELETE FROM " + quote_identifier(table.target);
        s.remove = prepare(change + " WHERE " + where_key(table, 2) + " AND " + lsn + " <= ?1",
                           "preparing the delete from " + table.target);
    }
    {
        sqlite3_stmt* stmt = s.remove.get();
        ResetGuard guard(stmt);
        bind_int(stmt, 1, lsn_to_int(version));
        for (std::size_t k = 0; k < key.size(); ++k) {
            bind_value(stmt, 2 + int(k), key[k]);
        }
        step(stmt, "deleting a row of", table.target);
    }
    if (record_tombstone) {
        raise_tombstone(table.target, encode_tombstone_key(key), version);
    }
}

std::optional<schema::Row> SqliteDestination::read_row(const schema::Table& table,
                                                       const schema::Row& key) {
    check_row(table, key, table.key_columns.size(), "key to read");
    std::string columns;
    for (const auto& c : table.columns) {
        columns += (columns.empty() ? "" : ", ") + quote_identifier(c.name);
    }
    // Rare (a key change that left TOAST columns unchanged): prepared each time.
    Statement stmt = prepare("SELECT " + columns + " FROM " + quote_identifier(table.target) +
                                 " WHERE " + where_key(table, 1),
                             "preparing to read a row of " + table.target);
    for (std::size_t k = 0; k < key.size(); ++k) {
        bind_value(stmt.get(), 1 + int(k), key[k]);
    }
    if (step(stmt.get(), "reading a row of", table.target) != SQLITE_ROW) {
        return std::nullopt;
    }
    schema::Row row;
    for (int i = 0; i < int(table.columns.size()); ++i) {
        switch (sqlite3_column_type(stmt.get(), i)) {
        case SQLITE_NULL:
            row.emplace_back(schema::Null{});
            break;
        case SQLITE_INTEGER:
            row.emplace_back(std::int64_t(sqlite3_column_int64(stmt.get(), i)));
            break;
        case SQLITE_FLOAT:
            row.emplace_back(sqlite3_column_double(stmt.get(), i));
            break;
        case SQLITE_BLOB: {
            const auto* data = static_cast<const char*>(sqlite3_column_blob(stmt.get(), i));
            row.emplace_back(schema::Blob{std::string(
                data != nullptr ? data : "", std::size_t(sqlite3_column_bytes(stmt.get(), i)))});
            break;
        }
        default:
            row.emplace_back(column_text(stmt.get(), i));
        }
    }
    return row;
}

void SqliteDestination::truncate(const schema::Table& table, schema::Lsn version,
                                 bool record_tombstone) {
    const std::string lsn = quote_identifier(kLsnColumn);
    const std::string change = deletes_ == Deletes::Soft
                                   ? "UPDATE " + quote_identifier(table.target) + " SET " +
                                         quote_identifier(kDeletedColumn) + " = 1, " + lsn + " = ?1"
                                   : "DELETE FROM " + quote_identifier(table.target);
    Statement stmt =
        prepare(change + " WHERE " + lsn + " <= ?1", "preparing the truncate of " + table.target);
    bind_int(stmt.get(), 1, lsn_to_int(version));
    step(stmt.get(), "truncating", table.target);
    if (record_tombstone) {
        raise_tombstone(table.target, std::string(kTableTombstoneKey), version);
    }
}

void SqliteDestination::clear_tombstones(const std::string& target_table) {
    Statement stmt = prepare("DELETE FROM \"_pgtide_tombstones\" WHERE \"target_table\" = ?1",
                             "preparing to clear the tombstones of " + target_table);
    // Only after this transaction commits are they gone; until then, keep checking.
    tombstones_.erase(target_table);
    bind_str(stmt.get(), 1, target_table);
    step(stmt.get(), "clearing the tombstones of", target_table);
}

void SqliteDestination::reset_tables(const std::string& slot,
                                     const std::vector<schema::Table>& tables) {
    empty_tables(tables);
    Statement stmt = prepare("DELETE FROM \"_pgtide_tables\" WHERE \"slot_name\" = ?1",
                             "preparing to reset the tables of slot " + slot);
    bind_str(stmt.get(), 1, slot);
    step(stmt.get(), "resetting the tables of slot", slot);
}

void SqliteDestination::empty_tables(const std::vector<schema::Table>& tables) {
    for (const schema::Table& table : tables) {
        const bool exists = table_exists(table.target);
        if (exists && deletes_ == Deletes::Hard) {
            exec("DELETE FROM " + quote_identifier(table.target), "emptying " + table.target);
        }
        ensure_table(table); // the source's columns as they are now
        if (exists && deletes_ == Deletes::Soft) {
            // Kept, at their versions: the copy replaces those it finds (its version is above
            // them all), and those it does not find were deleted on the source.
            exec("UPDATE " + quote_identifier(table.target) + " SET " +
                     quote_identifier(kDeletedColumn) + " = 1 WHERE " +
                     quote_identifier(kDeletedColumn) + " = 0",
                 "marking the rows of " + table.target + " deleted before its copy");
        }
        clear_tombstones(table.target);
        record_column_types(table, true); // the copy that follows copies the table as it is now
    }
}

void SqliteDestination::request_copies(const std::string& slot,
                                       const std::vector<std::string>& source_tables) {
    Statement stmt = prepare(R"(UPDATE "_pgtide_tables" SET "state" = 'init' WHERE "slot_name" = ?1
                                AND "source_table" = ?2)",
                             "preparing to request copies for slot " + slot);
    for (const std::string& name : source_tables) {
        sqlite3_reset(stmt.get());
        bind_str(stmt.get(), 1, slot);
        bind_str(stmt.get(), 2, name);
        step(stmt.get(), "requesting a copy of", name);
    }
}

void SqliteDestination::forget_tables(const std::string& slot,
                                      const std::vector<std::string>& source_tables) {
    Statement stmt =
        prepare(R"(DELETE FROM "_pgtide_tables" WHERE "slot_name" = ?1 AND "source_table" = ?2)",
                "preparing to forget tables of slot " + slot);
    for (const std::string& name : source_tables) {
        sqlite3_reset(stmt.get());
        bind_str(stmt.get(), 1, slot);
        bind_str(stmt.get(), 2, name);
        step(stmt.get(), "forgetting the table state of", name);
    }
}

void SqliteDestination::record_column_types(const schema::Table& table, bool replace) {
    const std::string what = "recording the source column types of " + table.target;
    Statement stmt = prepare(
        std::string(R"(INSERT INTO "_pgtide_columns" ("target_table", "column_name", "type_oid",
                       "element_oid", "typmod", "source_type") VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                       ON CONFLICT ("target_table", "column_name") DO )") +
            (replace ? R"(UPDATE SET "type_oid" = excluded."type_oid",
                          "element_oid" = excluded."element_oid", "typmod" = excluded."typmod",
                          "source_type" = excluded."source_type")"
                     : "NOTHING"),
        what);
    for (const schema::TableColumn& c : table.columns) {
        ResetGuard guard(stmt.get());
        bind_str(stmt.get(), 1, table.target);
        bind_str(stmt.get(), 2, c.name);
        bind_int(stmt.get(), 3, c.type.oid);
        bind_int(stmt.get(), 4, c.type.element_oid);
        bind_int(stmt.get(), 5, c.typmod);
        bind_str(stmt.get(), 6, c.type_sql);
        step(stmt.get(), what);
    }
}

std::map<std::string, std::vector<schema::TableColumn>> SqliteDestination::column_types() {
    const std::string what = "reading the recorded source column types";
    Statement stmt = prepare(R"(SELECT "target_table", "column_name", "type_oid", "element_oid",
                                       "typmod", "source_type" FROM "_pgtide_columns")",
                             what);
    std::map<std::string, std::vector<schema::TableColumn>> out;
    while (step(stmt.get(), what) == SQLITE_ROW) {
        schema::TableColumn c;
        c.name = column_text(stmt.get(), 1);
        c.type.oid = std::uint32_t(sqlite3_column_int64(stmt.get(), 2));
        c.type.element_oid = std::uint32_t(sqlite3_column_int64(stmt.get(), 3));
        c.typmod = std::int32_t(sqlite3_column_int64(stmt.get(), 4));
        c.type_sql = column_text(stmt.get(), 5);
        out[column_text(stmt.get(), 0)].push_back(std::move(c));
    }
    return out;
}

// ---- metadata ----------------------------------------------------------------------------

std::optional<Checkpoint> SqliteDestination::load_checkpoint(const std::string& slot) {
    sqlite3_stmt* stmt = metadata_statement(
        load_checkpoint_,
        R"(SELECT "slot_name", "system_identifier", "timeline", "database", "epoch", "phase",
                  "consistent_lsn", "lsn", "owner", "lease_until", "updated_at"
           FROM "_pgtide_checkpoint" WHERE "slot_name" = ?1)");
    ResetGuard guard(stmt);
    bind_str(stmt, 1, slot);
    const std::string what = "reading the checkpoint of slot " + slot;
    if (step(stmt, what) != SQLITE_ROW) {
        return std::nullopt;
    }
    const auto corrupt = [&](const std::string& detail) {
        return DestinationError(DestinationErrorKind::Corrupt, 0,
                                "sqlite destination " + path_ + ": " + what + ": " + detail);
    };
    const auto lsn = [&](int col) {
        const std::int64_t v = sqlite3_column_int64(stmt, col);
        if (sqlite3_column_type(stmt, col) != SQLITE_INTEGER || v < 0) {
            throw corrupt("column " + std::string(sqlite3_column_name(stmt, col)) +
                          " is not an LSN");
        }
        return schema::Lsn(std::uint64_t(v));
    };
    Checkpoint c;
    c.slot_name = column_text(stmt, 0);
    c.system_identifier = column_text(stmt, 1);
    c.timeline = sqlite3_column_int64(stmt, 2);
    c.database = column_text(stmt, 3);
    c.epoch = sqlite3_column_int64(stmt, 4);
    const std::string phase = column_text(stmt, 5);
    const auto parsed = parse_phase(phase);
    if (!parsed) {
        throw corrupt("unknown phase '" + phase + "'");
    }
    c.phase = *parsed;
    c.consistent_lsn = lsn(6);
    c.lsn = lsn(7);
    c.owner = column_text(stmt, 8);
    c.lease_until_unix_ms = sqlite3_column_int64(stmt, 9);
    c.updated_at_unix_ms = sqlite3_column_int64(stmt, 10);
    return c;
}

std::vector<TableProgress> SqliteDestination::load_tables(const std::string& slot) {
    sqlite3_stmt* stmt = metadata_statement(
        load_tables_,
        R"(SELECT "source_table", "target_table", "state", "epoch", "copy_lsn", "rows_copied",
                  "source_oid", "membership", "copy_key", "source_columns"
           FROM "_pgtide_tables" WHERE "slot_name" = ?1 ORDER BY "source_table")");
    ResetGuard guard(stmt);
    bind_str(stmt, 1, slot);
    const std::string what = "reading the table states of slot " + slot;
    std::vector<TableProgress> out;
    while (step(stmt, what) == SQLITE_ROW) {
        TableProgress p;
        p.source_table = column_text(stmt, 0);
        p.target_table = column_text(stmt, 1);
        const std::string state = column_text(stmt, 2);
        const auto parsed = parse_table_state(state);
        const std::int64_t copy_lsn = sqlite3_column_int64(stmt, 4);
        if (!parsed || copy_lsn < 0) {
            throw DestinationError(DestinationErrorKind::Corrupt, 0,
                                   "sqlite destination " + path_ + ": " + what + ": table " +
                                       p.source_table + " has state '" + state + "' and copy_lsn " +
                                       std::to_string(copy_lsn));
        }
        p.state = *parsed;
        p.epoch = sqlite3_column_int64(stmt, 3);
        p.copy_lsn = schema::Lsn(std::uint64_t(copy_lsn));
        p.rows_copied = sqlite3_column_int64(stmt, 5);
        p.source_oid = std::uint32_t(sqlite3_column_int64(stmt, 6));
        p.membership = column_text(stmt, 7);
        p.copy_key = column_text(stmt, 8);
        p.source_columns = column_text(stmt, 9);
        out.push_back(std::move(p));
    }
    return out;
}

void SqliteDestination::set_table_progress(const std::string& slot, const TableProgress& p) {
    sqlite3_stmt* stmt = metadata_statement(
        set_table_progress_,
        R"(INSERT INTO "_pgtide_tables" ("slot_name", "source_table", "target_table", "state",
                                         "epoch", "copy_lsn", "rows_copied", "updated_at",
                                         "source_oid", "membership", "copy_key",
                                         "source_columns")
           VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
           ON CONFLICT ("slot_name", "source_table") DO UPDATE SET
               "target_table" = excluded."target_table", "state" = excluded."state",
               "epoch" = excluded."epoch", "copy_lsn" = excluded."copy_lsn",
               "rows_copied" = excluded."rows_copied", "updated_at" = excluded."updated_at",
               "source_oid" = excluded."source_oid", "membership" = excluded."membership",
               "copy_key" = excluded."copy_key",
               "source_columns" = excluded."source_columns")");
    ResetGuard guard(stmt);
    const std::string state = to_string(p.state);
    bind_str(stmt, 1, slot);
    bind_str(stmt, 2, p.source_table);
    bind_str(stmt, 3, p.target_table);
    bind_str(stmt, 4, state);
    bind_int(stmt, 5, p.epoch);
    bind_int(stmt, 6, lsn_to_int(p.copy_lsn));
    bind_int(stmt, 7, p.rows_copied);
    bind_int(stmt, 8, now_unix_ms());
    bind_int(stmt, 9, std::int64_t(p.source_oid));
    bind_str(stmt, 10, p.membership);
    bind_str(stmt, 11, p.copy_key);
    bind_str(stmt, 12, p.source_columns);
    step(stmt, "recording the state of", p.source_table);
}

void SqliteDestination::insert_checkpoint(const Checkpoint& c) {
    sqlite3_stmt* stmt = metadata_statement(
        insert_checkpoint_,
        R"(INSERT INTO "_pgtide_checkpoint" ("slot_name", "system_identifier", "timeline",
                "database", "epoch", "phase", "consistent_lsn", "lsn", "owner", "lease_until",
                "updated_at")
           VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11))");
    ResetGuard guard(stmt);
    const std::string phase = to_string(c.phase);
    bind_str(stmt, 1, c.slot_name);
    bind_str(stmt, 2, c.system_identifier);
    bind_int(stmt, 3, c.timeline);
    bind_str(stmt, 4, c.database);
    bind_int(stmt, 5, c.epoch);
    bind_str(stmt, 6, phase);
    bind_int(stmt, 7, lsn_to_int(c.consistent_lsn));
    bind_int(stmt, 8, lsn_to_int(c.lsn));
    bind_str(stmt, 9, c.owner);
    bind_int(stmt, 10, c.lease_until_unix_ms);
    bind_int(stmt, 11, c.updated_at_unix_ms);
    step(stmt, "inserting the checkpoint of slot", c.slot_name);
}

bool SqliteDestination::cas_checkpoint(const Checkpoint& expected, const Checkpoint& next) {
    if (!in_transaction()) {
        throw InternalError("checkpoint compare-and-swap outside a destination transaction");
    }
    if (next.slot_name != expected.slot_name) {
        throw InternalError("checkpoint compare-and-swap from slot " + expected.slot_name +
                            " to slot " + next.slot_name);
    }
    sqlite3_stmt* stmt = metadata_statement(
        cas_checkpoint_,
        R"(UPDATE "_pgtide_checkpoint" SET "system_identifier" = ?1, "timeline" = ?2,
               "database" = ?3, "epoch" = ?4, "phase" = ?5, "consistent_lsn" = ?6, "lsn" = ?7,
               "owner" = ?8, "lease_until" = ?9, "updated_at" = ?10
           WHERE "slot_name" = ?11 AND "epoch" = ?12 AND "owner" = ?13 AND "lsn" = ?14)");
    ResetGuard guard(stmt);
    const std::string phase = to_string(next.phase);
    bind_str(stmt, 1, next.system_identifier);
    bind_int(stmt, 2, next.timeline);
    bind_str(stmt, 3, next.database);
    bind_int(stmt, 4, next.epoch);
    bind_str(stmt, 5, phase);
    bind_int(stmt, 6, lsn_to_int(next.consistent_lsn));
    bind_int(stmt, 7, lsn_to_int(next.lsn));
    bind_str(stmt, 8, next.owner);
    bind_int(stmt, 9, next.lease_until_unix_ms);
    bind_int(stmt, 10, next.updated_at_unix_ms);
    bind_str(stmt, 11, expected.slot_name);
    bind_int(stmt, 12, expected.epoch);
    bind_str(stmt, 13, expected.owner);
    bind_int(stmt, 14, lsn_to_int(expected.lsn));
    step(stmt, "advancing the checkpoint of slot", expected.slot_name);
    return sqlite3_changes(db_.get()) == 1;
}

} // namespace pgtide::replicate
