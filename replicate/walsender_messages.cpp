// The CopyBoth payloads of a logical replication stream: XLogData, keepalive, status update.
#include "replicate/walsender_messages.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

namespace pgtide::replicate {

namespace {

constexpr std::size_t kXLogDataHeaderSize = 25;
constexpr std::size_t kKeepaliveSize = 18;
constexpr std::size_t kStatusUpdateSize = 34;

// 2000-01-01 00:00:00 UTC, PostgreSQL's timestamp epoch, in µs since the Unix epoch.
constexpr std::int64_t kPgEpochUnixUs = 946'684'800LL * 1'000'000LL;

std::string describe_type_byte(char type) {
    const auto byte = static_cast<unsigned char>(type);
    char buf[16];
    if (byte >= 0x20 && byte < 0x7f) {
        std::snprintf(buf, sizeof buf, "'%c'", type);
    } else {
        std::snprintf(buf, sizeof buf, "0x%02x", static_cast<unsigned>(byte));
    }
    return buf;
}

std::string format_protocol_error(std::string_view message, char type, std::size_t offset,
                                  std::string_view detail) {
    std::string text(message);
    text += " message (";
    text += describe_type_byte(type);
    text += ") at byte ";
    text += std::to_string(offset);
    text += ": ";
    text += detail;
    return text;
}

// Big-endian unsigned 64-bit at `at`; the caller has checked the length.
std::uint64_t load_u64(std::string_view data, std::size_t at) {
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        value = (value << 8) | static_cast<unsigned char>(data[at + i]);
    }
    return value;
}

std::int64_t load_i64(std::string_view data, std::size_t at) {
    return static_cast<std::int64_t>(load_u64(data, at));
}

void store_u64(std::string& out, std::uint64_t value) {
    for (int shift = 56; shift >= 0; shift -= 8) {
        out.push_back(static_cast<char>((value >> shift) & 0xff));
    }
}

[[noreturn]] void fail(std::string_view name, char type, std::size_t offset,
                       std::string_view detail) {
    throw ProtocolError(name, type, offset, detail);
}

XLogData parse_xlog_data(std::string_view data) {
    if (data.size() < kXLogDataHeaderSize) {
        fail("walsender XLogData", 'w', data.size(),
             "truncated: header needs " + std::to_string(kXLogDataHeaderSize) + " bytes, got " +
                 std::to_string(data.size()));
    }
    return XLogData{
        .data_start = schema::Lsn{load_u64(data, 1)},
        .wal_end = schema::Lsn{load_u64(data, 9)},
        .send_time = load_i64(data, 17),
        .payload = data.substr(kXLogDataHeaderSize),
    };
}

PrimaryKeepalive parse_keepalive(std::string_view data) {
    if (data.size() != kKeepaliveSize) {
        fail("walsender keepalive", 'k', std::min(data.size(), kKeepaliveSize),
             "expected " + std::to_string(kKeepaliveSize) + " bytes, got " +
                 std::to_string(data.size()));
    }
    const auto reply = static_cast<unsigned char>(data[17]);
    if (reply > 1) {
        fail("walsender keepalive", 'k', 17,
             "replyRequested must be 0 or 1, got " + std::to_string(reply));
    }
    return PrimaryKeepalive{
        .wal_end = schema::Lsn{load_u64(data, 1)},
        .send_time = load_i64(data, 9),
        .reply_requested = reply == 1,
    };
}

} // namespace

ProtocolError::ProtocolError(std::string_view message, char message_type, std::size_t offset,
                             std::string_view detail)
    : InternalError(format_protocol_error(message, message_type, offset, detail)),
      message_type_(message_type), offset_(offset) {}

WalsenderMessage parse_walsender_message(std::string_view copy_data) {
    if (copy_data.empty()) {
        fail("walsender", '\0', 0, "empty CopyData payload");
    }
    switch (copy_data[0]) {
    case 'w':
        return parse_xlog_data(copy_data);
    case 'k':
        return parse_keepalive(copy_data);
    default:
        fail("walsender", copy_data[0], 0, "unknown message type");
    }
}

std::string encode_standby_status_update(schema::Lsn write, schema::Lsn flush, schema::Lsn apply,
                                         std::int64_t client_time_pg_us, bool reply_requested) {
    std::string out;
    out.reserve(kStatusUpdateSize);
    out.push_back('r');
    store_u64(out, write.value());
    store_u64(out, flush.value());
    store_u64(out, apply.value());
    store_u64(out, static_cast<std::uint64_t>(client_time_pg_us));
    out.push_back(reply_requested ? 1 : 0);
    return out;
}

std::int64_t pg_clock_now() {
    const auto since_unix = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    return static_cast<std::int64_t>(since_unix.count()) - kPgEpochUnixUs;
}

std::int64_t pg_clock_to_unix_us(std::int64_t pg_us) {
    if (pg_us > std::numeric_limits<std::int64_t>::max() - kPgEpochUnixUs) {
        return std::numeric_limits<std::int64_t>::max();
    }
    return pg_us + kPgEpochUnixUs; // cannot underflow: the offset is positive
}

} // namespace pgtide::replicate
