// Identifier and literal quoting, and the built-in type tables.
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "schema/pg_types.hpp"
#include "schema/sql_quote.hpp"

namespace pgtide::schema {
namespace {

TEST(SqlQuote, Identifiers) {
    EXPECT_EQ(quote_identifier("t"), "\"t\"");
    EXPECT_EQ(quote_identifier("Mixed Case"), "\"Mixed Case\"");
    EXPECT_EQ(quote_identifier("a\"b"), "\"a\"\"b\"");
    EXPECT_EQ(quote_identifier(""), "\"\"");
    EXPECT_EQ(quote_identifier("ü'x"), "\"ü'x\"");
    EXPECT_THROW(quote_identifier(std::string("a\0b", 3)), std::invalid_argument);
}

TEST(SqlQuote, SqliteLiterals) {
    EXPECT_EQ(quote_sqlite_literal("x"), "'x'");
    EXPECT_EQ(quote_sqlite_literal("it's"), "'it''s'");
    EXPECT_EQ(quote_sqlite_literal("back\\slash"), "'back\\slash'");
    EXPECT_EQ(quote_sqlite_literal(""), "''");
    EXPECT_THROW(quote_sqlite_literal(std::string("\0", 1)), std::invalid_argument);
}

// Built-in types go to another cluster in binary COPY form; user types and the types whose
// binary form is the cluster's own OIDs (regclass 2205 and its array 2210, regtype 2206,
// regrole 4096) or that have none (aclitem 1033) do not.
TEST(PgTypes, BinaryPortable) {
    for (const std::uint32_t t : {oid::kInt8, oid::kText, oid::kNumeric, oid::kTimestamptz,
                                  oid::kJsonb, oid::kTextArray, oid::kUuid, oid::kOid}) {
        EXPECT_TRUE(binary_portable(t)) << t;
    }
    for (const std::uint32_t t :
         {0u, 2205u, 2210u, 2206u, 4096u, 1033u, 1034u, oid::kFirstNormalObjectId, 99999u}) {
        EXPECT_FALSE(binary_portable(t)) << t;
    }
}

TEST(PgTypes, BuiltinArrays) {
    EXPECT_EQ(builtin_array_element(oid::kInt4Array), oid::kInt4);
    EXPECT_EQ(builtin_array_element(oid::kTextArray), oid::kText);
    EXPECT_EQ(builtin_array_element(oid::kJsonArray), oid::kJson);
    EXPECT_EQ(builtin_array_element(oid::kTimetzArray), oid::kTimetz);
    EXPECT_EQ(builtin_array_element(1020), oid::kBox);
    EXPECT_EQ(builtin_array_element(oid::kInt4), 0u);
    EXPECT_EQ(builtin_array_element(oid::kInt2Vector), 0u);
    EXPECT_EQ(builtin_array_element(oid::kOidVector), 0u);
    EXPECT_EQ(builtin_array_element(oid::kName), 0u);
    EXPECT_EQ(builtin_array_element(99999), 0u);
    EXPECT_EQ(builtin_array_of(oid::kUuid), oid::kUuidArray);
    EXPECT_EQ(builtin_array_of(oid::kNumeric), oid::kNumericArray);
    EXPECT_EQ(builtin_array_of(oid::kInt4Array), 0u);
    for (const std::uint32_t a :
         {oid::kBoolArray, oid::kByteaArray, oid::kInt2Array, oid::kInt8Array, oid::kFloat4Array,
          oid::kFloat8Array, oid::kOidArray, oid::kTimestampArray, oid::kDateArray, oid::kTimeArray,
          oid::kTimestamptzArray, oid::kIntervalArray, oid::kVarcharArray, oid::kBpcharArray,
          oid::kJsonbArray}) {
        EXPECT_EQ(builtin_array_of(builtin_array_element(a)), a);
    }
}

} // namespace
} // namespace pgtide::schema
