// float4out/float8out digits, checked against PostgreSQL 15 (extra_float_digits=1).
#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "schema/pg_float.hpp"

namespace pgtide::schema {
namespace {

TEST(PgFloat, Float8AsPostgresPrintsIt) {
    EXPECT_EQ(pg_float8_text(1e23), "9.999999999999999e+22"); // "1e+23" is an interval edge
    EXPECT_EQ(pg_float8_text(std::ldexp(1.0, 63)), "9.223372036854776e+18");
    EXPECT_EQ(pg_float8_text(std::ldexp(1.0, 53) + 2), "9.007199254740994e+15");
    EXPECT_EQ(pg_float8_text(0.1 + 0.2), "0.30000000000000004");
    EXPECT_EQ(pg_float8_text(1.7976931348623157e308), "1.7976931348623157e+308");
    EXPECT_EQ(pg_float8_text(2.2250738585072009e-308), "2.225073858507201e-308");
    EXPECT_EQ(pg_float8_text(1e15 - 1), "999999999999999");
    EXPECT_EQ(pg_float8_text(1e15), "1e+15");
    EXPECT_EQ(pg_float8_text(0.0001), "0.0001");
    EXPECT_EQ(pg_float8_text(0.00001), "1e-05");
    EXPECT_EQ(pg_float8_text(-0.0), "-0");
    EXPECT_EQ(pg_float8_text(std::numeric_limits<double>::denorm_min()), "5e-324");
    EXPECT_EQ(pg_float8_text(std::nan("")), "NaN");
    EXPECT_EQ(pg_float8_text(-std::numeric_limits<double>::infinity()), "-Infinity");
}

TEST(PgFloat, Float4AsPostgresPrintsIt) {
    EXPECT_EQ(pg_float4_text(float(std::ldexp(1.0, 24) + 2)), "1.6777218e+07");
    EXPECT_EQ(pg_float4_text(float(std::ldexp(1.0, 31))), "2.1474836e+09");
    EXPECT_EQ(pg_float4_text(3.4028235e38f), "3.4028235e+38");
    EXPECT_EQ(pg_float4_text(std::numeric_limits<float>::denorm_min()), "1e-45");
    EXPECT_EQ(pg_float4_text(9.999999e-5f), "9.999999e-05");
    EXPECT_EQ(pg_float4_text(123456.7f), "123456.7");
    EXPECT_EQ(pg_float4_text(999999.94f), "999999.94");
    EXPECT_EQ(pg_float4_text(73405216.0f), "7.3405216e+07");
    EXPECT_EQ(pg_float4_text(1.1f), "1.1");
    EXPECT_EQ(pg_float4_text(std::numeric_limits<float>::infinity()), "Infinity");
}

} // namespace
} // namespace pgtide::schema
