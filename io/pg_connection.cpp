// PgConnection: the libpq nonblocking protocol (PQconnectPoll, PQsend*, PQflush, PQconsumeInput,
// PQisBusy/PQgetResult, PQgetCopyData(async), PQputCopyData/End) on one-shot socket polls.
#include "io/pg_connection.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include <poll.h>

#include "io/cancel.hpp"
#include "io/event_loop.hpp"
#include "io/log.hpp"
#include "io/timer.hpp"
#include "io/wait_fd.hpp"

namespace pgtide::io {

using Deadline = std::optional<std::chrono::steady_clock::time_point>;

struct PgConnection::State {
    PGconn* conn = nullptr;
    CancelSource closing; // cancels every pending wait when the connection closes
    int readers = 0;      // coroutines suspended waiting for input in copy_both_read
    std::optional<std::chrono::milliseconds> command_timeout; // see set_command_timeout
    Deadline command_deadline; // of the command running now, from command_timeout
    bool sent = false;         // send_prepared_binary sent a command that finish_sent reads
    std::chrono::steady_clock::time_point woke{}; // copy_both_read's last wait for input ended

    State() = default;
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State() { close(); }

    void close() noexcept {
        if (conn == nullptr) {
            return;
        }
        // Polls still armed on the socket hold a reference to it: cancel them, and submit now
        // so that no poll on this fd number is left for a later socket to inherit.
        try {
            closing.cancel();
            if (EventLoop* loop = EventLoop::current_or_null()) {
                loop->submit();
            }
        } catch (...) {
            // Out of SQEs: the polls complete on their own when the socket closes.
        }
        PQfinish(conn);
        conn = nullptr;
    }
};

namespace {

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) {
        s.pop_back();
    }
    return s;
}

bool lost_sqlstate(std::string_view sqlstate) {
    return sqlstate.starts_with("08") || sqlstate == "57P01" || sqlstate == "57P02" ||
           sqlstate == "57P03";
}

/// An error of the connection itself (libpq's message), e.g. a failed send or receive.
PgError connection_error(PGconn* conn, std::string_view what, bool lost) {
    std::string msg(what);
    if (conn != nullptr) {
        const std::string detail = trim(PQerrorMessage(conn));
        if (!detail.empty()) {
            msg += ": " + detail;
        }
        lost = lost || PQstatus(conn) == CONNECTION_BAD;
    }
    return PgError(msg, {}, lost);
}

/// The error carried by a result: primary message, detail, hint, SQLSTATE.
PgError result_error(PGconn* conn, const PGresult* r) {
    const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char* primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    const char* detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
    const char* hint = PQresultErrorField(r, PG_DIAG_MESSAGE_HINT);
    std::string msg = primary != nullptr ? std::string(primary) : trim(PQresultErrorMessage(r));
    if (msg.empty() && conn != nullptr) {
        msg = trim(PQerrorMessage(conn));
    }
    if (msg.empty()) {
        msg = std::string("unexpected result ") + PQresStatus(PQresultStatus(r));
    }
    if (detail != nullptr) {
        msg += "\nDETAIL: " + std::string(detail);
    }
    if (hint != nullptr) {
        msg += "\nHINT: " + std::string(hint);
    }
    std::string sqlstate = state != nullptr ? state : "";
    if (!sqlstate.empty()) {
        msg += " (SQLSTATE " + sqlstate + ")";
    }
    const bool lost =
        lost_sqlstate(sqlstate) || (conn != nullptr && PQstatus(conn) == CONNECTION_BAD);
    return PgError(msg, std::move(sqlstate), lost);
}

void ensure_open(const std::shared_ptr<PgConnection::State>& s) {
    if (!s || s->conn == nullptr) {
        throw PgError("connection is closed", {}, true);
    }
    if (s->sent) {
        throw std::logic_error("a command was started before finish_sent read the one sent");
    }
}

/// Waits for the socket; 0 when the deadline passed. PgError if the connection closes first.
Task<unsigned> wait_socket(PgConnection::State* s, unsigned mask, Deadline deadline) {
    const int fd = PQsocket(s->conn); // re-read before every wait: libpq may replace it
    if (fd < 0) {
        throw connection_error(s->conn, "no socket", true);
    }
    bool closed = false;
    unsigned events = 0;
    try {
        events = co_await wait_fd(fd, mask, deadline, s->closing.token());
    } catch (const Cancelled&) {
        closed = true;
    }
    if (closed) {
        throw PgError("connection closed while waiting for the server", {}, true);
    }
    co_return events;
}

/// Waits until input arrives (or the deadline passes: false) and reads it into libpq.
Task<bool> receive(PgConnection::State* s, Deadline deadline) {
    const unsigned events = co_await wait_socket(s, POLLIN, deadline);
    if (events == 0) {
        co_return false;
    }
    if (PQconsumeInput(s->conn) == 0) {
        throw connection_error(s->conn, "reading from the server", true);
    }
    co_return true;
}

/// Sends everything libpq has queued. While waiting for the socket to drain it also reads
/// input (the server may be blocked on its own send), unless a reader is waiting for input:
/// that reader consumes it, and taking the data from under its poll would strand it.
Task<void> flush(PgConnection::State* s) {
    for (;;) {
        const int r = PQflush(s->conn);
        if (r == 0) {
            co_return;
        }
        if (r < 0) {
            throw connection_error(s->conn, "sending to the server", true);
        }
        const bool read_too = s->readers == 0;
        const unsigned events =
            co_await wait_socket(s, read_too ? (POLLIN | POLLOUT) : POLLOUT, std::nullopt);
        if (read_too && (events & POLLIN) != 0 && PQconsumeInput(s->conn) == 0) {
            throw connection_error(s->conn, "reading from the server", true);
        }
    }
}

/// The next result of the running command, or an empty PgResult when it is complete. Past the
/// command's deadline (set_command_timeout), closes the connection and throws PgError as a lost
/// connection: a server that does not answer is as good as gone.
Task<PgResult> next_result(PgConnection::State* s) {
    while (PQisBusy(s->conn) != 0) {
        if (!co_await receive(s, s->command_deadline)) {
            const auto ms = s->command_timeout ? s->command_timeout->count() : 0;
            s->close();
            throw PgError("no answer from the server within " + std::to_string(ms) +
                              " ms; the connection is presumed dead",
                          {}, true);
        }
    }
    co_return PgResult{PQgetResult(s->conn)};
}

/// Sends CopyDone (PQputCopyEnd) and flushes it.
Task<void> put_copy_end(PgConnection::State* s) {
    for (;;) {
        const int r = PQputCopyEnd(s->conn, nullptr);
        if (r == 1) {
            break;
        }
        if (r < 0) {
            throw connection_error(s->conn, "ending COPY", true);
        }
        co_await wait_socket(s, POLLOUT, std::nullopt);
    }
    co_await flush(s);
}

/// Reads and drops CopyData until the server's CopyDone.
Task<void> drain_copy(PgConnection::State* s) {
    for (;;) {
        char* data = nullptr;
        const int n = PQgetCopyData(s->conn, &data, 1);
        if (n > 0) {
            PQfreemem(data);
            continue;
        }
        if (n == -1) {
            co_return;
        }
        if (n == -2) {
            throw connection_error(s->conn, "reading COPY data", true);
        }
        co_await receive(s, std::nullopt);
    }
}

/// Reads the remaining results of the running command until NULL, leaving the connection
/// ready for the next one. COPY states met on the way are ended (and, unless `copy_ok`,
/// reported as an error). Returns the last non-error result; throws the first error.
Task<PgResult> finish_command(PgConnection::State* s, bool copy_ok) {
    PgResult last;
    std::optional<PgError> error;
    for (;;) {
        PgResult r = co_await next_result(s);
        if (!r) {
            break;
        }
        const ExecStatusType st = r.status();
        if (st == PGRES_COPY_OUT || st == PGRES_COPY_IN || st == PGRES_COPY_BOTH) {
            if (!copy_ok && !error) {
                error.emplace("exec() cannot run COPY; use copy_out_start or copy_both_start");
            }
            if (st != PGRES_COPY_OUT) {
                co_await put_copy_end(s);
            }
            if (st != PGRES_COPY_IN) {
                co_await drain_copy(s);
            }
        } else if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE ||
                   st == PGRES_NONFATAL_ERROR) {
            if (!error) {
                error.emplace(result_error(s->conn, r.raw()));
            }
        } else {
            last = std::move(r);
        }
    }
    if (error) {
        throw *error;
    }
    co_return last;
}

/// After a command was sent: its first result must be `expected` (a COPY state).
Task<void> expect_copy(PgConnection::State* s, ExecStatusType expected, const char* what) {
    co_await flush(s);
    PgResult first = co_await next_result(s);
    if (first && first.status() == expected) {
        co_return;
    }
    std::optional<PgError> error;
    if (!first) {
        error.emplace(std::string(what) + ": the command returned no result");
    } else if (first.status() == PGRES_FATAL_ERROR || first.status() == PGRES_BAD_RESPONSE) {
        error.emplace(result_error(s->conn, first.raw()));
    } else {
        error.emplace(std::string(what) + ": unexpected result " + PQresStatus(first.status()));
    }
    if (first) {
        co_await finish_command(s, /*copy_ok=*/true);
    }
    throw *error;
}

std::string describe_target(PGconn* conn) {
    auto field = [](const char* v) { return std::string(v != nullptr ? v : ""); };
    std::string out = "host=" + field(PQhost(conn)) + " port=" + field(PQport(conn)) +
                      " dbname=" + field(PQdb(conn)) + " user=" + field(PQuser(conn));
    return out;
}

/// Replaces every occurrence of a password in msg.
std::string redact(std::string msg, const std::vector<std::string>& secrets) {
    for (const std::string& secret : secrets) {
        if (secret.empty()) {
            continue;
        }
        for (std::size_t pos = msg.find(secret); pos != std::string::npos;
             pos = msg.find(secret, pos)) {
            msg.replace(pos, secret.size(), "********");
            pos += 8;
        }
    }
    return msg;
}

std::vector<std::string> passwords(PGconn* conn, const std::string& conninfo,
                                   const std::vector<std::pair<std::string, std::string>>& extra) {
    std::vector<std::string> out;
    if (conn != nullptr && PQpass(conn) != nullptr) {
        out.emplace_back(PQpass(conn));
    }
    if (PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), nullptr)) {
        for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
            if (std::strcmp(o->keyword, "password") == 0 && o->val != nullptr) {
                out.emplace_back(o->val);
            }
        }
        PQconninfoFree(opts);
    }
    for (const auto& [key, value] : extra) {
        if (key == "password") {
            out.push_back(value);
        }
    }
    return out;
}

PgError connect_error(PGconn* conn, const std::string& conninfo,
                      const std::vector<std::pair<std::string, std::string>>& extra,
                      std::string_view why) {
    std::string msg = "could not connect to PostgreSQL (" + describe_target(conn) + ")";
    const std::string detail = trim(PQerrorMessage(conn));
    if (!why.empty()) {
        msg += ": " + std::string(why);
    } else if (!detail.empty()) {
        msg += ": " + detail;
    }
    return PgError(redact(std::move(msg), passwords(conn, conninfo, extra)), {}, true);
}

std::string escape(PGconn* conn, std::string_view s, bool identifier) {
    if (conn == nullptr) {
        throw PgError("connection is closed", {}, true);
    }
    char* p = identifier ? PQescapeIdentifier(conn, s.data(), s.size())
                         : PQescapeLiteral(conn, s.data(), s.size());
    if (p == nullptr) {
        throw connection_error(conn, identifier ? "escaping an identifier" : "escaping a literal",
                               false);
    }
    std::string out(p);
    PQfreemem(p);
    return out;
}

// Sets the deadline of a query from the connection's command timeout for as long as it runs
// (COPY, which has no deadline, never sees a stale one).
class CommandDeadline {
public:
    explicit CommandDeadline(PgConnection::State* s) : s_(s) {
        if (s_->command_timeout) {
            s_->command_deadline = std::chrono::steady_clock::now() + *s_->command_timeout;
        }
    }
    ~CommandDeadline() { s_->command_deadline.reset(); }
    CommandDeadline(const CommandDeadline&) = delete;
    CommandDeadline& operator=(const CommandDeadline&) = delete;

private:
    PgConnection::State* s_;
};

Task<PgResult> exec_impl(std::shared_ptr<PgConnection::State> s, std::string sql) {
    ensure_open(s);
    const CommandDeadline deadline(s.get());
    if (PQsendQuery(s->conn, sql.c_str()) == 0) {
        throw connection_error(s->conn, "sending a query", false);
    }
    co_await flush(s.get());
    co_return co_await finish_command(s.get(), /*copy_ok=*/false);
}

Task<PgResult> exec_params_impl(std::shared_ptr<PgConnection::State> s, std::string sql,
                                std::vector<std::optional<std::string>> params) {
    ensure_open(s);
    const CommandDeadline deadline(s.get());
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const auto& p : params) {
        values.push_back(p ? p->c_str() : nullptr);
    }
    if (PQsendQueryParams(s->conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                          values.data(), nullptr, nullptr, 0) == 0) {
        throw connection_error(s->conn, "sending a query", false);
    }
    co_await flush(s.get());
    co_return co_await finish_command(s.get(), /*copy_ok=*/false);
}

Task<void> prepare_impl(std::shared_ptr<PgConnection::State> s, std::string name, std::string sql) {
    ensure_open(s);
    const CommandDeadline deadline(s.get());
    if (PQsendPrepare(s->conn, name.c_str(), sql.c_str(), 0, nullptr) == 0) {
        throw connection_error(s->conn, "sending a statement to prepare", false);
    }
    co_await flush(s.get());
    co_await finish_command(s.get(), /*copy_ok=*/false);
}

/// Queues and flushes the prepared statement `name` with binary parameters; its results are
/// left for the caller to read.
Task<void> send_prepared_binary_impl(PgConnection::State* s, std::string name,
                                     std::vector<std::string> params) {
    std::vector<const char*> values;
    std::vector<int> lengths;
    const std::vector<int> formats(params.size(), 1);
    values.reserve(params.size());
    lengths.reserve(params.size());
    for (const auto& p : params) {
        values.push_back(p.data());
        lengths.push_back(static_cast<int>(p.size()));
    }
    if (PQsendQueryPrepared(s->conn, name.c_str(), static_cast<int>(values.size()), values.data(),
                            lengths.data(), formats.data(), 0) == 0) {
        throw connection_error(s->conn, "sending a prepared statement", false);
    }
    co_await flush(s);
}

Task<PgResult> exec_prepared_binary_impl(std::shared_ptr<PgConnection::State> s, std::string name,
                                         std::vector<std::string> params) {
    ensure_open(s);
    const CommandDeadline deadline(s.get());
    co_await send_prepared_binary_impl(s.get(), std::move(name), std::move(params));
    co_return co_await finish_command(s.get(), /*copy_ok=*/false);
}

Task<void> send_only_impl(std::shared_ptr<PgConnection::State> s, std::string name,
                          std::vector<std::string> params) {
    ensure_open(s);
    // The deadline runs from now until finish_sent has read the answer.
    if (s->command_timeout) {
        s->command_deadline = std::chrono::steady_clock::now() + *s->command_timeout;
    }
    try {
        co_await send_prepared_binary_impl(s.get(), std::move(name), std::move(params));
    } catch (...) {
        s->command_deadline.reset();
        throw;
    }
    s->sent = true;
}

Task<PgResult> finish_sent_impl(std::shared_ptr<PgConnection::State> s) {
    if (!s || !s->sent) {
        throw std::logic_error("finish_sent without a command sent");
    }
    // Whatever happens now, the command is over: a lost connection fails the next one too.
    struct Over {
        PgConnection::State* s;
        ~Over() {
            s->sent = false;
            s->command_deadline.reset();
        }
    } over{s.get()};
    if (s->conn == nullptr) {
        throw PgError("connection is closed", {}, true);
    }
    co_return co_await finish_command(s.get(), /*copy_ok=*/false);
}

Task<void> copy_start_impl(std::shared_ptr<PgConnection::State> s, std::string sql,
                           ExecStatusType expected) {
    ensure_open(s);
    if (PQsendQuery(s->conn, sql.c_str()) == 0) {
        throw connection_error(s->conn, "sending COPY", false);
    }
    co_await expect_copy(s.get(), expected,
                         expected == PGRES_COPY_OUT  ? "COPY TO STDOUT"
                         : expected == PGRES_COPY_IN ? "COPY FROM STDIN"
                                                     : "COPY BOTH");
}

Task<std::optional<PgBuffer>> copy_out_next_impl(std::shared_ptr<PgConnection::State> s) {
    ensure_open(s);
    for (;;) {
        char* data = nullptr;
        const int n = PQgetCopyData(s->conn, &data, 1);
        if (n > 0) {
            co_return PgBuffer{data, static_cast<std::size_t>(n)};
        }
        if (n == -1) {
            co_await finish_command(s.get(), /*copy_ok=*/true);
            co_return std::nullopt;
        }
        if (n == -2) {
            throw connection_error(s->conn, "reading COPY data", true);
        }
        co_await receive(s.get(), std::nullopt);
    }
}

/// Marks a reader as waiting for input while it lives (see flush()).
struct ReaderMark {
    PgConnection::State& state;
    explicit ReaderMark(PgConnection::State& s) : state(s) { ++state.readers; }
    ~ReaderMark() { --state.readers; }
    ReaderMark(const ReaderMark&) = delete;
    ReaderMark& operator=(const ReaderMark&) = delete;
};

Task<bool> receive_as_reader(PgConnection::State* s, Deadline deadline) {
    ReaderMark mark(*s);
    co_return co_await receive(s, deadline);
}

/// Reads what the socket holds now into libpq, without waiting.
void consume_now(PgConnection::State* s) {
    if (PQconsumeInput(s->conn) == 0) {
        throw connection_error(s->conn, "reading from the server", true);
    }
}

/// Sleeps until `until` unless the connection closes first (then throws as a lost connection).
Task<void> nap_until(PgConnection::State* s, std::chrono::steady_clock::time_point until) {
    bool closed = false;
    try {
        co_await sleep_until(until, s->closing.token());
    } catch (const Cancelled&) {
        closed = true;
    }
    if (closed) {
        throw PgError("connection closed while waiting for the server", {}, true);
    }
}

/// How long copy_both_read lets input gather after a wait that ended less than this ago.
/// A stream being caught up comes in one message per change, and a reader that drains it
/// faster than the walsender writes would otherwise wake for every few messages: about
/// 40,000 wakeups for 300,000 changes, on virtual machines where a sleep and a wakeup cost
/// tens of microseconds of the CPU the walsender and the destination need. With this pause
/// the reader wakes at most about once per interval while input keeps coming, and at once
/// for input after a quiet interval, so it adds at most this much to the latency of a busy
/// stream and nothing to a quiet one.
constexpr std::chrono::microseconds kGatherInput{1000};

Task<CopyRead> copy_both_read_impl(std::shared_ptr<PgConnection::State> s, Deadline deadline) {
    ensure_open(s);
    // libpq reads at most its buffer's free space (16 kB at first) at a time: before waiting,
    // take what the socket still holds, so that a pause never caps the rate.
    bool took_socket = false;
    bool paused = false;
    for (;;) {
        char* data = nullptr;
        const int n = PQgetCopyData(s->conn, &data, 1);
        if (n > 0) {
            co_return CopyRead{CopyRead::Kind::Data, PgBuffer{data, static_cast<std::size_t>(n)}};
        }
        if (n == -1) {
            co_await finish_command(s.get(), /*copy_ok=*/true);
            co_return CopyRead{CopyRead::Kind::Done, PgBuffer{}};
        }
        if (n == -2) {
            throw connection_error(s->conn, "reading replication data", true);
        }
        if (!took_socket) {
            took_socket = true;
            consume_now(s.get());
            continue;
        }
        const auto gathered = s->woke + kGatherInput;
        if (!paused && std::chrono::steady_clock::now() < gathered) {
            paused = true;
            const auto until = deadline ? std::min(gathered, *deadline) : gathered;
            co_await nap_until(s.get(), until);
            s->woke = std::chrono::steady_clock::now();
            consume_now(s.get());
            continue;
        }
        if (!co_await receive_as_reader(s.get(), deadline)) {
            co_return CopyRead{CopyRead::Kind::Timeout, PgBuffer{}};
        }
        s->woke = std::chrono::steady_clock::now();
    }
}

Task<void> put_copy_data_impl(std::shared_ptr<PgConnection::State> s, std::string bytes) {
    ensure_open(s);
    // Put and sent in pieces: after a partial send libpq moves the rest of its buffer to the
    // front, so a batch of megabytes put at once was moved again after every send the socket
    // took (a fifth of pgtide's CPU in a copy into PostgreSQL was memmove).
    constexpr std::size_t kPiece = 64 << 10;
    std::size_t at = 0;
    do {
        const std::size_t n = std::min(kPiece, bytes.size() - at);
        const int r = PQputCopyData(s->conn, bytes.data() + at, static_cast<int>(n));
        if (r < 0) {
            throw connection_error(s->conn, "sending COPY data", true);
        }
        if (r == 0) {
            co_await wait_socket(s.get(), POLLOUT, std::nullopt);
            continue;
        }
        at += n;
        co_await flush(s.get());
    } while (at < bytes.size());
}

Task<PgResult> copy_in_end_impl(std::shared_ptr<PgConnection::State> s) {
    ensure_open(s);
    co_await put_copy_end(s.get());
    co_return co_await finish_command(s.get(), /*copy_ok=*/true);
}

Task<void> end_copy_both_impl(std::shared_ptr<PgConnection::State> s) {
    ensure_open(s);
    co_await put_copy_end(s.get());
    co_await drain_copy(s.get());
    co_await finish_command(s.get(), /*copy_ok=*/true);
}

} // namespace

PgError::PgError(const std::string& message, std::string state, bool lost)
    : std::runtime_error(message), sqlstate(std::move(state)), connection_lost(lost) {}

ExecStatusType PgResult::status() const noexcept {
    return result_ ? PQresultStatus(result_.get()) : PGRES_EMPTY_QUERY;
}

int PgResult::rows() const noexcept {
    return result_ ? PQntuples(result_.get()) : 0;
}

int PgResult::columns() const noexcept {
    return result_ ? PQnfields(result_.get()) : 0;
}

bool PgResult::is_null(int row, int col) const noexcept {
    return PQgetisnull(result_.get(), row, col) != 0;
}

std::string_view PgResult::get(int row, int col) const noexcept {
    if (is_null(row, col)) {
        return {};
    }
    return {PQgetvalue(result_.get(), row, col),
            static_cast<std::size_t>(PQgetlength(result_.get(), row, col))};
}

std::optional<std::string> PgResult::get_optional(int row, int col) const {
    if (is_null(row, col)) {
        return std::nullopt;
    }
    return std::string(get(row, col));
}

int PgResult::column_index(std::string_view name) const {
    for (int i = 0; i < columns(); ++i) {
        if (name == PQfname(result_.get(), i)) {
            return i;
        }
    }
    return -1;
}

std::string PgResult::command_tag() const {
    return result_ ? std::string(PQcmdStatus(result_.get())) : std::string();
}

namespace {

// What the server says beside a result (NOTICE, WARNING, INFO: "relation ... already exists,
// skipping" and the like) goes to the log, not to libpq's default of printing it on stderr,
// which would break a JSON log: warnings as warnings, the rest at debug. `arg` is the PGconn.
void log_server_notice(void* arg, const PGresult* res) {
    const char* severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char* primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const std::string message = trim(primary != nullptr ? primary : PQresultErrorMessage(res));
    std::vector<LogField> fields{{"server", describe_target(static_cast<PGconn*>(arg))},
                                 {"severity", severity != nullptr ? severity : "NOTICE"}};
    if (severity != nullptr && std::strcmp(severity, "WARNING") == 0) {
        log_warn("the server warned: " + message, fields);
    } else {
        log_debug("the server said: " + message, fields);
    }
}

} // namespace

Task<PgConnection> PgConnection::connect(std::string conninfo,
                                         std::vector<std::pair<std::string, std::string>> extra,
                                         std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<const char*> keys{"dbname"};
    std::vector<const char*> values{conninfo.c_str()};
    for (const auto& [key, value] : extra) {
        keys.push_back(key.c_str());
        values.push_back(value.c_str());
    }
    keys.push_back(nullptr);
    values.push_back(nullptr);

    auto s = std::make_shared<State>();
    s->conn = PQconnectStartParams(keys.data(), values.data(), /*expand_dbname=*/1);
    if (s->conn == nullptr) {
        throw PgError("could not connect to PostgreSQL: out of memory", {}, true);
    }
    if (PQstatus(s->conn) == CONNECTION_BAD) {
        throw connect_error(s->conn, conninfo, extra, {});
    }
    PQsetNoticeReceiver(s->conn, log_server_notice, s->conn);
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (st != PGRES_POLLING_OK) {
        if (st == PGRES_POLLING_FAILED) {
            throw connect_error(s->conn, conninfo, extra, {});
        }
        if (st == PGRES_POLLING_READING || st == PGRES_POLLING_WRITING) {
            const unsigned mask = st == PGRES_POLLING_READING ? POLLIN : POLLOUT;
            if (co_await wait_socket(s.get(), mask, deadline) == 0) {
                throw connect_error(s->conn, conninfo, extra,
                                    "timed out after " + std::to_string(timeout.count()) + " ms");
            }
        }
        st = PQconnectPoll(s->conn);
    }
    if (PQsetnonblocking(s->conn, 1) != 0) {
        throw connect_error(s->conn, conninfo, extra, "could not switch to nonblocking mode");
    }
    co_return PgConnection{std::move(s)};
}

PgConnection::PgConnection() noexcept = default;
PgConnection::PgConnection(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}
PgConnection::PgConnection(PgConnection&&) noexcept = default;

PgConnection& PgConnection::operator=(PgConnection&& other) noexcept {
    if (this != &other) {
        close();
        state_ = std::move(other.state_);
    }
    return *this;
}

PgConnection::~PgConnection() {
    close();
}

Task<PgResult> PgConnection::exec(std::string sql) {
    return exec_impl(state_, std::move(sql));
}

Task<PgResult> PgConnection::exec_params(std::string sql,
                                         std::vector<std::optional<std::string>> params) {
    return exec_params_impl(state_, std::move(sql), std::move(params));
}

Task<void> PgConnection::prepare(std::string name, std::string sql) {
    return prepare_impl(state_, std::move(name), std::move(sql));
}

Task<PgResult> PgConnection::exec_prepared_binary(std::string name,
                                                  std::vector<std::string> params) {
    return exec_prepared_binary_impl(state_, std::move(name), std::move(params));
}

Task<void> PgConnection::send_prepared_binary(std::string name, std::vector<std::string> params) {
    return send_only_impl(state_, std::move(name), std::move(params));
}

Task<PgResult> PgConnection::finish_sent() {
    return finish_sent_impl(state_);
}

bool PgConnection::has_sent() const noexcept {
    return state_ && state_->sent;
}

Task<void> PgConnection::copy_out_start(std::string sql) {
    return copy_start_impl(state_, std::move(sql), PGRES_COPY_OUT);
}

Task<std::optional<PgBuffer>> PgConnection::copy_out_next() {
    return copy_out_next_impl(state_);
}

Task<void> PgConnection::copy_in_start(std::string sql) {
    return copy_start_impl(state_, std::move(sql), PGRES_COPY_IN);
}

Task<PgResult> PgConnection::copy_in_end() {
    return copy_in_end_impl(state_);
}

Task<void> PgConnection::copy_both_start(std::string sql) {
    return copy_start_impl(state_, std::move(sql), PGRES_COPY_BOTH);
}

Task<CopyRead> PgConnection::copy_both_read(Deadline deadline) {
    return copy_both_read_impl(state_, deadline);
}

Task<void> PgConnection::put_copy_data(std::string bytes) {
    return put_copy_data_impl(state_, std::move(bytes));
}

Task<void> PgConnection::end_copy_both() {
    return end_copy_both_impl(state_);
}

std::string PgConnection::escape_literal(std::string_view s) const {
    return escape(raw(), s, /*identifier=*/false);
}

std::string PgConnection::escape_identifier(std::string_view s) const {
    return escape(raw(), s, /*identifier=*/true);
}

std::string PgConnection::target() const {
    return raw() != nullptr ? describe_target(raw()) : std::string("(closed connection)");
}

int PgConnection::server_version() const noexcept {
    return raw() != nullptr ? PQserverVersion(raw()) : 0;
}

bool PgConnection::is_open() const noexcept {
    return raw() != nullptr && PQstatus(raw()) == CONNECTION_OK;
}

void PgConnection::set_command_timeout(std::optional<std::chrono::milliseconds> timeout) {
    if (state_) {
        state_->command_timeout = timeout;
    }
}

void PgConnection::close() noexcept {
    if (state_) {
        state_->close();
    }
}

PGconn* PgConnection::raw() const noexcept {
    return state_ ? state_->conn : nullptr;
}

} // namespace pgtide::io
