// ReplicationConnection: replication commands over the simple query protocol.
#include "replicate/replication_connection.hpp"

#include "replicate/errors.hpp"
#include "replicate/session.hpp"
#include "schema/sql_quote.hpp"

namespace pgtide::replicate {

namespace {

schema::Lsn parse_lsn(std::string_view text, const char* what) {
    auto lsn = schema::Lsn::parse(text);
    if (!lsn) {
        throw InternalError(std::string("server sent a malformed LSN for ") + what + ": " +
                            std::string(text));
    }
    return *lsn;
}

std::string sql_literal(std::string_view s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'') {
            out += '\'';
        }
        out += c;
    }
    return out + "'";
}

} // namespace

std::string publication_names_option(const std::vector<std::string>& publications) {
    std::string names;
    for (std::size_t i = 0; i < publications.size(); ++i) {
        if (i) {
            names += ',';
        }
        names += schema::quote_identifier(publications[i]);
    }
    return sql_literal(names);
}

io::Task<ReplicationConnection> ReplicationConnection::connect(std::string dsn,
                                                               std::string application_name,
                                                               std::chrono::milliseconds timeout) {
    io::PgConnection conn = co_await io::PgConnection::connect(
        std::move(dsn), replication_connection_params(application_name), timeout);
    co_return ReplicationConnection(std::move(conn));
}

io::Task<SourceIdentity> ReplicationConnection::identify_system() {
    io::PgResult r = co_await conn_.exec("IDENTIFY_SYSTEM");
    if (r.rows() != 1 || r.columns() < 4) {
        throw InternalError("IDENTIFY_SYSTEM returned an unexpected shape");
    }
    SourceIdentity id;
    id.system_identifier = std::string(r.get(0, 0));
    id.timeline = std::stoll(std::string(r.get(0, 1)));
    id.flush_lsn = parse_lsn(r.get(0, 2), "IDENTIFY_SYSTEM xlogpos");
    id.database = std::string(r.get(0, 3));
    co_return id;
}

io::Task<CreatedSlot> ReplicationConnection::create_slot(std::string name, bool temporary) {
    std::string sql = "CREATE_REPLICATION_SLOT " + schema::quote_identifier(name) +
                      (temporary ? " TEMPORARY" : "") + " LOGICAL pgoutput (SNAPSHOT 'export')";
    io::PgResult r = co_await conn_.exec(std::move(sql));
    if (r.rows() != 1 || r.columns() < 3) {
        throw InternalError("CREATE_REPLICATION_SLOT returned an unexpected shape");
    }
    CreatedSlot slot;
    slot.name = std::string(r.get(0, 0));
    slot.consistent_lsn = parse_lsn(r.get(0, 1), "consistent_point");
    slot.snapshot_name = std::string(r.get(0, 2));
    co_return slot;
}

io::Task<void> ReplicationConnection::start(std::string slot, schema::Lsn start,
                                            std::vector<std::string> publications, bool binary,
                                            bool streaming) {
    const int v = conn_.server_version();
    proto_version_ = v >= 160000 ? 4 : v >= 150000 ? 3 : v >= 140000 ? 2 : 1;
    std::string sql = "START_REPLICATION SLOT " + schema::quote_identifier(slot) + " LOGICAL " +
                      start.str() + " (proto_version '" + std::to_string(proto_version_) +
                      "', publication_names " + publication_names_option(publications);
    if (v >= 140000) {
        sql += ", messages 'true'";
        if (binary) {
            sql += ", binary 'true'";
        }
        if (streaming) {
            sql += ", streaming 'on'"; // a boolean on 14 and 15, which read 'on' as true
        }
    }
    sql += ")";
    co_await conn_.copy_both_start(std::move(sql));
    streaming_ = true;
}

io::Task<StreamRead> ReplicationConnection::read(std::chrono::steady_clock::time_point deadline) {
    io::CopyRead got = co_await conn_.copy_both_read(deadline);
    switch (got.kind) {
    case io::CopyRead::Kind::Timeout:
        co_return StreamTimeout{};
    case io::CopyRead::Kind::Done:
        streaming_ = false;
        co_return StreamEnd{};
    case io::CopyRead::Kind::Data:
        break;
    }
    last_ = std::move(got.data);
    auto msg = parse_walsender_message(last_.view());
    if (auto* x = std::get_if<XLogData>(&msg)) {
        co_return *x;
    }
    co_return std::get<PrimaryKeepalive>(msg);
}

io::Task<void> ReplicationConnection::send_status(schema::Lsn written, schema::Lsn flushed,
                                                  bool reply_requested) {
    co_await conn_.put_copy_data(
        encode_standby_status_update(written, flushed, flushed, pg_clock_now(), reply_requested));
}

io::Task<void> ReplicationConnection::stop() {
    if (streaming_) {
        streaming_ = false;
        co_await conn_.end_copy_both();
    }
}

} // namespace pgtide::replicate
