// The core codec property on values captured from PostgreSQL 15: a value's binary send format
// and its text output decode to the identical canonical Value, and that Value is the one
// DESIGN §5 prescribes.
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "schema/codec.hpp"
#include "tests/schema/test_util.hpp"

namespace pgtide::schema {
namespace {

using test::show;
using test::unhex;

struct Captured {
    std::string label; // the SQL expression
    TypeRef type;
    std::string text;
    std::string binary;
};

std::vector<Captured> load_values(const char* fixture = "schema_values.tsv") {
    std::vector<Captured> out;
    std::istringstream in(test::read_fixture(fixture));
    std::string line;
    while (std::getline(in, line)) {
        std::vector<std::string> cols;
        std::size_t start = 0;
        for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos;
             start = tab + 1) {
            cols.push_back(line.substr(start, tab - start));
        }
        cols.push_back(line.substr(start));
        if (cols.size() != 5) {
            ADD_FAILURE() << "bad fixture line: " << line;
            continue;
        }
        out.push_back(Captured{
            cols[0],
            TypeRef{std::uint32_t(std::stoul(cols[1])), std::uint32_t(std::stoul(cols[2]))},
            unhex(cols[3]), unhex(cols[4])});
    }
    return out;
}

// Values compared as stored: doubles bit for bit (so -0 and 0 differ, NaN never appears).
bool identical(const Value& a, const Value& b) {
    if (a.index() != b.index()) {
        return false;
    }
    if (const auto* d = std::get_if<double>(&a)) {
        const double e = std::get<double>(b);
        return std::signbit(*d) == std::signbit(e) && (*d == e);
    }
    return a == b;
}

TEST(CodecFixture, BinaryAndTextGiveTheSameValue) {
    const auto values = load_values();
    ASSERT_GT(values.size(), 150u);
    for (const auto& v : values) {
        SCOPED_TRACE(v.label);
        ASSERT_TRUE(has_binary_decoder(v.type));
        const Value from_binary = decode_binary(v.type, v.binary);
        const Value from_text = decode_text(v.type, v.text);
        EXPECT_TRUE(identical(from_binary, from_text))
            << "binary " << show(from_binary) << "\ntext   " << show(from_text);
        EXPECT_NE(std::holds_alternative<Null>(from_text), true);
    }
}

// 100 random values per type (floats, numerics, dates and times, float arrays).
TEST(CodecFixture, RandomValuesBinaryAndTextGiveTheSameValue) {
    const auto values = load_values("random_values.tsv");
    ASSERT_EQ(values.size(), 1200u);
    for (const auto& v : values) {
        SCOPED_TRACE(v.label + " " + v.text);
        const Value from_binary = decode_binary(v.type, v.binary);
        const Value from_text = decode_text(v.type, v.text);
        EXPECT_TRUE(identical(from_binary, from_text))
            << "binary " << show(from_binary) << "\ntext   " << show(from_text);
    }
}

// Float array elements carry PostgreSQL's digits: the labels hold to_json's output.
TEST(CodecFixture, RandomFloatArraysMatchToJson) {
    std::size_t seen = 0;
    for (const auto& v : load_values("random_values.tsv")) {
        for (const std::string prefix : {"random float4[] ", "random float8[] "}) {
            if (v.label.rfind(prefix, 0) == 0) {
                ++seen;
                EXPECT_EQ(decode_binary(v.type, v.binary), Value{v.label.substr(prefix.size())});
            }
        }
    }
    EXPECT_EQ(seen, 200u);
}

TEST(CodecFixture, StorageClassOfEveryValue) {
    for (const auto& v : load_values()) {
        SCOPED_TRACE(v.label);
        const Value value = decode_text(v.type, v.text);
        switch (storage_class(v.type)) {
        case StorageClass::Integer:
            EXPECT_TRUE(std::holds_alternative<std::int64_t>(value)) << show(value);
            break;
        case StorageClass::Real:
            EXPECT_TRUE(std::holds_alternative<double>(value) || value == Value{std::string("NaN")})
                << show(value);
            break;
        case StorageClass::Text:
            EXPECT_TRUE(std::holds_alternative<std::string>(value)) << show(value);
            break;
        case StorageClass::Blob:
            EXPECT_TRUE(std::holds_alternative<Blob>(value)) << show(value);
            break;
        }
    }
}

TEST(CodecFixture, CanonicalForms) {
    const double inf = std::numeric_limits<double>::infinity();
    const std::map<std::string, Value> expected = {
        {"true", std::int64_t(1)},
        {"false", std::int64_t(0)},
        {"(-32768)::int2", std::int64_t(-32768)},
        {"(-2147483648)::int4", std::int64_t(-2147483648LL)},
        {"9223372036854775807::int8", std::int64_t(9223372036854775807LL)},
        {"(-9223372036854775808)::int8", std::numeric_limits<std::int64_t>::min()},
        {"4294967295::oid", std::int64_t(4294967295LL)},
        {"7::pgtide_fixture.posint", std::int64_t(7)},
        {"1.5::float8", 1.5},
        {"0.1::float8", 0.1},
        {"5e-324::float8", 5e-324},
        {"1.7976931348623157e308::float8", 1.7976931348623157e308},
        {"'NaN'::float8", std::string("NaN")},
        {"'Infinity'::float8", inf},
        {"'-Infinity'::float8", -inf},
        {"1.1::float4", 1.1},
        {"0.1::float4", 0.1},
        {"0.3::float4", 0.3},
        {"3.4028235e38::float4", 3.4028235e38},
        {"1e-45::float4", 1e-45},
        {"1.0000001::float4", 1.0000001},
        {"16777217::float4", 16777216.0},
        {"7.3405216e+07::float4", 73405216.0}, // not the shorter 7.340522e+07 (an interval edge)
        {"'-5.9273441538329056e+16'::float8", -5.9273441538329056e+16},
        {"'NaN'::float4", std::string("NaN")},
        {"'-Infinity'::float4", -inf},
        {"0::numeric", std::string("0")},
        {"1.5::numeric(12,4)", std::string("1.5000")},
        {"(-1.5)::numeric", std::string("-1.5")},
        {"12345.678::numeric", std::string("12345.678")},
        {"0.0001::numeric", std::string("0.0001")},
        {"0.00001234::numeric", std::string("0.00001234")},
        {"1e20::numeric", std::string("100000000000000000000")},
        {"(-1e-20)::numeric", std::string("-0.00000000000000000001")},
        {"0.000::numeric", std::string("0.000")},
        {"10000::numeric", std::string("10000")},
        {"100000000::numeric", std::string("100000000")},
        {"9999.9999::numeric", std::string("9999.9999")},
        {"123456789012345678901234567890.123456789::numeric",
         std::string("123456789012345678901234567890.123456789")},
        {"'NaN'::numeric", std::string("NaN")},
        {"'Infinity'::numeric", std::string("Infinity")},
        {"'-Infinity'::numeric", std::string("-Infinity")},
        {"'ab'::char(5)", std::string("ab   ")},
        {"E'\\\\351'::\"char\"", std::string("\\351")},
        {"'\\x'::bytea", Blob{}},
        {"'\\x00ff10'::bytea", Blob{std::string("\x00\xff\x10", 3)}},
        {"'abc'::bytea", Blob{"abc"}},
        {"'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid",
         std::string("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")},
        {"'{\"b\": 1,  \"a\": [1, 2]}'::json", std::string("{\"b\": 1,  \"a\": [1, 2]}")},
        {"'{\"b\": 1,  \"a\": [1, 2.50], \"c\": {\"ü\": null}}'::jsonb",
         std::string("{\"a\": [1, 2.50], \"b\": 1, \"c\": {\"ü\": null}}")},
        {"'2000-01-01'::date", std::string("2000-01-01")},
        {"'0001-12-31 BC'::date", std::string("0001-12-31 BC")},
        {"'0044-03-15 BC'::date", std::string("0044-03-15 BC")},
        {"'4714-11-24 BC'::date", std::string("4714-11-24 BC")},
        {"'10000-01-01'::date", std::string("10000-01-01")},
        {"'5874897-12-31'::date", std::string("5874897-12-31")},
        {"'infinity'::date", std::string("infinity")},
        {"'-infinity'::date", std::string("-infinity")},
        {"'23:59:59.999999'::time", std::string("23:59:59.999999")},
        {"'24:00:00'::time", std::string("24:00:00")},
        {"'12:34:56.5'::time", std::string("12:34:56.5")},
        {"'01:02:03.00012'::time", std::string("01:02:03.00012")},
        {"'12:00:00+05:30'::timetz", std::string("12:00:00+05:30")},
        {"'12:00:00-08'::timetz", std::string("12:00:00-08")},
        {"'12:00:00+01:02:03'::timetz", std::string("12:00:00+01:02:03")},
        {"'24:00:00-00:30'::timetz", std::string("24:00:00-00:30")},
        {"'2024-02-29 12:34:56.789'::timestamp", std::string("2024-02-29T12:34:56.789")},
        {"'0001-12-31 23:59:59.5 BC'::timestamp", std::string("0001-12-31T23:59:59.5 BC")},
        {"'4714-11-24 00:00:00 BC'::timestamp", std::string("4714-11-24T00:00:00 BC")},
        {"'294276-12-31 23:59:59.999999'::timestamp", std::string("294276-12-31T23:59:59.999999")},
        {"'infinity'::timestamp", std::string("infinity")},
        {"'2000-01-01 00:00:00+00'::timestamptz", std::string("2000-01-01T00:00:00Z")},
        {"'2024-06-01 12:00:00+05:30'::timestamptz", std::string("2024-06-01T06:30:00Z")},
        {"'1999-12-31 23:59:59.000001-08'::timestamptz",
         std::string("2000-01-01T07:59:59.000001Z")},
        {"'4713-01-01 00:00:00+00 BC'::timestamptz", std::string("4713-01-01T00:00:00Z BC")},
        {"'-infinity'::timestamptz", std::string("-infinity")},
        {"'0'::interval", std::string("PT0S")},
        {"'1 year 2 months 3 days 4 hours 5 minutes 6.5 seconds'::interval",
         std::string("P1Y2M3DT4H5M6.5S")},
        {"'-1 year -2 months +3 days -4 hours'::interval", std::string("P-1Y-2M3DT-4H")},
        {"'-0.5 seconds'::interval", std::string("PT-0.5S")},
        {"'-1 minutes -30.25 seconds'::interval", std::string("PT-1M-30.25S")},
        {"'3 weeks'::interval", std::string("P21D")},
        {"'2562047788:00:54.775807'::interval", std::string("PT2562047788H54.775807S")},
        {"'{1,2,NULL}'::int4[]", std::string("[1,2,null]")},
        {"'{}'::int4[]", std::string("[]")},
        {"'{{1,2},{3,4}}'::int2[]", std::string("[[1,2],[3,4]]")},
        {"'[0:1]={5,6}'::int8[]", std::string("[5,6]")},
        {"'[1:2][-1:0]={{1,2},{3,4}}'::int4[]", std::string("[[1,2],[3,4]]")},
        {"'{{{1}},{{2}}}'::int4[]", std::string("[[[1]],[[2]]]")},
        {"ARRAY[[NULL,NULL]]::int4[]", std::string("[[null,null]]")},
        {"ARRAY[1,2]::pgtide_fixture.posint[]", std::string("[1,2]")},
        {"'{t,f,NULL}'::bool[]", std::string("[true,false,null]")},
        {"'{0,4294967295}'::oid[]", std::string("[0,4294967295]")},
        {"'{1.5,NaN,Infinity,-Infinity,1e20,0.1,1e15,1e-5,-0,-5.9273441538329056e+16}'::float8[]",
         std::string("[1.5,\"NaN\",\"Infinity\",\"-Infinity\",1e+20,0.1,1e+15,1e-05,-0,"
                     "-5.9273441538329056e+16]")},
        {"'{1.1,NaN,1e6,123456,0.3,-Infinity,7.3405216e+07}'::float4[]",
         std::string("[1.1,\"NaN\",1e+06,123456,0.3,\"-Infinity\",7.3405216e+07]")},
        {"'<?xml version=\"1.0\" standalone=\"yes\"?><a/>'::xml",
         std::string("<?xml version=\"1.0\" standalone=\"yes\"?><a/>")},
        {"'{1.50,NaN,-0.001,Infinity}'::numeric[]",
         std::string("[1.50,\"NaN\",-0.001,\"Infinity\"]")},
        {"ARRAY['  sp  ', 'a\"b', 'NULL', '', E'x\\\\y', 'a,b', E'tab\\there', '{}', 'ü', "
         "'null']::text[]",
         std::string(R"(["  sp  ","a\"b","NULL","","x\\y","a,b","tab\there","{}","ü","null"])")},
        {"ARRAY['ab', NULL]::char(4)[]", std::string(R"(["ab  ",null])")},
        {"'{\"\\\\x00ff\",NULL}'::bytea[]", std::string(R"(["\\x00ff",null])")},
        {"ARRAY['2000-01-01 00:00:00+00', 'infinity', '4713-01-01 00:00:00+00 BC']::"
         "timestamptz[]",
         std::string(R"(["2000-01-01T00:00:00Z","infinity","4713-01-01T00:00:00Z BC"])")},
        {"ARRAY['0044-03-15 BC', '2000-01-01']::date[]",
         std::string(R"(["0044-03-15 BC","2000-01-01"])")},
        {"ARRAY['P1Y', '-0.5 seconds']::interval[]", std::string(R"(["P1Y","PT-0.5S"])")},
        {"ARRAY['12:00:00+05:30']::timetz[]", std::string(R"(["12:00:00+05:30"])")},
        {"ARRAY['{\"a\": 1}']::json[]", std::string(R"(["{\"a\": 1}"])")},
        {"ARRAY['{\"a\": 1}', 'null']::jsonb[]", std::string(R"(["{\"a\": 1}","null"])")},
    };
    std::size_t seen = 0;
    for (const auto& v : load_values()) {
        const auto it = expected.find(v.label);
        if (it == expected.end()) {
            continue;
        }
        ++seen;
        SCOPED_TRACE(v.label);
        EXPECT_TRUE(identical(decode_binary(v.type, v.binary), it->second))
            << show(decode_binary(v.type, v.binary)) << " != " << show(it->second);
    }
    EXPECT_EQ(seen, expected.size()) << "an expectation names no captured value";
}

} // namespace
} // namespace pgtide::schema
