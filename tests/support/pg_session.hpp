// PgSession: one persistent libpq session for a test's own writes (a workload issuing thousands
// of statements; a connection per statement would dominate the run).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

struct pg_conn;

namespace pgtide::testing {

/// A blocking libpq connection, owned by one thread at a time. Server notices are dropped.
class PgSession {
public:
    /// Connects (blocking); throws std::runtime_error with libpq's message.
    explicit PgSession(const std::string& dsn);
    ~PgSession();
    PgSession(const PgSession&) = delete;
    PgSession& operator=(const PgSession&) = delete;

    /// Runs one statement (or several, separated by semicolons); the rows the last one changed
    /// (0 for DDL, TRUNCATE and transaction control). Throws std::runtime_error carrying the
    /// server's message and the start of the SQL.
    std::int64_t exec(const std::string& sql);

    /// The single value of a one-row, one-column query; throws on anything else (NULL included).
    std::string value(const std::string& sql);

private:
    struct Closer {
        void operator()(pg_conn* c) const;
    };
    std::unique_ptr<pg_conn, Closer> conn_;
};

} // namespace pgtide::testing
