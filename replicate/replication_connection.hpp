// ReplicationConnection: a logical walsender session (IDENTIFY_SYSTEM, slots, START_REPLICATION).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "io/pg_connection.hpp"
#include "io/task.hpp"
#include "replicate/walsender_messages.hpp"
#include "schema/lsn.hpp"

namespace pgtide::replicate {

/// IDENTIFY_SYSTEM's answer: which cluster, timeline and database we are talking to.
struct SourceIdentity {
    std::string system_identifier;
    std::int64_t timeline = 0;
    schema::Lsn flush_lsn;
    std::string database;
};

/// CREATE_REPLICATION_SLOT's answer.
struct CreatedSlot {
    std::string name;
    schema::Lsn consistent_lsn;
    std::string snapshot_name;
};

/// What one read of the stream produced.
struct StreamTimeout {};
struct StreamEnd {};
using StreamRead = std::variant<XLogData, PrimaryKeepalive, StreamTimeout, StreamEnd>;

class ReplicationConnection {
public:
    /// Opens a `replication=database` connection with pgtide's session settings. Throws
    /// io::PgError. Suspends.
    static io::Task<ReplicationConnection>
    connect(std::string dsn, std::string application_name = "pgtide",
            std::chrono::milliseconds timeout = std::chrono::seconds(30));

    /// IDENTIFY_SYSTEM. Suspends.
    io::Task<SourceIdentity> identify_system();

    /// CREATE_REPLICATION_SLOT name [TEMPORARY] LOGICAL pgoutput (SNAPSHOT 'export'). The
    /// snapshot stays importable until the next command on this connection. Suspends until
    /// the server reaches a consistent point.
    io::Task<CreatedSlot> create_slot(std::string name, bool temporary);

    /// START_REPLICATION SLOT name LOGICAL start (proto_version, publication_names, messages).
    /// Negotiates the highest protocol version this server speaks. With `streaming` (and a
    /// server of 14 or later), asks for streaming 'on': large in-progress transactions arrive
    /// in stream blocks. Suspends.
    io::Task<void> start(std::string slot, schema::Lsn start, std::vector<std::string> publications,
                         bool binary, bool streaming = false);

    /// The pgoutput protocol version `start` asked for.
    int proto_version() const { return proto_version_; }

    /// The next walsender message, or StreamTimeout at `deadline`, or StreamEnd when the server
    /// ended the stream. Suspends. Copy data in XLogData views the returned buffer, which stays
    /// valid until the next read.
    io::Task<StreamRead> read(std::chrono::steady_clock::time_point deadline);

    /// Sends a standby status update. flush must be durable at the destination. Suspends.
    io::Task<void> send_status(schema::Lsn written, schema::Lsn flushed, bool reply_requested);

    /// Ends the stream from our side (CopyDone), leaving the session usable. Suspends.
    io::Task<void> stop();

    io::PgConnection& connection() { return conn_; }

private:
    explicit ReplicationConnection(io::PgConnection conn) : conn_(std::move(conn)) {}

    io::PgConnection conn_;
    io::PgBuffer last_;
    int proto_version_ = 1;
    bool streaming_ = false;
};

/// Quotes a publication name list for pgoutput's publication_names option: each name as an SQL
/// identifier (so case and commas survive), then the whole as a literal.
std::string publication_names_option(const std::vector<std::string>& publications);

} // namespace pgtide::replicate
