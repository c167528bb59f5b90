// slot_lost_message: the exit-5 message for every way a slot can be lost.
#include <gtest/gtest.h>

#include "replicate/slot_info.hpp"

namespace pgtide::replicate {
namespace {

SlotInfo slot(std::string wal_status, std::string reason = "") {
    SlotInfo s;
    s.name = "s";
    s.slot_type = "logical";
    s.plugin = "pgoutput";
    s.database = "app";
    s.wal_status = std::move(wal_status);
    s.invalidation_reason = std::move(reason);
    return s;
}

bool contains(const std::optional<std::string>& text, const std::string& needle) {
    return text && text->find(needle) != std::string::npos;
}

TEST(SlotLostMessage, AHealthySlotIsNotLost) {
    EXPECT_EQ(slot_lost_message("s", slot("reserved")), std::nullopt);
    EXPECT_EQ(slot_lost_message("s", slot("extended")), std::nullopt);
    EXPECT_EQ(slot_lost_message("s", slot("unreserved")), std::nullopt);
    EXPECT_EQ(slot_lost_message("s", slot("")), std::nullopt);
}

TEST(SlotLostMessage, AMissingSlotSaysHowToResnapshot) {
    const auto m = slot_lost_message("pgtide_app", std::nullopt);
    EXPECT_TRUE(contains(m, "replication slot pgtide_app no longer exists")) << *m;
    EXPECT_TRUE(contains(m, "failover")) << *m;
    EXPECT_TRUE(contains(m, "`pgtide run --resnapshot`")) << *m;
}

TEST(SlotLostMessage, RemovedWalNamesMaxSlotWalKeepSizeAndItsValue) {
    // PostgreSQL 15 and 16: wal_status alone.
    const auto m15 = slot_lost_message("s", slot("lost"), "1MB");
    EXPECT_TRUE(contains(m15, "max_slot_wal_keep_size (1MB)")) << *m15;
    EXPECT_TRUE(contains(m15, "wal_status = lost")) << *m15;
    EXPECT_TRUE(contains(m15, "`pgtide run --resnapshot`")) << *m15;
    // PostgreSQL 17+: the reason too.
    const auto m18 = slot_lost_message("s", slot("lost", "wal_removed"), "");
    EXPECT_TRUE(contains(m18, "max_slot_wal_keep_size allows")) << *m18;
    EXPECT_TRUE(contains(m18, "invalidation_reason = wal_removed")) << *m18;
}

TEST(SlotLostMessage, OtherReasonsAreNamed) {
    const auto idle = slot_lost_message("s", slot("lost", "idle_timeout"));
    EXPECT_TRUE(contains(idle, "idle_replication_slot_timeout")) << *idle;
    EXPECT_FALSE(contains(idle, "max_slot_wal_keep_size")) << *idle;
    const auto conflict = slot_lost_message("s", slot("reserved", "rows_removed"));
    EXPECT_TRUE(contains(conflict, "conflict with recovery on a standby")) << *conflict;
    EXPECT_TRUE(contains(conflict, "`pgtide run --resnapshot`")) << *conflict;
}

} // namespace
} // namespace pgtide::replicate
