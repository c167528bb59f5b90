// CopyBoth framing: XLogData, keepalive and standby status update, byte by byte.
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>

#include <gtest/gtest.h>

#include "replicate/walsender_messages.hpp"

namespace pgtide::replicate {
namespace {

using schema::Lsn;

std::string be64(std::uint64_t v) {
    std::string out;
    for (int shift = 56; shift >= 0; shift -= 8) {
        out.push_back(static_cast<char>((v >> shift) & 0xff));
    }
    return out;
}

// A keepalive captured from a PostgreSQL 15 walsender (walEnd 0/1574C80).
const std::string kKeepalive = std::string("k") + be64(0x1574C80) + be64(0x000304805043d8c1) + '\1';

TEST(WalsenderMessages, ParsesXLogDataAndPointsIntoTheInput) {
    const std::string bytes = std::string("w") + be64(0x16'B374D848) + be64(0x16'B374D900) +
                              be64(0x000304804fe04caf) + "B-payload";
    const auto message = parse_walsender_message(bytes);
    const auto* data = std::get_if<XLogData>(&message);
    ASSERT_NE(data, nullptr);
    EXPECT_EQ(data->data_start, Lsn{0x16'B374D848});
    EXPECT_EQ(data->wal_end, Lsn{0x16'B374D900});
    EXPECT_EQ(data->send_time, 0x000304804fe04caf);
    EXPECT_EQ(data->payload, "B-payload");
    EXPECT_EQ(data->payload.data(), bytes.data() + 25);
}

TEST(WalsenderMessages, XLogDataWithEmptyPayloadIsFramedCorrectly) {
    const std::string bytes = std::string("w") + be64(0) + be64(0) + be64(0);
    const auto message = parse_walsender_message(bytes);
    ASSERT_TRUE(std::holds_alternative<XLogData>(message));
    EXPECT_TRUE(std::get<XLogData>(message).payload.empty());
}

TEST(WalsenderMessages, ParsesKeepalive) {
    const auto message = parse_walsender_message(kKeepalive);
    const auto* keepalive = std::get_if<PrimaryKeepalive>(&message);
    ASSERT_NE(keepalive, nullptr);
    EXPECT_EQ(keepalive->wal_end, Lsn{0x1574C80});
    EXPECT_EQ(keepalive->send_time, 0x000304805043d8c1);
    EXPECT_TRUE(keepalive->reply_requested);

    std::string no_reply = kKeepalive;
    no_reply[17] = '\0';
    EXPECT_FALSE(std::get<PrimaryKeepalive>(parse_walsender_message(no_reply)).reply_requested);
}

TEST(WalsenderMessages, NegativeSendTimeSurvives) {
    const std::string bytes = std::string("k") + be64(1) + be64(~std::uint64_t{0}) + '\0';
    EXPECT_EQ(std::get<PrimaryKeepalive>(parse_walsender_message(bytes)).send_time, -1);
}

TEST(WalsenderMessages, KeepaliveOfWrongSizeThrows) {
    for (std::size_t n = 1; n < kKeepalive.size(); ++n) {
        EXPECT_THROW(parse_walsender_message(kKeepalive.substr(0, n)), ProtocolError) << n;
    }
    EXPECT_THROW(parse_walsender_message(kKeepalive + '\0'), ProtocolError);
}

TEST(WalsenderMessages, KeepaliveReplyByteMustBeBoolean) {
    std::string bytes = kKeepalive;
    bytes[17] = 2;
    try {
        parse_walsender_message(bytes);
        FAIL() << "no exception";
    } catch (const ProtocolError& e) {
        EXPECT_EQ(e.message_type(), 'k');
        EXPECT_EQ(e.offset(), 17u);
    }
}

TEST(WalsenderMessages, TruncatedXLogDataHeaderThrows) {
    const std::string bytes = std::string("w") + be64(1) + be64(2) + be64(3);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        EXPECT_THROW(parse_walsender_message(bytes.substr(0, n)), ProtocolError) << n;
    }
}

TEST(WalsenderMessages, UnknownTypeNamesTheByte) {
    try {
        parse_walsender_message("h1234");
        FAIL() << "no exception";
    } catch (const ProtocolError& e) {
        EXPECT_EQ(e.message_type(), 'h');
        EXPECT_EQ(e.offset(), 0u);
        EXPECT_STREQ(e.what(), "walsender message ('h') at byte 0: unknown message type");
    }
    try {
        parse_walsender_message(std::string("\x01", 1));
        FAIL() << "no exception";
    } catch (const ProtocolError& e) {
        EXPECT_STREQ(e.what(), "walsender message (0x01) at byte 0: unknown message type");
    }
}

TEST(WalsenderMessages, ProtocolErrorIsAnInternalError) {
    EXPECT_THROW(parse_walsender_message(""), InternalError);
}

TEST(WalsenderMessages, EncodesStandbyStatusUpdate) {
    const std::string bytes = encode_standby_status_update(Lsn{0x16'B374D848}, Lsn{0x16'B374D800},
                                                           Lsn{0}, 0x000304805043d8c1, true);
    const std::string expected = std::string("r") + be64(0x16'B374D848) + be64(0x16'B374D800) +
                                 be64(0) + be64(0x000304805043d8c1) + '\1';
    ASSERT_EQ(bytes.size(), 34u);
    EXPECT_EQ(bytes, expected);
    EXPECT_EQ(encode_standby_status_update(Lsn{1}, Lsn{2}, Lsn{3}, -1, false).back(), '\0');
    EXPECT_EQ(encode_standby_status_update(Lsn{1}, Lsn{2}, Lsn{3}, -1, false).substr(25, 8),
              std::string(8, '\xff'));
}

TEST(WalsenderMessages, PgClockIsMicrosecondsSince2000) {
    EXPECT_EQ(pg_clock_to_unix_us(0), 946'684'800'000'000);
    EXPECT_EQ(pg_clock_to_unix_us(-946'684'800'000'000), 0);
    EXPECT_EQ(pg_clock_to_unix_us(std::numeric_limits<std::int64_t>::max()),
              std::numeric_limits<std::int64_t>::max());
    EXPECT_EQ(pg_clock_to_unix_us(std::numeric_limits<std::int64_t>::min()),
              std::numeric_limits<std::int64_t>::min() + 946'684'800'000'000);

    const auto unix_now = [] {
        return std::chrono::duration_cast<std::chrono::microseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
            .count();
    };
    const std::int64_t before = unix_now();
    const std::int64_t pg_now = pg_clock_now();
    const std::int64_t after = unix_now();
    EXPECT_GE(pg_clock_to_unix_us(pg_now), before);
    EXPECT_LE(pg_clock_to_unix_us(pg_now), after);
}

} // namespace
} // namespace pgtide::replicate
