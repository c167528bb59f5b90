// ProgressView and the progress display coroutine.
#include "src/progress.hpp"

#include <algorithm>
#include <cstdio>

#include "io/log.hpp"
#include "io/timer.hpp"

namespace pgtide::app {

namespace {

/// Exponential smoothing of a rate, so that one slow commit does not make the ETA jump.
double smooth(double previous, double sample, bool first) {
    return first ? sample : 0.7 * previous + 0.3 * sample;
}

std::string bytes_text(double bytes) {
    char buf[32];
    if (bytes < 1024) {
        std::snprintf(buf, sizeof buf, "%.0f B", bytes);
    } else if (bytes < 1024.0 * 1024) {
        std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024);
    } else if (bytes < 1024.0 * 1024 * 1024) {
        std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1024 / 1024);
    } else {
        std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / 1024 / 1024 / 1024);
    }
    return buf;
}

} // namespace

std::string with_thousands(std::int64_t n) {
    std::string digits = std::to_string(n < 0 ? -n : n);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) {
            out += ',';
        }
        out += digits[i];
    }
    return n < 0 ? "-" + out : out;
}

std::string short_duration(double seconds) {
    const auto s = std::int64_t(seconds + 0.5);
    char buf[32];
    if (s < 60) {
        std::snprintf(buf, sizeof buf, "%llds", (long long)s);
    } else if (s < 3600) {
        std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
    } else {
        std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(s / 3600),
                      (long long)(s % 3600 / 60));
    }
    return buf;
}

std::vector<std::string> ProgressView::render(const replicate::Metrics& m,
                                              std::chrono::steady_clock::time_point now,
                                              std::size_t max_tables) {
    using Phase = replicate::Metrics::Phase;
    const double dt =
        have_previous_ ? std::chrono::duration<double>(now - previous_.at).count() : 0;
    if (dt > 0) {
        rows_per_s_ =
            smooth(rows_per_s_, double(m.rows_copied - previous_.rows_copied) / dt, !rated_);
        changes_per_s_ =
            smooth(changes_per_s_, double(m.applied_changes - previous_.changes) / dt, !rated_);
        rated_ = true;
        for (const auto& [table, rows] : m.snapshot_rows) {
            const auto before = previous_.table_rows.find(table);
            const std::int64_t was = before == previous_.table_rows.end() ? 0 : before->second;
            const auto known = table_rates_.find(table);
            table_rates_[table] = smooth(known == table_rates_.end() ? 0 : known->second,
                                         double(rows - was) / dt, known == table_rates_.end());
        }
    }
    have_previous_ = true;
    previous_ = Sample{now, m.rows_copied, m.applied_changes, m.snapshot_rows};

    std::vector<std::string> lines;
    char buf[256];
    switch (m.phase) {
    case Phase::Starting:
        lines.push_back("pgtide: starting");
        break;
    case Phase::Snapshot: {
        std::snprintf(buf, sizeof buf,
                      "pgtide: snapshot (epoch %lld): %zu/%zu tables copied, %s rows, %s rows/s",
                      (long long)m.epoch, m.snapshot_done.size(), m.snapshot_rows.size(),
                      with_thousands(m.rows_copied).c_str(),
                      with_thousands(std::int64_t(rows_per_s_)).c_str());
        lines.push_back(buf);
        // Tables being copied, busiest first.
        std::vector<std::pair<double, std::string>> active;
        for (const auto& [table, rows] : m.snapshot_rows) {
            if (!m.snapshot_done.count(table)) {
                const auto rate = table_rates_.find(table);
                active.emplace_back(rate == table_rates_.end() ? 0 : rate->second, table);
            }
        }
        std::stable_sort(active.begin(), active.end(),
                         [](const auto& a, const auto& b) { return a.first > b.first; });
        for (std::size_t i = 0; i < active.size() && i < max_tables; ++i) {
            const std::string& table = active[i].second;
            const std::int64_t rows = m.snapshot_rows.at(table);
            const auto est = m.snapshot_estimates.find(table);
            const std::int64_t estimate = est == m.snapshot_estimates.end() ? 0 : est->second;
            std::string line = "  " + table + "  " + with_thousands(rows);
            if (estimate > 0) {
                const double fraction = std::min(1.0, double(rows) / double(estimate));
                std::snprintf(buf, sizeof buf, " / ~%s rows (%.0f%%)",
                              with_thousands(estimate).c_str(), fraction * 100);
                line += buf;
            } else {
                line += " rows";
            }
            line += "  " + with_thousands(std::int64_t(active[i].first)) + " rows/s";
            if (estimate > rows && active[i].first > 0) {
                line += "  ETA " + short_duration(double(estimate - rows) / active[i].first);
            }
            lines.push_back(line);
        }
        if (active.size() > max_tables) {
            lines.push_back("  … and " + std::to_string(active.size() - max_tables) +
                            " more tables");
        }
        break;
    }
    case Phase::Streaming: {
        std::string lag = "lag ?";
        if (m.source_wal_end != 0) {
            const double behind = m.source_wal_end > m.checkpoint_lsn
                                      ? double(m.source_wal_end - m.checkpoint_lsn)
                                      : 0.0;
            lag = "lag " + bytes_text(behind);
        }
        std::snprintf(buf, sizeof buf,
                      "pgtide: streaming, %s, %s changes/s, %s changes in %s transactions",
                      lag.c_str(), with_thousands(std::int64_t(changes_per_s_)).c_str(),
                      with_thousands(m.applied_changes).c_str(),
                      with_thousands(m.applied_transactions).c_str());
        lines.push_back(buf);
        break;
    }
    case Phase::Reconnecting:
        lines.push_back("pgtide: reconnecting (" + std::to_string(m.reconnects) +
                        " to the source, " + std::to_string(m.destination_reconnects) +
                        " to the destination so far)");
        break;
    case Phase::Stopping:
        lines.push_back("pgtide: stopping");
        break;
    }
    return lines;
}

io::Task<void> show_progress(const replicate::Metrics* metrics, io::CancelToken token) {
    // Redrawn every half second, and within a tenth of one when the phase or the set of tables
    // being copied changes: a short copy still shows, and a phase never lingers on screen.
    using Clock = std::chrono::steady_clock;
    ProgressView view;
    try {
        Clock::time_point drawn_at{};
        auto drawn_phase = metrics->phase;
        std::size_t drawn_tables = 0;
        for (;;) {
            const auto now = Clock::now();
            if (now - drawn_at >= std::chrono::milliseconds(500) || metrics->phase != drawn_phase ||
                metrics->snapshot_rows.size() != drawn_tables) {
                io::set_status_lines(view.render(*metrics, now));
                drawn_at = now;
                drawn_phase = metrics->phase;
                drawn_tables = metrics->snapshot_rows.size();
            }
            co_await io::sleep_for(std::chrono::milliseconds(100), token);
        }
    } catch (const io::Cancelled&) {
    }
    std::vector<std::string> none;
    io::set_status_lines(std::move(none));
}

} // namespace pgtide::app
