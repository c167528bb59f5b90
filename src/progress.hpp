// Progress on a terminal: per-table snapshot progress and a one-line stream status, redrawn in
// place under the log lines (io::set_status_lines). Without a terminal the applier's periodic
// log lines say the same.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "io/cancel.hpp"
#include "io/task.hpp"
#include "replicate/metrics.hpp"

namespace pgtide::app {

/// Turns successive samples of the run's metrics into status lines with rates and ETAs.
class ProgressView {
public:
    /// The lines for `m` at `now` (rates over the time since the previous call; none on the
    /// first). At most `max_tables` table lines, busiest first.
    std::vector<std::string> render(const replicate::Metrics& m,
                                    std::chrono::steady_clock::time_point now,
                                    std::size_t max_tables = 8);

private:
    struct Sample {
        std::chrono::steady_clock::time_point at;
        std::int64_t rows_copied = 0;
        std::int64_t changes = 0;
        std::map<std::string, std::int64_t> table_rows;
    };
    bool have_previous_ = false;
    bool rated_ = false; ///< the overall rates hold a first sample
    Sample previous_;
    double rows_per_s_ = 0;    ///< smoothed
    double changes_per_s_ = 0; ///< smoothed
    std::map<std::string, double> table_rates_;
};

/// "1,234,567".
std::string with_thousands(std::int64_t n);
/// "3s", "4m05s", "2h03m".
std::string short_duration(double seconds);

/// Redraws the status lines from `metrics` every half second, and within 0.1 s of a change of
/// phase or of the tables being copied, until `token` is cancelled; then erases them. Suspends.
io::Task<void> show_progress(const replicate::Metrics* metrics, io::CancelToken token);

} // namespace pgtide::app
