// PgConnection: libpq in nonblocking mode on the event loop (connect, queries, COPY out/both).
// The only place in pgtide that calls libpq I/O functions.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <libpq-fe.h>

#include "io/task.hpp"

namespace pgtide::io {

/// A failed libpq operation or error result. The message carries the server's primary message
/// with DETAIL/HINT and the SQLSTATE when present; never a password.
struct PgError : std::runtime_error {
    explicit PgError(const std::string& message, std::string state = {}, bool lost = false);
    std::string sqlstate;         ///< "" when none (e.g. the connection broke)
    bool connection_lost = false; ///< CONNECTION_BAD, socket closed, server terminated (08*, 57P0x)
};

/// RAII owner of a PGresult. An empty PgResult (raw() == nullptr) has no rows.
class PgResult {
public:
    PgResult() noexcept = default;
    explicit PgResult(PGresult* result) noexcept : result_(result) {}

    explicit operator bool() const noexcept { return bool(result_); }
    ExecStatusType status() const noexcept;
    int rows() const noexcept;
    int columns() const noexcept;
    bool is_null(int row, int col) const noexcept;
    /// The text (or binary) value; "" for NULL.
    std::string_view get(int row, int col) const noexcept;
    std::optional<std::string> get_optional(int row, int col) const;
    /// Index of the column named `name`, -1 if absent.
    int column_index(std::string_view name) const;
    std::string command_tag() const;
    PGresult* raw() const noexcept { return result_.get(); }

private:
    struct Clear {
        void operator()(PGresult* r) const noexcept { PQclear(r); }
    };
    std::unique_ptr<PGresult, Clear> result_;
};

/// RAII owner of a buffer returned by PQgetCopyData (freed with PQfreemem).
class PgBuffer {
public:
    PgBuffer() noexcept = default;
    PgBuffer(char* data, std::size_t size) noexcept : data_(data), size_(size) {}

    std::string_view view() const noexcept { return {data_.get(), size_}; }
    const char* data() const noexcept { return data_.get(); }
    std::size_t size() const noexcept { return size_; }

private:
    struct Free {
        void operator()(char* p) const noexcept { PQfreemem(p); }
    };
    std::unique_ptr<char, Free> data_;
    std::size_t size_ = 0;
};

/// One step of a COPY BOTH stream.
struct CopyRead {
    enum class Kind { Data, Timeout, Done } kind;
    PgBuffer data; ///< the CopyData payload when kind == Data
};

/// A PostgreSQL connection driven by the current thread's EventLoop. No call blocks the loop:
/// libpq runs nonblocking and waits are one-shot polls on PQsocket(). One command at a time;
/// while a COPY BOTH runs, one coroutine may read (copy_both_read) while others write
/// (put_copy_data). Errors are PgError.
class PgConnection {
public:
    /// Connects with PQconnectStartParams(expand_dbname): `conninfo` (key=value or URI) first,
    /// then `extra` pairs overriding it (e.g. {"replication", "database"}). Suspends; throws
    /// PgError(connection_lost = true) naming host, port, dbname and user (never the password)
    /// on failure or when `timeout` passes. Name resolution inside libpq is synchronous.
    static Task<PgConnection> connect(std::string conninfo,
                                      std::vector<std::pair<std::string, std::string>> extra = {},
                                      std::chrono::milliseconds timeout = std::chrono::seconds(30));

    PgConnection() noexcept;
    PgConnection(PgConnection&&) noexcept;
    PgConnection& operator=(PgConnection&&) noexcept;
    PgConnection(const PgConnection&) = delete;
    PgConnection& operator=(const PgConnection&) = delete;
    ~PgConnection();

    /// Simple query protocol (also on replication connections); several statements allowed.
    /// Returns the last result (empty for an empty query) after reading all of them; throws
    /// PgError for the first error result.
    Task<PgResult> exec(std::string sql);
    /// From now on, exec and exec_params that get no complete answer within `timeout` close
    /// the connection and throw PgError with connection_lost (a silent network would otherwise
    /// hold them forever). nullopt (the default): no limit. COPY is never limited.
    void set_command_timeout(std::optional<std::chrono::milliseconds> timeout);
    /// Extended protocol with text parameters ($1...; nullopt is NULL). Not on replication
    /// connections.
    Task<PgResult> exec_params(std::string sql, std::vector<std::optional<std::string>> params);
    /// Prepares the named statement `name` (extended protocol; parameter types from `sql`'s
    /// casts). It lives as long as the connection, across transactions. Not on replication
    /// connections.
    Task<void> prepare(std::string name, std::string sql);
    /// Runs the prepared statement `name` with every parameter in binary format (the
    /// parameter type's send/recv form; none is NULL).
    Task<PgResult> exec_prepared_binary(std::string name, std::vector<std::string> params);
    /// exec_prepared_binary in two halves, so that the caller can work while the server runs
    /// the statement: send_prepared_binary returns once it is sent, finish_sent reads its
    /// results (and throws its error). Until then no other command may start (logic_error).
    /// The command timeout counts from the send.
    Task<void> send_prepared_binary(std::string name, std::vector<std::string> params);
    Task<PgResult> finish_sent();
    /// A command was sent that finish_sent has not read yet.
    bool has_sent() const noexcept;

    /// Starts `COPY ... TO STDOUT`; throws PgError if the server refuses it.
    Task<void> copy_out_start(std::string sql);
    /// The next CopyData payload, or nullopt once the COPY finished (its result consumed).
    /// Throws PgError if the COPY failed.
    Task<std::optional<PgBuffer>> copy_out_next();

    /// Starts `COPY ... FROM STDIN`; throws PgError if the server refuses it. Then
    /// put_copy_data for the payload and copy_in_end.
    Task<void> copy_in_start(std::string sql);
    /// Ends a COPY FROM STDIN: CopyDone, then its result (an error the server raised while
    /// reading the data is thrown as PgError).
    Task<PgResult> copy_in_end();

    /// Starts a COPY BOTH command (START_REPLICATION); throws PgError if refused.
    Task<void> copy_both_start(std::string sql);
    /// The next CopyData payload; Timeout when `deadline` passed with none; Done when the
    /// server ended the copy and the command's results were consumed (an error result is
    /// thrown as PgError). Only one reader at a time.
    Task<CopyRead>
    copy_both_read(std::optional<std::chrono::steady_clock::time_point> deadline = {});
    /// Queues one CopyData message and flushes it (COPY FROM STDIN or COPY BOTH). Safe while
    /// another coroutine is suspended in copy_both_read on this connection.
    Task<void> put_copy_data(std::string bytes);
    /// Ends the COPY BOTH from our side: CopyDone, drop the CopyData still arriving, consume
    /// the results. The connection can run commands afterwards.
    Task<void> end_copy_both();

    /// PQescapeLiteral / PQescapeIdentifier; throw PgError on invalid encoding.
    std::string escape_literal(std::string_view s) const;
    std::string escape_identifier(std::string_view s) const;
    int server_version() const noexcept;
    /// "host=H port=P dbname=D user=U" of the open connection (never the password).
    std::string target() const;
    bool is_open() const noexcept;
    /// Cancels pending waits (they throw PgError connection_lost) and closes the connection.
    void close() noexcept;
    PGconn* raw() const noexcept;

    struct State;

private:
    explicit PgConnection(std::shared_ptr<State> state) noexcept;
    std::shared_ptr<State> state_;
};

} // namespace pgtide::io
