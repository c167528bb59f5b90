// Binary timestamps in years 1..9999 take a fast path (issue 5): the values on either side of its
// bounds, and the fraction trimming, must read exactly as the general path writes them.
#include <string>

#include <gtest/gtest.h>

#include "schema/codec.hpp"
#include "schema/pg_types.hpp"
#include "tests/schema/test_util.hpp"

namespace pgtide::schema {
namespace {

using test::unhex;

Value timestamptz(const char* hex) {
    return decode_binary(TypeRef{oid::kTimestamptz, 0}, unhex(hex));
}

Value timestamp(const char* hex) {
    return decode_binary(TypeRef{oid::kTimestamp, 0}, unhex(hex));
}

Value text(const char* s) {
    return std::string(s);
}

TEST(TimestampFastPath, BoundsOfFourDigitYears) {
    EXPECT_EQ(timestamptz("ff1fe2ffc59c6000"), text("0001-01-01T00:00:00Z"));
    EXPECT_EQ(timestamptz("ff1fe2ffc59c5fff"), text("0001-12-31T23:59:59.999999Z BC"));
    EXPECT_EQ(timestamp("ff1fe2ffc59c5fff"), text("0001-12-31T23:59:59.999999 BC"));
    EXPECT_EQ(timestamptz("0380e70b913b7fff"), text("9999-12-31T23:59:59.999999Z"));
    EXPECT_EQ(timestamptz("0380e70b913b8000"), text("10000-01-01T00:00:00Z"));
    EXPECT_EQ(timestamp("0380e70b913b8000"), text("10000-01-01T00:00:00"));
}

TEST(TimestampFastPath, FractionsDropTrailingZeros) {
    EXPECT_EQ(timestamptz("0000000000000000"), text("2000-01-01T00:00:00Z"));
    EXPECT_EQ(timestamptz("00000000000186a0"), text("2000-01-01T00:00:00.1Z"));
    EXPECT_EQ(timestamptz("0000000000000001"), text("2000-01-01T00:00:00.000001Z"));
    EXPECT_EQ(timestamptz("ffffffffffffffff"), text("1999-12-31T23:59:59.999999Z"));
    EXPECT_EQ(timestamp("ff1fe2ffc59e34c0"), text("0001-01-01T00:00:00.12"));
    EXPECT_EQ(timestamptz("0002b58341728608"), text("2024-02-29T12:34:56.789Z"));
}

} // namespace
} // namespace pgtide::schema
