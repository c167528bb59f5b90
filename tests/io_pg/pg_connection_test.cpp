// PgConnection against a real PostgreSQL: queries, errors, binary COPY out, COPY BOTH streaming.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "io/event_loop.hpp"
#include "io/pg_connection.hpp"
#include "io/sync_wait.hpp"
#include "io/task.hpp"
#include "io/timer.hpp"
#include "io/when_all.hpp"
#include "tests/support/pg_server.hpp"

namespace pgtide::io {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Params = std::vector<std::optional<std::string>>;

std::uint64_t read_u64(std::string_view b, std::size_t at) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        v = (v << 8) | static_cast<unsigned char>(b[at + i]);
    }
    return v;
}

std::int32_t read_i32(std::string_view b, std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) {
        v = (v << 8) | static_cast<unsigned char>(b[at + i]);
    }
    return static_cast<std::int32_t>(v);
}

std::int16_t read_i16(std::string_view b, std::size_t at) {
    return static_cast<std::int16_t>((static_cast<unsigned char>(b[at]) << 8) |
                                     static_cast<unsigned char>(b[at + 1]));
}

void put_u64(std::string& out, std::uint64_t v) {
    for (int i = 7; i >= 0; --i) {
        out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
}

std::uint64_t parse_lsn(std::string_view text) {
    const auto slash = text.find('/');
    return (std::stoull(std::string(text.substr(0, slash)), nullptr, 16) << 32) |
           std::stoull(std::string(text.substr(slash + 1)), nullptr, 16);
}

/// Standby status update ('r'): write = flush = apply = lsn.
std::string status_update(std::uint64_t lsn, bool reply_requested) {
    std::string msg(1, 'r');
    put_u64(msg, lsn);
    put_u64(msg, lsn);
    put_u64(msg, lsn);
    put_u64(msg, 0);
    msg.push_back(reply_requested ? 1 : 0);
    return msg;
}

class PgConnectionTest : public testing::PgTest {
protected:
    EventLoop loop_;
};

Task<PgResult> connect_and_query(std::string dsn) {
    PgConnection conn = co_await PgConnection::connect(dsn);
    EXPECT_TRUE(conn.is_open());
    EXPECT_GE(conn.server_version(), 100000);
    co_return co_await conn.exec("SELECT 1 AS one, NULL::text AS nothing, 'x''y' AS quote");
}

TEST_F(PgConnectionTest, ConnectAndExec) {
    PgResult r = sync_wait(loop_, connect_and_query(dsn()));
    ASSERT_EQ(r.rows(), 1);
    ASSERT_EQ(r.columns(), 3);
    EXPECT_EQ(r.get(0, 0), "1");
    EXPECT_TRUE(r.is_null(0, 1));
    EXPECT_EQ(r.get(0, 1), "");
    EXPECT_EQ(r.get_optional(0, 1), std::nullopt);
    EXPECT_EQ(r.get_optional(0, 2), "x'y");
    EXPECT_EQ(r.column_index("nothing"), 1);
    EXPECT_EQ(r.column_index("absent"), -1);
    EXPECT_EQ(r.command_tag(), "SELECT 1");
}

Task<std::string> multi_statements(std::string dsn) {
    PgConnection conn = co_await PgConnection::connect(dsn);
    PgResult r = co_await conn.exec("CREATE TABLE t (id int PRIMARY KEY, v text);"
                                    "INSERT INTO t VALUES (1, 'a'), (2, NULL);"
                                    "SELECT count(*) FROM t");
    co_return std::string(r.get(0, 0));
}

TEST_F(PgConnectionTest, ExecReturnsTheLastResultOfSeveralStatements) {
    EXPECT_EQ(sync_wait(loop_, multi_statements(dsn())), "2");
}

Task<PgResult> with_params(std::string dsn) {
    PgConnection conn = co_await PgConnection::connect(dsn);
    Params params{"41", std::nullopt, "it's"};
    co_return co_await conn.exec_params("SELECT $1::int + 1, $2::text IS NULL, $2::text, $3::text",
                                        params);
}

TEST_F(PgConnectionTest, ExecParamsWithNull) {
    PgResult r = sync_wait(loop_, with_params(dsn()));
    ASSERT_EQ(r.rows(), 1);
    EXPECT_EQ(r.get(0, 0), "42");
    EXPECT_EQ(r.get(0, 1), "t");
    EXPECT_TRUE(r.is_null(0, 2));
    EXPECT_EQ(r.get(0, 3), "it's");
}

Task<std::string> error_then_query(std::string dsn, PgError* error) {
    PgConnection conn = co_await PgConnection::connect(dsn);
    try {
        co_await conn.exec("SELECT * FROM no_such_table");
    } catch (const PgError& e) {
        *error = e;
    }
    // The connection is still usable after an error result.
    PgResult r = co_await conn.exec("SELECT 'still here'");
    co_return std::string(r.get(0, 0));
}

TEST_F(PgConnectionTest, ErrorCarriesSqlstateAndConnectionStaysUsable) {
    PgError error("none");
    EXPECT_EQ(sync_wait(loop_, error_then_query(dsn(), &error)), "still here");
    EXPECT_EQ(error.sqlstate, "42P01");
    EXPECT_FALSE(error.connection_lost);
    EXPECT_NE(std::string(error.what()).find("no_such_table"), std::string::npos) << error.what();
}

Task<void> connect_only(std::string dsn) {
    PgConnection conn = co_await PgConnection::connect(dsn, {}, 5s);
}

TEST_F(PgConnectionTest, ConnectFailureNamesTargetButNotPassword) {
    const std::string bad = dsn() + " dbname=no_such_db_xyz password=SuperSecret42";
    try {
        sync_wait(loop_, connect_only(bad));
        FAIL() << "connected";
    } catch (const PgError& e) {
        const std::string msg = e.what();
        EXPECT_TRUE(e.connection_lost);
        EXPECT_NE(msg.find("no_such_db_xyz"), std::string::npos) << msg;
        EXPECT_NE(msg.find(std::to_string(pg().port())), std::string::npos) << msg;
        EXPECT_EQ(msg.find("SuperSecret42"), std::string::npos) << msg;
    }
    // URI form, extra key/values override the conninfo.
    try {
        sync_wait(loop_, connect_only("postgresql://nobody:SuperSecret42@/nowhere?host=/nonexistent"
                                      "&port=1"));
        FAIL() << "connected";
    } catch (const PgError& e) {
        EXPECT_EQ(std::string(e.what()).find("SuperSecret42"), std::string::npos) << e.what();
        EXPECT_TRUE(e.connection_lost);
    }
}

Task<std::string> connect_with_extra(std::string dsn) {
    std::vector<std::pair<std::string, std::string>> extra{
        {"options", "-c DateStyle=ISO,MDY -c search_path=pg_catalog"},
        {"application_name", "pgtide-io-test"}};
    PgConnection conn = co_await PgConnection::connect(dsn, extra);
    PgResult r = co_await conn.exec("SELECT current_setting('search_path') || ' ' || "
                                    "current_setting('application_name')");
    co_return std::string(r.get(0, 0));
}

TEST_F(PgConnectionTest, ExtraKeywordsOverrideConninfo) {
    EXPECT_EQ(sync_wait(loop_, connect_with_extra(dsn() + " application_name=other")),
              "pg_catalog pgtide-io-test");
}

struct CopyStats {
    std::string bytes;
    int chunks = 0;
    std::string after;
};

Task<CopyStats> copy_out_rows(std::string dsn, int n) {
    PgConnection conn = co_await PgConnection::connect(dsn);
    CopyStats stats;
    co_await conn.copy_out_start("COPY (SELECT g, 'row ' || g FROM generate_series(1, " +
                                 std::to_string(n) + ") g) TO STDOUT (FORMAT binary)");
    for (;;) {
        std::optional<PgBuffer> chunk = co_await conn.copy_out_next();
        if (!chunk) {
            break;
        }
        stats.bytes.append(chunk->view());
        ++stats.chunks;
    }
    PgResult r = co_await conn.exec("SELECT 'after copy'");
    stats.after = std::string(r.get(0, 0));
    co_return stats;
}

TEST_F(PgConnectionTest, CopyOutTenThousandRowsInBinary) {
    const CopyStats stats = sync_wait(loop_, copy_out_rows(dsn(), 10'000));
    const std::string_view b = stats.bytes;
    ASSERT_GE(b.size(), 21u);
    EXPECT_EQ(b.substr(0, 11), std::string_view("PGCOPY\n\377\r\n\0", 11));
    std::size_t at = 11 + 4;
    at += 4 + static_cast<std::size_t>(read_i32(b, 15));
    int rows = 0;
    for (;;) {
        const int fields = read_i16(b, at);
        at += 2;
        if (fields == -1) {
            break;
        }
        ASSERT_EQ(fields, 2);
        ASSERT_EQ(read_i32(b, at), 4);
        EXPECT_EQ(read_i32(b, at + 4), rows + 1);
        at += 8;
        const auto len = static_cast<std::size_t>(read_i32(b, at));
        EXPECT_EQ(b.substr(at + 4, len), "row " + std::to_string(rows + 1));
        at += 4 + len;
        ++rows;
    }
    EXPECT_EQ(rows, 10'000);
    EXPECT_EQ(at, b.size());
    EXPECT_GT(stats.chunks, 1);
    EXPECT_EQ(stats.after, "after copy");
}

Task<std::string> copy_out_error(std::string dsn, PgError* error) {
    PgConnection conn = co_await PgConnection::connect(dsn);
    try {
        co_await conn.copy_out_start("COPY (SELECT 1 / (g - 500) FROM generate_series(1, 1000) g)"
                                     " TO STDOUT (FORMAT binary)");
        while (co_await conn.copy_out_next()) {
        }
    } catch (const PgError& e) {
        *error = e;
    }
    try {
        co_await conn.copy_out_start("COPY no_such_table TO STDOUT");
    } catch (const PgError& e) {
        EXPECT_EQ(e.sqlstate, "42P01");
    }
    PgResult r = co_await conn.exec("SELECT 'usable'");
    co_return std::string(r.get(0, 0));
}

TEST_F(PgConnectionTest, CopyOutErrorIsThrown) {
    PgError error("none");
    EXPECT_EQ(sync_wait(loop_, copy_out_error(dsn(), &error)), "usable");
    EXPECT_EQ(error.sqlstate, "22012") << error.what();
}

Task<std::vector<std::string>> escapes(std::string dsn) {
    PgConnection conn = co_await PgConnection::connect(dsn);
    std::vector<std::string> out{conn.escape_literal("it's \\ here"),
                                 conn.escape_identifier("Weird \"Name\"")};
    PgResult r = co_await conn.exec("SELECT " + out[0] + " AS " + out[1]);
    out.emplace_back(r.get(0, 0));
    out.emplace_back(PQfname(r.raw(), 0));
    co_return out;
}

TEST_F(PgConnectionTest, EscapeLiteralAndIdentifier) {
    const auto out = sync_wait(loop_, escapes(dsn()));
    EXPECT_EQ(out[1], "\"Weird \"\"Name\"\"\"");
    EXPECT_EQ(out[2], "it's \\ here");
    EXPECT_EQ(out[3], "Weird \"Name\"");
}

Task<PgError> terminated(std::string dsn) {
    PgConnection victim = co_await PgConnection::connect(dsn);
    PgConnection killer = co_await PgConnection::connect(dsn);
    PgResult pid = co_await victim.exec("SELECT pg_backend_pid()");
    Params params{std::string(pid.get(0, 0))};
    co_await killer.exec_params("SELECT pg_terminate_backend($1::int, 5000)", params);
    try {
        co_await victim.exec("SELECT 1");
    } catch (const PgError& e) {
        co_return e;
    }
    co_return PgError("not thrown");
}

TEST_F(PgConnectionTest, TerminatedBackendIsConnectionLost) {
    const PgError e = sync_wait(loop_, terminated(dsn()));
    EXPECT_TRUE(e.connection_lost) << e.what();
}

// --- a statement sent now, its answer read later ------------------------------------------

struct SentResult {
    bool blocked_while_sent = false; ///< the server was running it after send returned
    bool other_command_refused = false;
    std::string answer;
    std::string error_state;
    std::string after_error;
    bool timed_out_as_lost = false;
};

Task<SentResult> send_then_finish(std::string dsn) {
    SentResult out;
    PgConnection conn = co_await PgConnection::connect(dsn);
    PgConnection locker = co_await PgConnection::connect(dsn);
    co_await conn.exec("CREATE TABLE gate (n int); INSERT INTO gate VALUES (41)");
    co_await conn.prepare("bump", "SELECT n + ($1::text)::int FROM gate");
    co_await locker.exec("BEGIN; LOCK TABLE gate IN ACCESS EXCLUSIVE MODE");
    std::vector<std::string> one{"1"};
    co_await conn.send_prepared_binary("bump", std::move(one));
    EXPECT_TRUE(conn.has_sent());
    // The server holds the statement behind the lock while we go on.
    const auto give_up = Clock::now() + 30s;
    while (!out.blocked_while_sent && Clock::now() < give_up) {
        PgResult waiting = co_await locker.exec(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE "
            "'SELECT n + %'");
        out.blocked_while_sent = waiting.get(0, 0) == "1";
        co_await sleep_for(10ms);
    }
    try {
        co_await conn.exec("SELECT 1");
    } catch (const std::logic_error&) {
        out.other_command_refused = true;
    }
    co_await locker.exec("COMMIT");
    PgResult r = co_await conn.finish_sent();
    out.answer = std::string(r.get(0, 0));
    EXPECT_FALSE(conn.has_sent());

    std::vector<std::string> bad{"x"};
    co_await conn.send_prepared_binary("bump", std::move(bad));
    try {
        co_await conn.finish_sent();
    } catch (const PgError& e) {
        out.error_state = e.sqlstate;
    }
    PgResult still = co_await conn.exec("SELECT 'usable'");
    out.after_error = std::string(still.get(0, 0));

    // The command timeout counts from the send.
    co_await locker.exec("BEGIN; LOCK TABLE gate IN ACCESS EXCLUSIVE MODE");
    conn.set_command_timeout(300ms);
    std::vector<std::string> two{"2"};
    co_await conn.send_prepared_binary("bump", std::move(two));
    try {
        co_await conn.finish_sent();
    } catch (const PgError& e) {
        out.timed_out_as_lost = e.connection_lost;
    }
    co_await locker.exec("ROLLBACK");
    co_return out;
}

TEST_F(PgConnectionTest, SentStatementRunsWhileTheCallerGoesOnAndIsReadLater) {
    const SentResult r = sync_wait(loop_, send_then_finish(dsn()));
    EXPECT_TRUE(r.blocked_while_sent);
    EXPECT_TRUE(r.other_command_refused);
    EXPECT_EQ(r.answer, "42");
    EXPECT_EQ(r.error_state, "22P02"); // invalid input syntax for type integer
    EXPECT_EQ(r.after_error, "usable");
    EXPECT_TRUE(r.timed_out_as_lost);
}

// --- COPY BOTH on a replication connection -------------------------------------------------

struct StreamResult {
    bool saw_insert = false;
    bool saw_keepalive_reply = false;
    std::uint64_t last_lsn = 0;
    std::string after;
};

Task<void> insert_later(std::string dsn) {
    PgConnection conn = co_await PgConnection::connect(dsn);
    co_await sleep_for(20ms);
    co_await conn.exec("INSERT INTO items VALUES (1, 'streamed')");
}

/// Reads until an XLogData carrying a pgoutput Insert ('I') arrives, answering keepalives.
Task<void> read_until_insert(PgConnection* repl, StreamResult* out) {
    const auto give_up = Clock::now() + 30s;
    while (!out->saw_insert && Clock::now() < give_up) {
        CopyRead r = co_await repl->copy_both_read(Clock::now() + 1s);
        if (r.kind == CopyRead::Kind::Done) {
            ADD_FAILURE() << "stream ended";
            co_return;
        }
        if (r.kind == CopyRead::Kind::Timeout) {
            continue;
        }
        const std::string_view msg = r.data.view();
        if (msg[0] == 'w') {
            const std::uint64_t end = read_u64(msg, 9);
            if (end != 0) {
                out->last_lsn = end;
            }
            if (msg.size() > 25 && msg[25] == 'I') {
                out->saw_insert = true;
            }
        } else if (msg[0] == 'k' && msg.size() >= 18 && msg[17] == 1) {
            co_await repl->put_copy_data(status_update(out->last_lsn, false));
        }
    }
}

/// With a reader suspended in copy_both_read, a concurrent writer asks for a reply: the
/// server's keepalive wakes the reader.
Task<void> read_keepalive(PgConnection* repl, StreamResult* out) {
    const auto give_up = Clock::now() + 30s;
    while (!out->saw_keepalive_reply && Clock::now() < give_up) {
        CopyRead r = co_await repl->copy_both_read(Clock::now() + 1s);
        if (r.kind == CopyRead::Kind::Data && r.data.view()[0] == 'k') {
            out->saw_keepalive_reply = true;
        }
        if (r.kind == CopyRead::Kind::Done) {
            co_return;
        }
    }
}

Task<void> request_reply(PgConnection* repl, StreamResult* out) {
    co_await sleep_for(10ms); // let the reader suspend first
    co_await repl->put_copy_data(status_update(out->last_lsn, true));
}

Task<StreamResult> stream(std::string dsn) {
    StreamResult out;
    {
        PgConnection setup = co_await PgConnection::connect(dsn);
        co_await setup.exec("CREATE TABLE items (id int PRIMARY KEY, v text);"
                            "CREATE PUBLICATION pub FOR TABLE items");
    }
    std::vector<std::pair<std::string, std::string>> extra{{"replication", "database"}};
    PgConnection repl = co_await PgConnection::connect(dsn, extra);
    PgResult slot =
        co_await repl.exec("CREATE_REPLICATION_SLOT io_test TEMPORARY LOGICAL pgoutput");
    const std::string start_lsn{slot.get(0, slot.column_index("consistent_point"))};
    EXPECT_FALSE(start_lsn.empty());
    out.last_lsn = parse_lsn(start_lsn);
    co_await repl.copy_both_start("START_REPLICATION SLOT io_test LOGICAL " + start_lsn +
                                  " (proto_version '1', publication_names 'pub')");
    co_await when_all(read_until_insert(&repl, &out), insert_later(dsn));
    co_await repl.put_copy_data(status_update(out.last_lsn, false));
    co_await when_all(read_keepalive(&repl, &out), request_reply(&repl, &out));
    co_await repl.end_copy_both();
    PgResult r = co_await repl.exec("IDENTIFY_SYSTEM");
    out.after = std::string(r.get(0, r.column_index("dbname")));
    co_return out;
}

TEST_F(PgConnectionTest, CopyBothStreamsInsertAndTakesStatusUpdates) {
    const StreamResult r = sync_wait(loop_, stream(dsn()));
    EXPECT_TRUE(r.saw_insert);
    EXPECT_TRUE(r.saw_keepalive_reply);
    EXPECT_GT(r.last_lsn, 0u);
    EXPECT_EQ(r.after, dbname());
}

Task<CopyRead::Kind> idle_read(std::string dsn) {
    std::vector<std::pair<std::string, std::string>> extra{{"replication", "database"}};
    PgConnection repl = co_await PgConnection::connect(dsn, extra);
    PgResult slot = co_await repl.exec("CREATE_REPLICATION_SLOT idle TEMPORARY LOGICAL pgoutput");
    const std::string lsn{slot.get(0, slot.column_index("consistent_point"))};
    co_await repl.copy_both_start("START_REPLICATION SLOT idle LOGICAL " + lsn +
                                  " (proto_version '1', publication_names 'none')");
    // Keepalives may arrive; a short deadline with no data must eventually say Timeout.
    CopyRead::Kind kind = CopyRead::Kind::Data;
    for (int i = 0; i < 20 && kind == CopyRead::Kind::Data; ++i) {
        CopyRead r = co_await repl.copy_both_read(Clock::now() + 50ms);
        kind = r.kind;
    }
    co_await repl.end_copy_both();
    co_return kind;
}

TEST_F(PgConnectionTest, CopyBothReadTimesOut) {
    EXPECT_EQ(sync_wait(loop_, idle_read(dsn())), CopyRead::Kind::Timeout);
}

Task<bool> read_until_closed(PgConnection* repl) {
    try {
        for (;;) {
            CopyRead r = co_await repl->copy_both_read();
            if (r.kind == CopyRead::Kind::Done) {
                co_return false;
            }
        }
    } catch (const PgError& e) {
        co_return e.connection_lost;
    }
}

Task<void> close_later(PgConnection* repl) {
    co_await sleep_for(20ms);
    repl->close();
}

Task<bool> close_while_reading(std::string dsn) {
    std::vector<std::pair<std::string, std::string>> extra{{"replication", "database"}};
    PgConnection repl = co_await PgConnection::connect(dsn, extra);
    PgResult slot = co_await repl.exec("CREATE_REPLICATION_SLOT gone TEMPORARY LOGICAL pgoutput");
    const std::string lsn{slot.get(0, slot.column_index("consistent_point"))};
    co_await repl.copy_both_start("START_REPLICATION SLOT gone LOGICAL " + lsn +
                                  " (proto_version '1', publication_names 'none')");
    auto [lost, unused] = co_await when_all(read_until_closed(&repl), close_later(&repl));
    EXPECT_FALSE(repl.is_open());
    co_return lost;
}

TEST_F(PgConnectionTest, CloseCancelsASuspendedReader) {
    EXPECT_TRUE(sync_wait(loop_, close_while_reading(dsn())));
}

} // namespace
} // namespace pgtide::io
