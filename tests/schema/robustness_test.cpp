// Malformed input never crashes or reads out of bounds: every decoder either returns a Value or
// throws DecodeError. Run under PGTIDE_SANITIZE=address,undefined to make that meaningful.
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "schema/binary_copy.hpp"
#include "schema/codec.hpp"
#include "schema/pg_types.hpp"
#include "tests/schema/test_util.hpp"

namespace pgtide::schema {
namespace {

const std::vector<TypeRef>& all_types() {
    static const std::vector<TypeRef> types = [] {
        std::vector<TypeRef> out;
        for (const std::uint32_t t :
             {oid::kBool,   oid::kInt2,      oid::kInt4,        oid::kInt8,    oid::kOid,
              oid::kFloat4, oid::kFloat8,    oid::kNumeric,     oid::kText,    oid::kVarchar,
              oid::kBpchar, oid::kName,      oid::kChar,        oid::kBytea,   oid::kUuid,
              oid::kJson,   oid::kJsonb,     oid::kXml,         oid::kDate,    oid::kTime,
              oid::kTimetz, oid::kTimestamp, oid::kTimestamptz, oid::kInterval}) {
            out.push_back(TypeRef{t, 0});
            out.push_back(TypeRef{builtin_array_of(t), t});
        }
        return out;
    }();
    return types;
}

// Decodes and accepts either a Value or a DecodeError.
void decode_anything(const TypeRef& t, const std::string& bytes) {
    try {
        (void)decode_binary(t, bytes);
    } catch (const DecodeError&) {
    }
    try {
        (void)decode_text(t, bytes);
    } catch (const DecodeError&) {
    }
}

TEST(Robustness, RandomBytes) {
    std::mt19937 rng(7);
    for (const TypeRef& t : all_types()) {
        for (int i = 0; i < 500; ++i) {
            std::string bytes(rng() % 48, '\0');
            for (auto& c : bytes) {
                c = char(rng());
            }
            decode_anything(t, bytes);
        }
    }
}

TEST(Robustness, MutatedCapturedValues) {
    std::mt19937 rng(11);
    std::istringstream in(test::read_fixture("schema_values.tsv"));
    std::string line;
    while (std::getline(in, line)) {
        std::vector<std::string> cols;
        std::size_t start = 0;
        for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos;
             start = tab + 1) {
            cols.push_back(line.substr(start, tab - start));
        }
        cols.push_back(line.substr(start));
        const TypeRef t{std::uint32_t(std::stoul(cols[1])), std::uint32_t(std::stoul(cols[2]))};
        for (const std::string& original : {test::unhex(cols[4]), test::unhex(cols[3])}) {
            for (std::size_t cut = 0; cut < original.size(); ++cut) {
                decode_anything(t, original.substr(0, cut));
            }
            for (int i = 0; i < 50 && !original.empty(); ++i) {
                std::string mutated = original;
                mutated[rng() % mutated.size()] = char(rng());
                if (rng() % 2 == 0) {
                    mutated[rng() % mutated.size()] = char(rng() % 2 == 0 ? 0xff : 0x00);
                }
                decode_anything(t, mutated);
            }
        }
    }
}

TEST(Robustness, MutatedCopyStreams) {
    std::mt19937 rng(13);
    const std::string stream = test::read_fixture("copy_rows.bin");
    std::vector<std::optional<std::string_view>> fields;
    for (int i = 0; i < 2000; ++i) {
        std::string mutated = stream;
        mutated[rng() % mutated.size()] = char(rng());
        BinaryCopyParser parser;
        try {
            for (std::size_t at = 0; at < mutated.size(); at += 37) {
                parser.feed(std::string_view(mutated).substr(at, 37));
                while (parser.next(fields) == BinaryCopyParser::Status::RowReady) {
                }
            }
            parser.finish();
        } catch (const DecodeError&) {
        }
    }
}

// Found by fuzz/codec_fuzz: a year inside the date range but past the timestamp range overflowed
// the µs computation (signed overflow, undefined) before the range check.
TEST(Robustness, TimestampTextPastTheTimestampRangeIsAnError) {
    const TypeRef timestamptz{oid::kTimestamptz, 0};
    const TypeRef timestamp{oid::kTimestamp, 0};
    EXPECT_THROW(decode_text(timestamptz, "2942276-12-31 23:59:59.999999+00"), DecodeError);
    EXPECT_THROW(decode_text(timestamp, "5874897-12-31 00:00:00"), DecodeError);
    EXPECT_THROW(decode_text(timestamp, "294277-01-01 00:00:00"), DecodeError);
    EXPECT_THROW(decode_text(TypeRef{oid::kTimestamptzArray, oid::kTimestamptz},
                             R"({"0001-01-01 00:00:00+00 BC","2942276-12-31 23:59:59.999999+00"})"),
                 DecodeError);
    try {
        decode_text(timestamp, "2942276-12-31 23:59:59");
        FAIL() << "no error";
    } catch (const DecodeError& e) {
        EXPECT_EQ(e.offset(), 0u);
        EXPECT_NE(std::string(e.what()).find("timestamp out of range"), std::string::npos)
            << e.what();
    }
    // The last values inside the range still decode.
    EXPECT_EQ(decode_text(timestamp, "294276-12-31 23:59:59.999999"),
              Value(std::string("294276-12-31T23:59:59.999999")));
    EXPECT_EQ(decode_text(timestamptz, "294276-12-31 23:59:59.999999+00"),
              Value(std::string("294276-12-31T23:59:59.999999Z")));
}

} // namespace
} // namespace pgtide::schema
