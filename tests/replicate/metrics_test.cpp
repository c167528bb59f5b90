// render_metrics: the Prometheus text of known counters, lag arithmetic, label escaping.
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "replicate/metrics.hpp"

namespace pgtide::replicate {
namespace {

bool has_line(const std::string& text, const std::string& line) {
    return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Metrics, RendersCountersGaugesAndTheirHeaders) {
    Metrics m;
    m.phase = Metrics::Phase::Streaming;
    m.epoch = 3;
    m.applied_transactions = 10;
    m.applied_changes = 30;
    m.rows_copied = 5;
    m.tables_copied = 1;
    m.snapshot_rows["public.t"] = 5;
    m.snapshot_rows["we\"ird\\s.t"] = 2;
    m.checkpoint_lsn = 1000;
    m.source_wal_end = 1500;
    const std::string text = render_metrics(m, std::chrono::system_clock::now());
    for (const char* line : {
             "# HELP pgtide_applied_changes_total Row changes (inserts, updates, deletes, "
             "truncates) applied and committed.",
             "# TYPE pgtide_applied_changes_total counter",
             "pgtide_applied_changes_total 30",
             "pgtide_applied_transactions_total 10",
             "pgtide_rows_copied_total 5",
             "pgtide_tables_copied_total 1",
             "pgtide_snapshot_rows_copied{table=\"public.t\"} 5",
             "pgtide_snapshot_rows_copied{table=\"we\\\"ird\\\\s.t\"} 2",
             "pgtide_epoch 3",
             "pgtide_phase{phase=\"streaming\"} 1",
             "pgtide_phase{phase=\"snapshot\"} 0",
             "pgtide_checkpoint_lsn_bytes 1000",
             "pgtide_source_wal_lsn_bytes 1500",
             "pgtide_replication_lag_bytes 500",
             "# TYPE pgtide_destination_commit_seconds histogram",
             "pgtide_destination_commit_seconds_count 0",
         }) {
        EXPECT_TRUE(has_line(text, line)) << line << "\n---\n" << text;
    }
    // Unknown until the stream applied a transaction.
    EXPECT_EQ(text.find("\npgtide_replication_lag_seconds "), std::string::npos) << text;
    EXPECT_EQ(text.find("\npgtide_last_error_timestamp_seconds "), std::string::npos) << text;
}

TEST(Metrics, LagInSecondsUsesThePostgresEpoch) {
    Metrics m;
    // 2024-01-01 00:00:00 UTC is 1704067200 Unix, 757382400 s after 2000-01-01.
    m.last_applied_commit_time = 757'382'400'000'000;
    const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1704067200) +
                                                           std::chrono::milliseconds(2500));
    const std::string text = render_metrics(m, now);
    EXPECT_TRUE(has_line(text, "pgtide_replication_lag_seconds 2.5")) << text;
    EXPECT_EQ(text.find("\npgtide_replication_lag_bytes "), std::string::npos) << text;
}

TEST(Metrics, HistogramBucketsAreCumulative) {
    Metrics m;
    m.commit_seconds.observe(0.001953125); // exact in binary, so is the sum
    m.commit_seconds.observe(0.25);
    m.commit_seconds.observe(20);
    const std::string text = render_metrics(m, std::chrono::system_clock::now());
    EXPECT_TRUE(has_line(text, "pgtide_destination_commit_seconds_bucket{le=\"0.001\"} 0"));
    EXPECT_TRUE(has_line(text, "pgtide_destination_commit_seconds_bucket{le=\"0.0025\"} 1"));
    EXPECT_TRUE(has_line(text, "pgtide_destination_commit_seconds_bucket{le=\"0.25\"} 2"));
    EXPECT_TRUE(has_line(text, "pgtide_destination_commit_seconds_bucket{le=\"5\"} 2"));
    EXPECT_TRUE(has_line(text, "pgtide_destination_commit_seconds_bucket{le=\"+Inf\"} 3"));
    EXPECT_TRUE(has_line(text, "pgtide_destination_commit_seconds_count 3"));
    EXPECT_TRUE(has_line(text, "pgtide_destination_commit_seconds_sum 20.251953125")) << text;
}

} // namespace
} // namespace pgtide::replicate
