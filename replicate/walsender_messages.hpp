// The CopyBoth payloads of a logical replication stream: XLogData, keepalive, status update.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "replicate/errors.hpp"
#include "schema/lsn.hpp"

namespace pgtide::replicate {

/// Bytes the server sent that do not follow the replication protocol: an unknown message type,
/// a wrong size, a truncated or overlong message. A broken invariant, so an InternalError.
/// what() reads "pgoutput Insert message ('I') at byte 17: ...".
class ProtocolError : public InternalError {
public:
    /// `message` names the protocol and message ("pgoutput Insert", "walsender XLogData");
    /// `offset` is the byte of the failing field, counted from the message's type byte.
    ProtocolError(std::string_view message, char message_type, std::size_t offset,
                  std::string_view detail);

    char message_type() const { return message_type_; }
    std::size_t offset() const { return offset_; }

private:
    char message_type_;
    std::size_t offset_;
};

/// 'w': one pgoutput message and the WAL positions the walsender attached to it.
struct XLogData {
    schema::Lsn data_start;
    schema::Lsn wal_end;
    std::int64_t send_time;   ///< server clock, µs since 2000-01-01 UTC
    std::string_view payload; ///< the pgoutput message; points into the parsed CopyData
};

/// 'k': the walsender's position and whether it wants a status update now.
struct PrimaryKeepalive {
    schema::Lsn wal_end;
    std::int64_t send_time; ///< server clock, µs since 2000-01-01 UTC
    bool reply_requested;
};

using WalsenderMessage = std::variant<XLogData, PrimaryKeepalive>;

/// Parses one CopyData payload from the server. XLogData::payload points into `copy_data`,
/// which must outlive it. Throws ProtocolError on an empty payload, an unknown type byte, a
/// keepalive that is not 18 bytes, an XLogData shorter than its 25-byte header, or a
/// replyRequested byte other than 0 or 1.
WalsenderMessage parse_walsender_message(std::string_view copy_data);

/// The 34-byte 'r' (standby status update) CopyData payload. `flush` is the position that moves
/// the slot; `client_time_pg_us` is the PG clock (see pg_clock_now). Never throws.
std::string encode_standby_status_update(schema::Lsn write, schema::Lsn flush, schema::Lsn apply,
                                         std::int64_t client_time_pg_us, bool reply_requested);

/// The current time on PostgreSQL's clock: µs since 2000-01-01 00:00:00 UTC.
std::int64_t pg_clock_now();

/// Converts a PG clock value to µs since the Unix epoch; saturates instead of overflowing
/// (PostgreSQL's ±infinity timestamps are INT64_MIN/INT64_MAX).
std::int64_t pg_clock_to_unix_us(std::int64_t pg_us);

} // namespace pgtide::replicate
