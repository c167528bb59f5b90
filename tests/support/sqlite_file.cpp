// SqliteFile: canonical text rows out of an SQLite file.
#include "tests/support/sqlite_file.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include <sqlite3.h>

namespace pgtide::testing {

namespace {

struct StmtCloser {
    void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtCloser>;

std::string real_text(double d) {
    if (std::isinf(d)) {
        return d > 0 ? "Infinity" : "-Infinity";
    }
    if (std::isnan(d)) {
        return "NaN";
    }
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, d);
    return std::string(buf, r.ptr);
}

std::string blob_text(const void* data, int n) {
    static const char kHex[] = "0123456789abcdef";
    const auto* p = static_cast<const unsigned char*>(data);
    std::string out = "\\x";
    out.reserve(2 + 2 * size_t(n));
    for (int i = 0; i < n; ++i) {
        out += kHex[p[i] >> 4];
        out += kHex[p[i] & 0xf];
    }
    return out;
}

const char* type_name(int t) {
    switch (t) {
    case SQLITE_INTEGER:
        return "integer";
    case SQLITE_FLOAT:
        return "real";
    case SQLITE_TEXT:
        return "text";
    case SQLITE_BLOB:
        return "blob";
    default:
        return "null";
    }
}

} // namespace

void SqliteFile::Closer::operator()(sqlite3* db) const {
    sqlite3_close_v2(db);
}

SqliteFile::SqliteFile(const std::string& path) : path_(path) {
    sqlite3* db = nullptr;
    const int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    db_.reset(db);
    if (rc != SQLITE_OK) {
        throw std::runtime_error("open " + path +
                                 " read-only: " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    }
    // A bounded wait when pgtide holds a write lock at this moment.
    sqlite3_busy_timeout(db, 10000);
}

SqliteFile::~SqliteFile() = default;

namespace {

template <typename F>
void each_row(sqlite3* db, const std::string& path, const std::string& sql, F&& on_row) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), int(sql.size()), &raw, nullptr) != SQLITE_OK) {
        throw std::runtime_error(std::string(sqlite3_errmsg(db)) + "\n  in " + path +
                                 " while preparing: " + sql);
    }
    Stmt stmt{raw};
    for (;;) {
        const int rc = sqlite3_step(stmt.get());
        if (rc == SQLITE_DONE) {
            return;
        }
        if (rc != SQLITE_ROW) {
            throw std::runtime_error(std::string(sqlite3_errmsg(db)) + "\n  in " + path +
                                     " while running: " + sql);
        }
        on_row(stmt.get());
    }
}

} // namespace

Rows SqliteFile::rows(const std::string& sql) const {
    Rows rows;
    each_row(db_.get(), path_, sql, [&](sqlite3_stmt* s) {
        Row row;
        const int n = sqlite3_column_count(s);
        for (int c = 0; c < n; ++c) {
            switch (sqlite3_column_type(s, c)) {
            case SQLITE_INTEGER:
                row.emplace_back(std::to_string(sqlite3_column_int64(s, c)));
                break;
            case SQLITE_FLOAT:
                row.emplace_back(real_text(sqlite3_column_double(s, c)));
                break;
            case SQLITE_TEXT: {
                const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, c));
                row.emplace_back(std::string(text, size_t(sqlite3_column_bytes(s, c))));
                break;
            }
            case SQLITE_BLOB: {
                const void* data = sqlite3_column_blob(s, c);
                row.emplace_back(blob_text(data, sqlite3_column_bytes(s, c)));
                break;
            }
            default:
                row.emplace_back(std::nullopt);
            }
        }
        rows.push_back(std::move(row));
    });
    return rows;
}

std::string SqliteFile::value(const std::string& sql) const {
    const Rows r = rows(sql);
    if (r.size() != 1 || r[0].size() != 1 || !r[0][0]) {
        throw std::runtime_error("expected one non-NULL value (got " + std::to_string(r.size()) +
                                 " rows) from: " + sql);
    }
    return *r[0][0];
}

std::vector<std::vector<std::string>> SqliteFile::types(const std::string& sql) const {
    std::vector<std::vector<std::string>> out;
    each_row(db_.get(), path_, sql, [&](sqlite3_stmt* s) {
        std::vector<std::string> row;
        const int n = sqlite3_column_count(s);
        for (int c = 0; c < n; ++c) {
            row.emplace_back(type_name(sqlite3_column_type(s, c)));
        }
        out.push_back(std::move(row));
    });
    return out;
}

std::string SqliteFile::type_of(const std::string& sql) const {
    const auto t = types(sql);
    if (t.size() != 1 || t[0].size() != 1) {
        throw std::runtime_error("expected one value (got " + std::to_string(t.size()) +
                                 " rows) from: " + sql);
    }
    return t[0][0];
}

std::vector<std::string> SqliteFile::tables() const {
    std::vector<std::string> names;
    for (const auto& row : rows("SELECT name FROM sqlite_schema WHERE type = 'table' AND name "
                                "NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")) {
        names.push_back(row[0].value_or(""));
    }
    return names;
}

void write_sqlite(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
        const std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
        sqlite3_close(db);
        throw std::runtime_error("opening " + path + ": " + message);
    }
    sqlite3_busy_timeout(db, 10000);
    char* error = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    const std::string message = error != nullptr ? error : "";
    sqlite3_free(error);
    sqlite3_close(db);
    if (rc != SQLITE_OK) {
        throw std::runtime_error(path + ": " + message + " in " + sql);
    }
}

} // namespace pgtide::testing
