// ProgressView: the status lines of the TTY progress display, from metrics samples.
#include <gtest/gtest.h>

#include "src/progress.hpp"

namespace pgtide::app {
namespace {

using namespace std::chrono_literals;
using replicate::Metrics;

TEST(Progress, NumbersAndDurationsReadEasily) {
    EXPECT_EQ(with_thousands(0), "0");
    EXPECT_EQ(with_thousands(999), "999");
    EXPECT_EQ(with_thousands(1000), "1,000");
    EXPECT_EQ(with_thousands(1234567), "1,234,567");
    EXPECT_EQ(with_thousands(-45000), "-45,000");
    EXPECT_EQ(short_duration(3.2), "3s");
    EXPECT_EQ(short_duration(245), "4m05s");
    EXPECT_EQ(short_duration(7380), "2h03m");
}

TEST(Progress, SnapshotShowsEachTableWithRateEstimateAndEta) {
    Metrics m;
    m.phase = Metrics::Phase::Snapshot;
    m.epoch = 2;
    m.snapshot_rows = {{"public.big", 0}, {"public.small", 0}, {"public.done", 0}};
    m.snapshot_estimates = {{"public.big", 1000000}, {"public.small", 0}, {"public.done", 10}};
    ProgressView view;
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    view.render(m, t0);
    m.snapshot_rows = {{"public.big", 200000}, {"public.small", 5000}, {"public.done", 10}};
    m.snapshot_done = {"public.done"};
    m.rows_copied = 205010;
    const auto lines = view.render(m, t0 + 2s);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[0], "pgtide: snapshot (epoch 2): 1/3 tables copied, 205,010 rows, "
                        "102,505 rows/s");
    // 200,000 rows in 2 s of ~1,000,000: 20 %, 100,000 rows/s, 8 s to go.
    EXPECT_EQ(lines[1], "  public.big  200,000 / ~1,000,000 rows (20%)  100,000 rows/s  ETA 8s");
    // No estimate (reltuples 0): no percentage, no ETA.
    EXPECT_EQ(lines[2], "  public.small  5,000 rows  2,500 rows/s");
}

TEST(Progress, TooManyTablesAreSummarized) {
    Metrics m;
    m.phase = Metrics::Phase::Snapshot;
    for (int i = 0; i < 5; ++i) {
        m.snapshot_rows["public.t" + std::to_string(i)] = i;
    }
    ProgressView view;
    const auto lines = view.render(m, std::chrono::steady_clock::now(), 2);
    ASSERT_EQ(lines.size(), 4u);
    EXPECT_EQ(lines[3], "  … and 3 more tables");
}

TEST(Progress, StreamingShowsLagAndChangeRate) {
    Metrics m;
    m.phase = Metrics::Phase::Streaming;
    m.checkpoint_lsn = 1000;
    m.source_wal_end = 1000 + 3 * 1024 * 1024;
    ProgressView view;
    const auto t0 = std::chrono::steady_clock::now();
    view.render(m, t0);
    m.applied_changes = 50000;
    m.applied_transactions = 500;
    const auto lines = view.render(m, t0 + 10s);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(
        lines[0],
        "pgtide: streaming, lag 3.0 MiB, 5,000 changes/s, 50,000 changes in 500 transactions");
}

} // namespace
} // namespace pgtide::app
