// encode_column_numbers and column_added_again: the record that tells a column dropped and
// added again under its name from one that stayed, was dropped, or was added.
#include <gtest/gtest.h>

#include "replicate/source_catalog.hpp"

namespace pgtide::replicate {
namespace {

TEST(ColumnNumbers, EncodeQuotesEveryName) {
    EXPECT_EQ(encode_column_numbers({}), "");
    EXPECT_EQ(encode_column_numbers({{1, "id"}, {4, "b"}}), R"(1 "id",4 "b")");
    EXPECT_EQ(encode_column_numbers({{2, R"(a "q", b)"}, {10, "x y"}}),
              R"(2 "a ""q"", b",10 "x y")");
}

TEST(ColumnNumbers, AColumnUnderAnotherNumberWasAddedAgain) {
    const std::string before = encode_column_numbers({{1, "id"}, {2, "a"}, {3, "b"}});
    EXPECT_EQ(column_added_again(before, before), std::nullopt);
    // b dropped and added again: number 4.
    EXPECT_EQ(column_added_again(before, encode_column_numbers({{1, "id"}, {2, "a"}, {4, "b"}})),
              std::optional<std::string>("b"));
    // b dropped, c added: nothing the stream does not follow.
    EXPECT_EQ(column_added_again(before, encode_column_numbers({{1, "id"}, {2, "a"}, {4, "c"}})),
              std::nullopt);
    EXPECT_EQ(column_added_again(before, encode_column_numbers({{1, "id"}, {2, "a"}})),
              std::nullopt);
    EXPECT_EQ(column_added_again(
                  before, encode_column_numbers({{1, "id"}, {2, "a"}, {3, "b"}, {5, "new"}})),
              std::nullopt);
    // Names with quotes, commas and spaces are told apart whole.
    const std::string odd = encode_column_numbers({{1, R"(x" 2,"y)"}, {2, "x"}});
    EXPECT_EQ(column_added_again(odd, encode_column_numbers({{1, R"(x" 2,"y)"}, {3, "x"}})),
              std::optional<std::string>("x"));
    EXPECT_EQ(column_added_again(odd, encode_column_numbers({{3, R"(x" 2,"y)"}, {2, "x"}})),
              std::optional<std::string>(R"(x" 2,"y)"));
}

TEST(ColumnNumbers, NotRecordedOrUnreadableTellsNothing) {
    const std::string now = encode_column_numbers({{1, "id"}, {4, "b"}});
    EXPECT_EQ(column_added_again("", now), std::nullopt);
    EXPECT_EQ(column_added_again(now, ""), std::nullopt);
    for (const char* bad : {"1", "1 id", "x \"id\"", "1 \"id", "1 \"id\"2 \"b\"", "-1 \"b\""}) {
        EXPECT_EQ(column_added_again(bad, now), std::nullopt) << bad;
        EXPECT_EQ(column_added_again(now, bad), std::nullopt) << bad;
    }
}

} // namespace
} // namespace pgtide::replicate
