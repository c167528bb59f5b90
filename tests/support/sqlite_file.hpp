// SqliteFile: read a destination SQLite file back as canonical text rows for comparison.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tests/support/rows.hpp"

struct sqlite3;

namespace pgtide::testing {

/// A read-only connection to an SQLite file. Values come back as text in one spelling:
/// INTEGER in decimal, REAL as the shortest text that reads back to the same double ("1.5",
/// "1e+300", "-0", "Infinity", "-Infinity"; an integral REAL prints without a point, so check
/// storage classes with type_of or typeof()), TEXT as stored, BLOB as `\x` + lower-case hex,
/// NULL as nullopt.
class SqliteFile {
public:
    /// Opens path read-only; throws std::runtime_error if it cannot (a missing file included).
    explicit SqliteFile(const std::string& path);
    ~SqliteFile();
    SqliteFile(const SqliteFile&) = delete;
    SqliteFile& operator=(const SqliteFile&) = delete;

    /// Every row of sql. Throws std::runtime_error with SQLite's message.
    Rows rows(const std::string& sql) const;
    /// The single non-NULL value of a one-row, one-column result; throws otherwise.
    std::string value(const std::string& sql) const;
    /// The storage class of every value of sql's rows: "integer", "real", "text", "blob", "null".
    std::vector<std::vector<std::string>> types(const std::string& sql) const;
    /// The storage class of the single value of sql.
    std::string type_of(const std::string& sql) const;
    /// Names of the tables in the file (sqlite_ internals excluded), sorted.
    std::vector<std::string> tables() const;

    const std::string& path() const { return path_; }

private:
    struct Closer {
        void operator()(sqlite3* db) const;
    };
    std::string path_;
    std::unique_ptr<sqlite3, Closer> db_;
};

/// Runs `sql` (one statement or several) on the SQLite file at `path` through a writable
/// connection that waits up to 10 s for another writer. Throws std::runtime_error with SQLite's
/// message and the SQL when it fails.
void write_sqlite(const std::string& path, const std::string& sql);

} // namespace pgtide::testing
