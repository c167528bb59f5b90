// Codec edge cases: malformed input, unknown types, arrays of non-built-in elements, and forms
// that only one path produces.
#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "schema/codec.hpp"
#include "schema/pg_types.hpp"
#include "tests/schema/test_util.hpp"

namespace pgtide::schema {
namespace {

using test::show;
using test::unhex;

constexpr std::uint32_t kEnumOid = 16500; // some user type

TypeRef type(std::uint32_t oid, std::uint32_t element = 0) {
    return TypeRef{oid, element};
}

Value text_value(const char* s) {
    return std::string(s);
}

// The DecodeError of decoding `bytes` in binary; its message must name `what` and the offset.
DecodeError binary_error(const TypeRef& t, const std::string& bytes) {
    try {
        const Value v = decode_binary(t, bytes);
        ADD_FAILURE() << "decoded to " << show(v);
    } catch (const DecodeError& e) {
        return e;
    }
    return DecodeError("nothing", 0, "");
}

DecodeError text_error(const TypeRef& t, const std::string& text) {
    try {
        const Value v = decode_text(t, text);
        ADD_FAILURE() << "decoded to " << show(v);
    } catch (const DecodeError& e) {
        return e;
    }
    return DecodeError("nothing", 0, "");
}

void expect_message(const DecodeError& e, const std::string& what, std::size_t offset) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("invalid " + what + " at byte " + std::to_string(offset) + ":", 0), 0u)
        << message;
    EXPECT_EQ(e.offset(), offset) << message;
}

TEST(Codec, TruncatedAndOverlongFixedWidthValues) {
    expect_message(binary_error(type(oid::kInt4), unhex("000001")), "int4", 0);
    expect_message(binary_error(type(oid::kInt4), unhex("0000000100")), "int4", 4);
    expect_message(binary_error(type(oid::kInt8), ""), "int8", 0);
    expect_message(binary_error(type(oid::kBool), ""), "bool", 0);
    expect_message(binary_error(type(oid::kFloat8), unhex("3ff0")), "float8", 0);
    expect_message(binary_error(type(oid::kUuid), std::string(15, 'a')), "uuid", 0);
    expect_message(binary_error(type(oid::kTimetz), unhex("0000000000000000")), "timetz", 8);
    expect_message(binary_error(type(oid::kInterval), unhex("00000000000000000000000000")),
                   "interval", 12);
}

TEST(Codec, NumericMalformed) {
    // ndigits 1, weight 0, sign +, dscale 0, digit 10000: the digit is at byte 8.
    expect_message(binary_error(type(oid::kNumeric), unhex("0001 0000 0000 0000 2710")), "numeric",
                   8);
    expect_message(binary_error(type(oid::kNumeric), unhex("0002 0000 0000 0000 0001 ffff")),
                   "numeric", 10);
    expect_message(binary_error(type(oid::kNumeric), unhex("0001 0000 1234 0000 0001")), "numeric",
                   4);
    expect_message(binary_error(type(oid::kNumeric), unhex("ffff 0000 0000 0000")), "numeric", 0);
    expect_message(binary_error(type(oid::kNumeric), unhex("0002 0000 0000 0000 0001")), "numeric",
                   10);
    expect_message(binary_error(type(oid::kNumeric), unhex("0000 0000 0000 4000")), "numeric", 6);
    expect_message(binary_error(type(oid::kNumeric), unhex("0000 0000 0000 0000 00")), "numeric",
                   8);
    expect_message(text_error(type(oid::kNumeric), "1.2.3"), "numeric", 3);
    expect_message(text_error(type(oid::kNumeric), "-"), "numeric", 0);
}

TEST(Codec, NumericFormsPostgresNeverSendsStillPrintLikeNumericOut) {
    // Leading zero digit (not normalized): 0 0001 with weight 1 is 1.
    EXPECT_EQ(decode_binary(type(oid::kNumeric), unhex("0002 0001 0000 0000 0000 0001")),
              text_value("1"));
    // Negative zero prints without a sign; digits past dscale are cut as numeric_recv does.
    EXPECT_EQ(decode_binary(type(oid::kNumeric), unhex("0000 0000 4000 0002")), text_value("0.00"));
    EXPECT_EQ(decode_binary(type(oid::kNumeric), unhex("0001 ffff 4000 0002 0001")),
              text_value("0.00"));
    EXPECT_EQ(decode_binary(type(oid::kNumeric), unhex("0001 ffff 4000 0004 0001")),
              text_value("-0.0001"));
    // Weight beyond the digits: trailing groups of zeros.
    EXPECT_EQ(decode_binary(type(oid::kNumeric), unhex("0001 0002 0000 0001 0007")),
              text_value("700000000.0"));
}

TEST(Codec, DatesAndTimesOutOfRange) {
    // Date one day past 5874897-12-31, and one day before 4714-11-24 BC.
    expect_message(binary_error(type(oid::kDate), unhex("7fda970d")), "date", 0);
    EXPECT_EQ(decode_binary(type(oid::kDate), unhex("7fda970c")), text_value("5874897-12-31"));
    expect_message(binary_error(type(oid::kDate), unhex("ffda97a6")), "date", 0);
    EXPECT_EQ(decode_binary(type(oid::kDate), unhex("ffda97a7")), text_value("4714-11-24 BC"));
    expect_message(binary_error(type(oid::kTime), unhex("000000141dd76001")), "time", 0);
    expect_message(binary_error(type(oid::kTime), unhex("ffffffffffffffff")), "time", 0);
    expect_message(binary_error(type(oid::kTimetz), unhex("0000000000000000 0000e100")), "timetz",
                   0);
    expect_message(binary_error(type(oid::kTimestamp), unhex("7ffffffffffffffe")), "timestamp", 0);
    expect_message(binary_error(type(oid::kTimestamptz), unhex("8000000000000001")), "timestamptz",
                   0);
}

TEST(Codec, ImpossibleDateText) {
    expect_message(text_error(type(oid::kDate), "2023-02-29"), "date", 0);
    expect_message(text_error(type(oid::kDate), "2023-13-01"), "date", 0);
    expect_message(text_error(type(oid::kDate), "0000-01-01 BC"), "date", 0);
    expect_message(text_error(type(oid::kDate), "4714-11-23 BC"), "date", 0);
    expect_message(text_error(type(oid::kDate), "2023-01-01x"), "date", 10);
    expect_message(text_error(type(oid::kDate), "01/02/2023"), "date", 2);
    expect_message(text_error(type(oid::kTimestamp), "2023-01-01 25:00:00"), "timestamp", 11);
    expect_message(text_error(type(oid::kTimestamp), "2023-01-01 12:60:00"), "timestamp", 11);
    expect_message(text_error(type(oid::kTime), "24:00:00.000001"), "time", 0);
    expect_message(text_error(type(oid::kTimetz), "12:00:00+16"), "timetz", 8);
    expect_message(text_error(type(oid::kTimestamptz), "294276-12-31 23:59:59+00 BC x"),
                   "timestamptz", 27);
}

TEST(Codec, TimestamptzTextInAnotherZoneIsConvertedToUtc) {
    EXPECT_EQ(decode_text(type(oid::kTimestamptz), "2024-06-01 12:00:00+05:30"),
              text_value("2024-06-01T06:30:00Z"));
    EXPECT_EQ(decode_text(type(oid::kTimestamptz), "2000-01-01 00:00:00.5-08"),
              text_value("2000-01-01T08:00:00.5Z"));
    EXPECT_EQ(decode_text(type(oid::kTimestamptz), "0001-01-01 00:30:00+01 BC"),
              text_value("0002-12-31T23:30:00Z BC"));
    // The canonical form reads back as itself.
    EXPECT_EQ(decode_text(type(oid::kTimestamptz), "4713-01-01T00:00:00Z BC"),
              text_value("4713-01-01T00:00:00Z BC"));
}

TEST(Codec, IntervalTextMustBeIso8601) {
    expect_message(text_error(type(oid::kInterval), "1 day"), "interval", 0);
    expect_message(text_error(type(oid::kInterval), "P1X"), "interval", 3);
    expect_message(text_error(type(oid::kInterval), "P"), "interval", 1);
    expect_message(text_error(type(oid::kInterval), "P2147483648D"), "interval", 12);
    // PostgreSQL 17's infinite intervals.
    const std::string pinf = unhex("7fffffffffffffff 7fffffff 7fffffff");
    const std::string ninf = unhex("8000000000000000 80000000 80000000");
    EXPECT_EQ(decode_binary(type(oid::kInterval), pinf), text_value("infinity"));
    EXPECT_EQ(decode_binary(type(oid::kInterval), ninf), text_value("-infinity"));
    EXPECT_EQ(decode_text(type(oid::kInterval), "-infinity"), text_value("-infinity"));
}

TEST(Codec, ScalarTextMalformed) {
    expect_message(text_error(type(oid::kBool), "yes"), "bool", 0);
    expect_message(text_error(type(oid::kInt2), "40000"), "int2", 0);
    expect_message(text_error(type(oid::kInt4), "12a"), "int4", 2);
    expect_message(text_error(type(oid::kInt8), ""), "int8", 0);
    expect_message(text_error(type(oid::kFloat8), "1,5"), "float8", 0);
    expect_message(text_error(type(oid::kFloat4), "nan"), "float4", 0);
    expect_message(text_error(type(oid::kBytea), "\\x0g"), "bytea", 2);
    expect_message(text_error(type(oid::kBytea), "\\x012"), "bytea", 4);
    expect_message(text_error(type(oid::kBytea), "a\\9"), "bytea", 1);
    expect_message(text_error(type(oid::kUuid), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1"), "uuid", 0);
    expect_message(text_error(type(oid::kUuid), "a0eebc99x9c0b-4ef8-bb6d-6bb9bd380a11"), "uuid", 8);
    expect_message(binary_error(type(oid::kJsonb), unhex("027b7d")), "jsonb", 0);
}

TEST(Codec, OtherTextForms) {
    EXPECT_EQ(decode_text(type(oid::kBytea), "a\\000b\\\\\\377"),
              Value{Blob{std::string("a\0b\\\xff", 5)}});
    EXPECT_EQ(decode_text(type(oid::kUuid), "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
              text_value("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"));
    EXPECT_EQ(decode_binary(type(oid::kChar), std::string(1, '\0')), text_value(""));
    const Value tiny = decode_text(type(oid::kFloat8), "4.9406564584124654e-324");
    EXPECT_EQ(tiny, Value{std::numeric_limits<double>::denorm_min()});
    EXPECT_EQ(decode_text(type(oid::kFloat4), "1.1"), Value{1.1});
}

TEST(Codec, UnknownTypesStayTextAndHaveNoBinaryDecoder) {
    for (const std::uint32_t t : {kEnumOid, oid::kInet, oid::kMoney, oid::kPoint, oid::kBit,
                                  oid::kInt2Vector, oid::kTsvector}) {
        SCOPED_TRACE(t);
        EXPECT_FALSE(has_binary_decoder(type(t)));
        EXPECT_EQ(storage_class(type(t)), StorageClass::Text);
        EXPECT_EQ(decode_text(type(t), "as {it} is"), text_value("as {it} is"));
        const DecodeError e = binary_error(type(t), "x");
        EXPECT_NE(std::string(e.what()).find(std::to_string(t)), std::string::npos) << e.what();
    }
}

TEST(Codec, NonArrayBuiltinsWithTypelemAreScalars) {
    // name, point and int2vector have pg_type.typelem; a catalog lookup may pass it on.
    EXPECT_EQ(decode_text(type(oid::kName, oid::kChar), "{x}"), text_value("{x}"));
    EXPECT_EQ(decode_binary(type(oid::kName, oid::kChar), "abc"), text_value("abc"));
    EXPECT_EQ(decode_text(type(oid::kPoint, oid::kFloat8), "(1,2)"), text_value("(1,2)"));
    EXPECT_EQ(decode_text(type(oid::kInt2Vector, oid::kInt2), "1 2"), text_value("1 2"));
}

TEST(Codec, ArraysOfTypesWithoutMapping) {
    // An enum array: element labels as JSON strings; no binary decoder.
    const TypeRef moods{kEnumOid + 1, kEnumOid};
    EXPECT_EQ(storage_class(moods), StorageClass::Text);
    EXPECT_FALSE(has_binary_decoder(moods));
    EXPECT_EQ(decode_text(moods, "{sad,\"so so\",NULL}"), text_value(R"(["sad","so so",null])"));
    expect_message(binary_error(moods, unhex("00000000 00000000 00004074")), "type 16500[]", 0);
    // box[] uses ';' between elements.
    EXPECT_EQ(decode_text(type(1020), "{(1,1),(0,0);(2,2),(1,1)}"),
              text_value(R"j(["(1,1),(0,0)","(2,2),(1,1)"])j"));
    // inet[] elements are text.
    EXPECT_EQ(decode_text(type(1041), "{10.0.0.1/8,::1}"), text_value(R"(["10.0.0.1/8","::1"])"));
}

TEST(Codec, TextArraySyntax) {
    const TypeRef texts = type(oid::kTextArray);
    EXPECT_EQ(decode_text(texts, " { a , \"b\" ,c\\,d,\\ e\\ } "),
              text_value(R"(["a","b","c,d"," e "])"));
    EXPECT_EQ(decode_text(texts, "{null,\"NULL\",NuLl}"), text_value(R"([null,"NULL",null])"));
    EXPECT_EQ(decode_text(texts, "{{}}"), text_value("[[]]"));
    expect_message(text_error(texts, "{a,\"b}"), "text[]", 6);
    expect_message(text_error(texts, "{a,b"), "text[]", 4);
    expect_message(text_error(texts, "{a}x"), "text[]", 3);
    expect_message(text_error(texts, "a,b"), "text[]", 0);
    expect_message(text_error(texts, "{a,,b}"), "text[]", 3);
    expect_message(text_error(texts, "{a\"b}"), "text[]", 2);
    expect_message(text_error(texts, "[1:2={a,b}"), "text[]", 10);
    // Element errors point into the element.
    expect_message(text_error(type(oid::kInt4Array), "{1,2x}"), "int4[]", 4);
    expect_message(text_error(type(oid::kDateArray), "{2000-01-01,\"2001-02-30\"}"), "date[]", 13);
}

TEST(Codec, BinaryArrayMalformed) {
    const TypeRef ints = type(oid::kInt4Array);
    // ndim 7
    expect_message(binary_error(ints, unhex("00000007 00000000 00000017")), "int4[]", 0);
    // null flag 2
    expect_message(binary_error(ints, unhex("00000001 00000002 00000017 00000001 00000001")),
                   "int4[]", 4);
    // negative dimension
    expect_message(binary_error(ints, unhex("00000001 00000000 00000017 ffffffff 00000001")),
                   "int4[]", 12);
    // one element announced, none present
    expect_message(binary_error(ints, unhex("00000001 00000000 00000017 00000001 00000001")),
                   "int4[]", 20);
    // element length -2
    expect_message(
        binary_error(ints, unhex("00000001 00000000 00000017 00000001 00000001 fffffffe")),
        "int4[]", 20);
    // element of 3 bytes: the int4 decoder names its own offset within the array
    expect_message(
        binary_error(ints, unhex("00000001 00000000 00000017 00000001 00000001 00000003 000001")),
        "int4", 24);
    // float element of 3 bytes
    expect_message(binary_error(type(oid::kFloat4Array),
                                unhex("00000001 00000000 000002bc 00000001 00000001 00000003 "
                                      "3f8ccc")),
                   "float4", 24);
    expect_message(binary_error(type(oid::kFloat8Array),
                                unhex("00000001 00000000 000002bd 00000001 00000001 00000009 "
                                      "3ff0000000000000 00")),
                   "float8", 32);
    // trailing garbage
    expect_message(
        binary_error(ints,
                     unhex("00000001 00000000 00000017 00000001 00000001 00000004 00000001 ff")),
        "int4[]", 28);
    // numeric digit > 9999 inside an array
    expect_message(binary_error(type(oid::kNumericArray),
                                unhex("00000001 00000000 000006a4 00000001 00000001 0000000a "
                                      "0001 0000 0000 0000 2710")),
                   "numeric", 32);
    // zero-length dimension: empty
    EXPECT_EQ(decode_binary(ints, unhex("00000001 00000000 00000017 00000000 00000001")),
              text_value("[]"));
    // too many elements
    expect_message(binary_error(ints, unhex("00000002 00000000 00000017 00010000 00000001 "
                                            "00010000 00000001")),
                   "int4[]", 20);
}

TEST(Codec, StorageClasses) {
    EXPECT_EQ(storage_class(type(oid::kBool)), StorageClass::Integer);
    EXPECT_EQ(storage_class(type(oid::kOid)), StorageClass::Integer);
    EXPECT_EQ(storage_class(type(oid::kFloat4)), StorageClass::Real);
    EXPECT_EQ(storage_class(type(oid::kBytea)), StorageClass::Blob);
    EXPECT_EQ(storage_class(type(oid::kNumeric)), StorageClass::Text);
    EXPECT_EQ(storage_class(type(oid::kInt4Array)), StorageClass::Text);
    EXPECT_EQ(storage_class(type(oid::kByteaArray)), StorageClass::Text);
    EXPECT_EQ(storage_class(type(kEnumOid + 1, oid::kInt4)), StorageClass::Text);
    EXPECT_TRUE(has_binary_decoder(type(kEnumOid + 1, oid::kInt4))); // domain-over-int4 array
}

} // namespace
} // namespace pgtide::schema
