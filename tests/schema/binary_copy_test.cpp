// BinaryCopyParser against COPY streams captured from PostgreSQL 15, fed in every split.
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "schema/binary_copy.hpp"
#include "schema/codec.hpp"
#include "schema/pg_types.hpp"
#include "tests/schema/test_util.hpp"

namespace pgtide::schema {
namespace {

using Field = std::optional<std::string>;
using Rows = std::vector<std::vector<Field>>;

// Drains every whole row buffered so far into `rows`; true once the trailer was read.
bool drain(BinaryCopyParser& parser, Rows& rows) {
    std::vector<std::optional<std::string_view>> fields;
    for (;;) {
        switch (parser.next(fields)) {
        case BinaryCopyParser::Status::RowReady: {
            std::vector<Field> row;
            for (const auto& f : fields) {
                row.push_back(f ? Field(std::string(*f)) : std::nullopt);
            }
            rows.push_back(std::move(row));
            break;
        }
        case BinaryCopyParser::Status::NeedMore:
            return false;
        case BinaryCopyParser::Status::End:
            return true;
        }
    }
}

// Parses `stream` fed as the given chunks; checks the end is seen exactly at the last one.
Rows parse_chunks(const std::string& stream, const std::vector<std::size_t>& cuts) {
    BinaryCopyParser parser;
    Rows rows;
    std::size_t from = 0;
    bool ended = false;
    for (std::size_t i = 0; i <= cuts.size(); ++i) {
        const std::size_t to = i < cuts.size() ? cuts[i] : stream.size();
        parser.feed(std::string_view(stream).substr(from, to - from));
        from = to;
        ended = drain(parser, rows);
        EXPECT_EQ(ended, to == stream.size()) << "after feeding up to byte " << to;
    }
    parser.finish();
    return rows;
}

const Rows& expected_rows() {
    using namespace std::string_literals;
    static const Rows rows = {
        {test::unhex("00000001"), "one"s, test::unhex("000200000000000200011388"),
         test::unhex("00ff")},
        {test::unhex("00000002"), std::nullopt, std::nullopt, ""s},
        {std::nullopt, ""s, test::unhex("00000000c0000000"), std::nullopt},
        {test::unhex("80000000"), std::string(300, 'x'),
         test::unhex("000500020000000600010929 1a8500000064"), test::unhex("deadbeef")},
    };
    return rows;
}

TEST(BinaryCopyParser, ParsesCapturedRowsInOneChunk) {
    const std::string stream = test::read_fixture("copy_rows.bin");
    EXPECT_EQ(parse_chunks(stream, {}), expected_rows());
}

TEST(BinaryCopyParser, EverySplitPointGivesTheSameRows) {
    const std::string stream = test::read_fixture("copy_rows.bin");
    for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
        SCOPED_TRACE(cut);
        EXPECT_EQ(parse_chunks(stream, {cut}), expected_rows());
    }
}

TEST(BinaryCopyParser, ByteByByte) {
    const std::string stream = test::read_fixture("copy_rows.bin");
    std::vector<std::size_t> cuts;
    for (std::size_t i = 1; i < stream.size(); ++i) {
        cuts.push_back(i);
    }
    EXPECT_EQ(parse_chunks(stream, cuts), expected_rows());
}

TEST(BinaryCopyParser, RandomChunks) {
    const std::string stream = test::read_fixture("copy_rows.bin");
    std::mt19937 rng(42);
    for (int round = 0; round < 200; ++round) {
        std::vector<std::size_t> cuts;
        for (std::size_t at = 0;;) {
            at += 1 + rng() % 40;
            if (at >= stream.size()) {
                break;
            }
            cuts.push_back(at);
        }
        EXPECT_EQ(parse_chunks(stream, cuts), expected_rows());
    }
}

TEST(BinaryCopyParser, EmptyResultInEverySplitOfThree) {
    const std::string stream = test::read_fixture("copy_empty.bin");
    ASSERT_EQ(stream.size(), 21u); // header and trailer
    for (std::size_t a = 0; a <= stream.size(); ++a) {
        for (std::size_t b = a; b <= stream.size(); ++b) {
            EXPECT_TRUE(parse_chunks(stream, {a, b}).empty());
        }
    }
}

TEST(BinaryCopyParser, FieldsDecodeToCanonicalValues) {
    BinaryCopyParser parser;
    parser.feed(test::read_fixture("copy_rows.bin"));
    std::vector<std::optional<std::string_view>> f;
    const TypeRef int4{oid::kInt4, 0};
    const TypeRef text{oid::kText, 0};
    const TypeRef numeric{oid::kNumeric, 0};
    const TypeRef bytea{oid::kBytea, 0};
    ASSERT_EQ(parser.next(f), BinaryCopyParser::Status::RowReady);
    EXPECT_EQ(decode_binary(int4, *f[0]), Value{std::int64_t(1)});
    EXPECT_EQ(decode_binary(text, *f[1]), Value{std::string("one")});
    EXPECT_EQ(decode_binary(numeric, *f[2]), Value{std::string("1.50")});
    EXPECT_EQ(decode_binary(bytea, *f[3]), Value{Blob{std::string("\x00\xff", 2)}});
    ASSERT_EQ(parser.next(f), BinaryCopyParser::Status::RowReady);
    ASSERT_EQ(parser.next(f), BinaryCopyParser::Status::RowReady);
    EXPECT_EQ(decode_binary(numeric, *f[2]), Value{std::string("NaN")});
    ASSERT_EQ(parser.next(f), BinaryCopyParser::Status::RowReady);
    EXPECT_EQ(decode_binary(int4, *f[0]), Value{std::int64_t(-2147483648LL)});
    EXPECT_EQ(decode_binary(numeric, *f[2]), Value{std::string("123456789.000001")});
    EXPECT_EQ(parser.next(f), BinaryCopyParser::Status::End);
    EXPECT_EQ(parser.next(f), BinaryCopyParser::Status::End);
    EXPECT_EQ(parser.rows(), 4u);
    EXPECT_EQ(parser.field_count(), 4u);
    parser.finish();
}

std::size_t error_offset(const std::string& stream) {
    BinaryCopyParser parser;
    parser.feed(stream);
    Rows rows;
    try {
        drain(parser, rows);
        parser.finish();
    } catch (const DecodeError& e) {
        EXPECT_NE(std::string(e.what()).find("binary COPY stream"), std::string::npos);
        return e.offset();
    }
    ADD_FAILURE() << "no DecodeError";
    return 0;
}

TEST(BinaryCopyParser, BadSignatureFailsAtTheFirstWrongByte) {
    std::string stream = test::read_fixture("copy_empty.bin");
    stream[7] = 'x';
    EXPECT_EQ(error_offset(stream), 7u);
    // Detected before the whole header has arrived.
    BinaryCopyParser parser;
    parser.feed("PGCOPZ");
    std::vector<std::optional<std::string_view>> f;
    EXPECT_THROW(parser.next(f), DecodeError);
    EXPECT_EQ(error_offset("COPY"), 0u);
}

TEST(BinaryCopyParser, UnknownCriticalFlagOrOidsAreRefused) {
    std::string stream = test::read_fixture("copy_empty.bin");
    stream[14] = 1; // bit 0
    EXPECT_EQ(error_offset(stream), 11u);
    stream[14] = 0;
    stream[13] = 1; // bit 16: rows carry OIDs
    EXPECT_EQ(error_offset(stream), 11u);
    stream[13] = 0;
    stream[11] = 0x40; // bit 30: not critical, ignored
    Rows rows;
    BinaryCopyParser parser;
    parser.feed(stream);
    EXPECT_TRUE(drain(parser, rows));
}

TEST(BinaryCopyParser, HeaderExtensionIsSkipped) {
    const std::string empty = test::read_fixture("copy_empty.bin");
    std::string stream = empty.substr(0, 15) + test::unhex("00000003") + "abc" + empty.substr(19);
    for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
        EXPECT_TRUE(parse_chunks(stream, {cut}).empty());
    }
}

TEST(BinaryCopyParser, TruncatedStreamFailsAtFinish) {
    const std::string stream = test::read_fixture("copy_rows.bin");
    for (std::size_t size : {std::size_t(0), std::size_t(10), std::size_t(19), std::size_t(21),
                             stream.size() - 3, stream.size() - 1}) {
        BinaryCopyParser parser;
        parser.feed(stream.substr(0, size));
        Rows rows;
        EXPECT_FALSE(drain(parser, rows));
        EXPECT_THROW(parser.finish(), DecodeError) << size;
    }
}

TEST(BinaryCopyParser, FieldCountMustNotChange) {
    const std::string empty = test::read_fixture("copy_empty.bin");
    const std::string header = empty.substr(0, 19);
    const std::string row1 = test::unhex("0001 00000001 61");
    const std::string row2 = test::unhex("0002 ffffffff ffffffff");
    EXPECT_EQ(error_offset(header + row1 + row2 + test::unhex("ffff")), 19u + row1.size());
}

TEST(BinaryCopyParser, BadLengthsAreRefused) {
    const std::string header = test::read_fixture("copy_empty.bin").substr(0, 19);
    EXPECT_EQ(error_offset(header + test::unhex("0001 fffffffe")), 21u);
    EXPECT_EQ(error_offset(header + test::unhex("0001 7fffffff")), 21u);
    EXPECT_EQ(error_offset(header + test::unhex("fffe")), 19u);
}

TEST(BinaryCopyParser, DataAfterTheTrailerIsRefused) {
    const std::string stream = test::read_fixture("copy_empty.bin");
    EXPECT_EQ(error_offset(stream + "x"), 21u);
    // Also when it arrives after End was reported.
    BinaryCopyParser parser;
    parser.feed(stream);
    std::vector<std::optional<std::string_view>> f;
    EXPECT_EQ(parser.next(f), BinaryCopyParser::Status::End);
    parser.feed("x");
    EXPECT_THROW(parser.next(f), DecodeError);
    EXPECT_THROW(parser.finish(), DecodeError);
}

TEST(BinaryCopyParser, ZeroColumnRows) {
    const std::string header = test::read_fixture("copy_empty.bin").substr(0, 19);
    const Rows rows = parse_chunks(header + test::unhex("0000 0000 ffff"), {20});
    EXPECT_EQ(rows, (Rows{{}, {}}));
}

TEST(BinaryCopyParser, BufferStaysBoundedByOneRow) {
    const std::string header = test::read_fixture("copy_empty.bin").substr(0, 19);
    const std::string row = test::unhex("0001 00000400") + std::string(1024, 'r');
    BinaryCopyParser parser;
    parser.feed(header);
    Rows rows;
    std::size_t most = 0;
    for (int i = 0; i < 2000; ++i) {
        // Chunks that straddle rows: 700 bytes at a time.
        for (std::size_t at = 0; at < row.size(); at += 700) {
            parser.feed(std::string_view(row).substr(at, 700));
            drain(parser, rows);
            most = std::max(most, parser.buffered());
        }
        rows.clear();
    }
    parser.feed(test::unhex("ffff"));
    EXPECT_TRUE(drain(parser, rows));
    EXPECT_LE(most, row.size());
    EXPECT_EQ(parser.rows(), 2000u);
}

// The writing side: a header from append_binary_copy_header and a tuple built with
// append_be32 (field count 2, a 4-byte field, a NULL) read back as the same row. The trailer is
// appended by hand: a destination ends the data with CopyDone instead.
TEST(BinaryCopyWriter, ParserReadsWhatTheWritersWrite) {
    std::string stream;
    append_binary_copy_header(stream);
    EXPECT_EQ(stream, test::unhex("5047434f50590aff0d0a00"
                                  "00000000"
                                  "00000000"));
    stream += test::unhex("0002");
    append_be32(stream, 4);
    append_be32(stream, 0x01020304u);
    append_be32(stream, 0xffffffffu);
    stream += test::unhex("ffff");
    const Rows rows = parse_chunks(stream, {});
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0], (std::vector<Field>{test::unhex("01020304"), std::nullopt}));
}

} // namespace
} // namespace pgtide::schema
