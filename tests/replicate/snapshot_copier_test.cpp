// SnapshotCopier without a server: the SQL of one page of a key range, and how many ranges a
// table is cut into.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "replicate/snapshot_copier.hpp"
#include "schema/pg_types.hpp"

namespace pgtide::replicate {
namespace {

// "Orders" (region text, id bigint, note text), key (region, id).
SourceTable orders() {
    SourceTable st;
    st.table.schema = "public";
    st.table.name = "Orders";
    const auto column = [&](const char* name, std::uint32_t oid, schema::StorageClass storage,
                            const char* type_sql) {
        schema::TableColumn c;
        c.name = name;
        c.type = schema::TypeRef{oid, 0};
        c.storage = storage;
        st.table.columns.push_back(c);
        st.columns.push_back(SourceColumn{name, oid, type_sql});
    };
    column("region", schema::oid::kText, schema::StorageClass::Text, "text");
    column("id", schema::oid::kInt8, schema::StorageClass::Integer, "bigint");
    column("note", schema::oid::kText, schema::StorageClass::Text, "text");
    st.table.key_columns = {0, 1};
    return st;
}

const std::string kSelect = R"(COPY (SELECT src."region", src."id", src."note", "region"::text )"
                            R"(FROM "public"."Orders" AS src)";
const std::string kOrder =
    R"( ORDER BY src."region", src."id" LIMIT 100) TO STDOUT (FORMAT binary))";

TEST(SnapshotCopierPageQuery, WholeTable) {
    EXPECT_EQ(SnapshotCopier::page_query(orders(), {}, 100), kSelect + kOrder);
}

TEST(SnapshotCopierPageQuery, RangesBoundTheFirstKeyColumnHalfOpen) {
    const std::vector<std::string> none;
    KeyRange first;
    first.upper = "'m'::text";
    EXPECT_EQ(SnapshotCopier::page_query(orders(), none, 100, first),
              kSelect + R"( WHERE src."region" < 'm'::text)" + kOrder);
    KeyRange middle;
    middle.lower = "'m'::text";
    middle.upper = "'t'::text";
    EXPECT_EQ(SnapshotCopier::page_query(orders(), none, 100, middle),
              kSelect + R"( WHERE src."region" >= 'm'::text AND src."region" < 't'::text)" +
                  kOrder);
    KeyRange last;
    last.lower = "'t'::text";
    EXPECT_EQ(SnapshotCopier::page_query(orders(), none, 100, last),
              kSelect + R"( WHERE src."region" >= 't'::text)" + kOrder);
}

TEST(SnapshotCopierPageQuery, LaterPagesOfARangeContinueAfterTheLastKeyWithinTheFilter) {
    SourceTable st = orders();
    st.row_filter = "id > 0";
    KeyRange middle;
    middle.lower = "'m'::text";
    middle.upper = "'t'::text";
    const std::vector<std::string> after{"'p'::text", "42"};
    EXPECT_EQ(SnapshotCopier::page_query(st, after, 100, middle),
              kSelect +
                  R"( WHERE (id > 0) AND src."region" >= 'm'::text AND src."region" < 't'::text)"
                  R"( AND (src."region", src."id") > ('p'::text, 42))" +
                  kOrder);
}

TEST(SnapshotCopierRanges, SplitOnlyLargeTablesAndOnlyWithSeveralReaders) {
    EXPECT_EQ(SnapshotCopier::range_count(1000000, 1000000, 4), 1);  // not more than split_rows
    EXPECT_EQ(SnapshotCopier::range_count(5000000, 1000000, 1), 1);  // one reader: no gain
    EXPECT_EQ(SnapshotCopier::range_count(5000000, 0, 4), 1);        // splitting off
    EXPECT_EQ(SnapshotCopier::range_count(1000001, 1000000, 4), 4);  // at least one per reader
    EXPECT_EQ(SnapshotCopier::range_count(9500000, 1000000, 4), 10); // about split_rows each
    EXPECT_EQ(SnapshotCopier::range_count(std::int64_t(1) << 40, 1000, 4),
              SnapshotCopier::kMaxRanges);
}

} // namespace
} // namespace pgtide::replicate
