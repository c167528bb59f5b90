// Issue 5's edge values, captured from PostgreSQL 15 and 18
// (tests/fixtures/capture_edge_values.sh): each value's binary send format and its text output
// decode to the identical canonical Value, and that Value is the exact one DESIGN §5 prescribes.
#include <cmath>
#include <limits>
#include <map>
#include <optional>
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
    std::optional<std::string> binary; // nullopt for types without a binary send capture
};

std::vector<Captured> load(const char* fixture) {
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
            unhex(cols[3]),
            cols[4].empty() ? std::nullopt : std::optional<std::string>(unhex(cols[4]))});
    }
    return out;
}

// Values compared as stored: doubles bit for bit (so -0 and 0 differ).
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

Value text(std::string s) {
    return Value{std::move(s)};
}

const std::string& numeric_1000_digits() {
    static const std::string s = [] {
        std::string out = "9";
        for (int i = 0; i < 99; ++i) {
            out += "0123456789";
        }
        return out + ".123456789";
    }();
    return s;
}

std::map<std::string, Value> expected_values() {
    std::string all_bytes;
    for (int b = 0; b < 256; ++b) {
        all_bytes += char(b);
    }
    const std::string numeric_1000 = numeric_1000_digits();
    return {
        {"'-0'::float8", -0.0},
        {"'-0'::float4", -0.0},
        {"5e-324::float8", 5e-324},
        {"('9' || repeat('0123456789', 99) || '.123456789')::numeric", text(numeric_1000)},
        {"repeat('1', 1000)::numeric", text(std::string(1000, '1'))},
        {"('-0.' || repeat('0', 500) || repeat('7', 500))::numeric",
         text("-0." + std::string(500, '0') + std::string(500, '7'))},
        {"'1e-1000'::numeric", text("0." + std::string(999, '0') + "1")},
        {"(SELECT decode(string_agg(lpad(to_hex(g), 2, '0'), '' ORDER BY g), 'hex') FROM "
         "generate_series(0, 255) g)",
         Blob{all_bytes}},
        {"'✓ 𝄞 日本語 ünï'::text", text("✓ 𝄞 日本語 ünï")},
        {"E'\\u00e9\\U0001D11E'::varchar(5)", text("é𝄞")},
        {"'é𝄞'::char(4)", text("é𝄞  ")},
        {R"('{"ü": "\u00e9 ✓ 𝄞", "n": 1.50, "e": "\"q\""}'::json)",
         text(R"({"ü": "\u00e9 ✓ 𝄞", "n": 1.50, "e": "\"q\""})")},
        {R"('{"ü": "\u00e9 ✓ 𝄞", "n": 1.50, "e": "\"q\""}'::jsonb)",
         text(R"({"e": "\"q\"", "n": 1.50, "ü": "é ✓ 𝄞"})")},
        {"'<a>ü ✓</a>'::xml", text("<a>ü ✓</a>")},
        {"'12:00:00-01:02:03'::timetz", text("12:00:00-01:02:03")},
        {"'00:00:00+15:59:59'::timetz", text("00:00:00+15:59:59")},
        {"'24:00:00+15:59:59'::timetz", text("24:00:00+15:59:59")},
        {"'1 year 13 months -1 day 00:00:00.000001'::interval", text("P2Y1M-1DT0.000001S")},
        {"'-1 month 1 microsecond'::interval", text("P-1MT0.000001S")},
        {"'178000000 years'::interval", text("P178000000Y")},
        {"'1 mon -0.000001 sec'::interval", text("P1MT-0.000001S")},
        {"'infinity'::date", text("infinity")},
        {"'0044-03-15 BC'::date", text("0044-03-15 BC")},
        {"'4713-01-01 00:00:00 BC'::timestamp", text("4713-01-01T00:00:00 BC")},
        {"'10000-01-01 00:00:00.5'::timestamp", text("10000-01-01T00:00:00.5")},
        {"'10000-01-01 00:00:00.5+00'::timestamptz", text("10000-01-01T00:00:00.5Z")},
        {"'0001-01-01 00:00:00+00 BC'::timestamptz", text("0001-01-01T00:00:00Z BC")},
        {"'infinity'::timestamptz", text("infinity")},
        {"'{{1,NULL},{NULL,4}}'::int4[]", text("[[1,null],[null,4]]")},
        {R"('{{"a",NULL},{"","b,c"}}'::text[])", text(R"([["a",null],["","b,c"]])")},
        {R"(ARRAY['✓', '𝄞', NULL, '"', ',', E'\\']::text[])",
         text(R"(["✓","𝄞",null,"\"",",","\\"])")},
        {"'[-2:-1][3:4]={{NULL,1.5},{NaN,-0}}'::float8[]", text(R"([[null,1.5],["NaN",-0]])")},
        {"ARRAY[5e-324, '-0', 'Infinity']::float8[]", text(R"([5e-324,-0,"Infinity"])")},
        {"'{NaN,Infinity,-Infinity,-0,1.1}'::float4[]",
         text(R"(["NaN","Infinity","-Infinity",-0,1.1])")},
        {"ARRAY[('9' || repeat('0123456789', 99) || '.123456789')::numeric, NULL, "
         "'NaN']::numeric[]",
         text("[" + numeric_1000 + R"(,null,"NaN"])")},
        {"ARRAY['infinity', '-infinity', '0044-03-15 BC', '10000-01-01']::date[]",
         text(R"(["infinity","-infinity","0044-03-15 BC","10000-01-01"])")},
        {"ARRAY['24:00:00', NULL]::time[]", text(R"(["24:00:00",null])")},
        {"ARRAY['12:00:00-01:02:03']::timetz[]", text(R"(["12:00:00-01:02:03"])")},
        {"ARRAY['0001-01-01 00:00:00+00 BC', '294276-12-31 23:59:59.999999+00', "
         "'-infinity']::timestamptz[]",
         text(R"(["0001-01-01T00:00:00Z BC","294276-12-31T23:59:59.999999Z","-infinity"])")},
        {"ARRAY['1 year 13 months -1 day 00:00:00.000001']::interval[]",
         text(R"(["P2Y1M-1DT0.000001S"])")},
        {R"(ARRAY['{"ü": "\u00e9"}', NULL]::jsonb[])", text(R"(["{\"ü\": \"é\"}",null])")},
        {R"(ARRAY['{"ü": "\u00e9"}']::json[])", text(R"(["{\"ü\": \"\\u00e9\"}"])")},
        {R"(ARRAY['\x00ff'::bytea, '\x']::bytea[])", text(R"(["\\x00ff","\\x"])")},
        {"'{}'::text[]", text("[]")},
        {"'192.168.0.1/24'::inet", text("192.168.0.1/24")},
        {"'1234.56'::money", text("$1,234.56")},
        {"int4range(1, 10)", text("[1,10)")},
        // PostgreSQL 17 and later only.
        {"'infinity'::interval", text("infinity")},
        {"'-infinity'::interval", text("-infinity")},
        {"ARRAY['infinity', '-infinity', 'P1M']::interval[]",
         text(R"(["infinity","-infinity","P1M"])")},
    };
}

void check_fixture(const char* fixture, std::size_t expected_count) {
    const auto values = load(fixture);
    ASSERT_EQ(values.size(), expected_count);
    const auto expected = expected_values();
    for (const auto& v : values) {
        SCOPED_TRACE(v.label);
        const auto it = expected.find(v.label);
        ASSERT_NE(it, expected.end()) << "no expectation for a captured value";
        const Value from_text = decode_text(v.type, v.text);
        EXPECT_TRUE(identical(from_text, it->second))
            << "text   " << show(from_text) << "\nwanted " << show(it->second);
        if (v.binary) {
            ASSERT_TRUE(has_binary_decoder(v.type));
            const Value from_binary = decode_binary(v.type, *v.binary);
            EXPECT_TRUE(identical(from_binary, it->second))
                << "binary " << show(from_binary) << "\nwanted " << show(it->second);
        } else {
            // Read as `::text` in the snapshot and in text mode in the stream.
            EXPECT_FALSE(has_binary_decoder(v.type));
        }
    }
}

TEST(CodecEdgeFixture, PostgreSQL15BinaryAndTextGiveTheDesignedValue) {
    check_fixture("edge_values_pg15.tsv", 47);
}

TEST(CodecEdgeFixture, PostgreSQL18BinaryAndTextGiveTheDesignedValue) {
    check_fixture("edge_values_pg18.tsv", 50);
}

// The same value's bytes do not depend on the server version (so a replica can move between
// them); infinite intervals exist from PostgreSQL 17 on.
TEST(CodecEdgeFixture, PostgreSQL15And18SendTheSameBytes) {
    const auto v15 = load("edge_values_pg15.tsv");
    const auto v18 = load("edge_values_pg18.tsv");
    ASSERT_EQ(v15.size() + 3, v18.size());
    for (std::size_t i = 0; i < v15.size(); ++i) {
        SCOPED_TRACE(v15[i].label);
        EXPECT_EQ(v15[i].label, v18[i].label);
        EXPECT_EQ(v15[i].type, v18[i].type);
        EXPECT_EQ(v15[i].text, v18[i].text);
        EXPECT_EQ(v15[i].binary, v18[i].binary);
    }
}

TEST(CodecEdgeFixture, StorageClassOfFloatEdgesIsReal) {
    for (const auto& v : load("edge_values_pg18.tsv")) {
        if (v.type.oid == 700 || v.type.oid == 701) {
            SCOPED_TRACE(v.label);
            EXPECT_EQ(storage_class(v.type), StorageClass::Real);
            EXPECT_TRUE(std::holds_alternative<double>(decode_text(v.type, v.text)));
        }
    }
}

// Every byte value survives bytea in both wire forms, including a truncated text form's error.
TEST(CodecEdgeFixture, ByteaWithAll256ByteValuesHasThe256Bytes) {
    for (const auto& v : load("edge_values_pg15.tsv")) {
        if (v.type.oid == 17) {
            const Value b = decode_binary(v.type, *v.binary);
            ASSERT_TRUE(std::holds_alternative<Blob>(b));
            ASSERT_EQ(std::get<Blob>(b).bytes.size(), 256u);
            for (int i = 0; i < 256; ++i) {
                EXPECT_EQ(static_cast<unsigned char>(std::get<Blob>(b).bytes[i]), i);
            }
            EXPECT_THROW(decode_text(v.type, v.text.substr(0, v.text.size() - 1)), DecodeError);
        }
    }
}

} // namespace
} // namespace pgtide::schema
