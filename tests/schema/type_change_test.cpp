// type_change_keeps_values: which ALTER COLUMN ... TYPE changes leave every existing value's
// canonical form as it was (followed in place) and which may rewrite them (pgtide stops).
#include <gtest/gtest.h>

#include "schema/pg_types.hpp"
#include "schema/table.hpp"

namespace pgtide::schema {
namespace {

TableColumn column(std::uint32_t type, std::int32_t typmod = -1, std::uint32_t element = 0) {
    TableColumn c;
    // Moved in, not assigned from the literal: GCC 12's -Wrestrict misfires on that at -O2.
    c.name = std::string("c");
    c.type.oid = type;
    c.type.element_oid = element;
    c.typmod = typmod;
    return c;
}

// numeric(p,s)'s typmod.
std::int32_t numeric_mod(int precision, int scale) {
    return ((precision << 16) | scale) + 4;
}

TEST(TypeChange, WideningAndUnboundedTextKeepValues) {
    EXPECT_TRUE(type_change_keeps_values(column(oid::kInt2), column(oid::kInt4)));
    EXPECT_TRUE(type_change_keeps_values(column(oid::kInt4), column(oid::kInt8)));
    EXPECT_FALSE(type_change_keeps_values(column(oid::kInt8), column(oid::kInt4)));
    EXPECT_TRUE(type_change_keeps_values(column(oid::kVarchar, 9), column(oid::kText)));
    EXPECT_TRUE(type_change_keeps_values(column(oid::kText), column(oid::kVarchar, 20)));
    EXPECT_TRUE(type_change_keeps_values(column(oid::kVarchar, 9), column(oid::kVarchar, 20)));
    EXPECT_FALSE(type_change_keeps_values(column(oid::kBpchar, 9), column(oid::kBpchar, 20)));
    EXPECT_FALSE(type_change_keeps_values(column(oid::kBpchar, 9), column(oid::kText)));
    EXPECT_FALSE(type_change_keeps_values(column(oid::kInt4), column(oid::kText)));
}

TEST(TypeChange, NumericKeepsValuesOnlyWithItsScale) {
    EXPECT_TRUE(type_change_keeps_values(column(oid::kNumeric, numeric_mod(10, 2)),
                                         column(oid::kNumeric, numeric_mod(12, 2))));
    EXPECT_TRUE(
        type_change_keeps_values(column(oid::kNumeric, numeric_mod(10, 2)), column(oid::kNumeric)));
    EXPECT_FALSE(type_change_keeps_values(column(oid::kNumeric, numeric_mod(10, 2)),
                                          column(oid::kNumeric, numeric_mod(10, 4))));
    EXPECT_FALSE(
        type_change_keeps_values(column(oid::kNumeric), column(oid::kNumeric, numeric_mod(10, 2))));
}

TEST(TypeChange, TimePrecisionMayGrowNotShrink) {
    EXPECT_TRUE(type_change_keeps_values(column(oid::kTimestamptz, 3), column(oid::kTimestamptz)));
    EXPECT_TRUE(type_change_keeps_values(column(oid::kTimestamp, 3), column(oid::kTimestamp, 6)));
    EXPECT_FALSE(type_change_keeps_values(column(oid::kTimestamp, 6), column(oid::kTimestamp, 3)));
    EXPECT_FALSE(type_change_keeps_values(column(oid::kTimestamp), column(oid::kTimestamp, 3)));
    EXPECT_FALSE(type_change_keeps_values(column(oid::kTimestamp), column(oid::kTimestamptz)));
}

TEST(TypeChange, ArraysFollowTheirElements) {
    constexpr std::uint32_t kInt4Array = 1007;
    constexpr std::uint32_t kInt8Array = 1016;
    constexpr std::uint32_t kNumericArray = 1231;
    EXPECT_TRUE(type_change_keeps_values(column(kInt4Array, -1, oid::kInt4),
                                         column(kInt8Array, -1, oid::kInt8)));
    EXPECT_FALSE(type_change_keeps_values(column(kNumericArray, numeric_mod(8, 1), oid::kNumeric),
                                          column(kNumericArray, numeric_mod(8, 3), oid::kNumeric)));
    EXPECT_FALSE(type_change_keeps_values(column(kInt4Array, -1, oid::kInt4), column(oid::kInt4)));
}

} // namespace
} // namespace pgtide::schema
