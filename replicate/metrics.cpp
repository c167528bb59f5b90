// Metrics: Prometheus text exposition of the run's counters and gauges.
#include "replicate/metrics.hpp"

#include <algorithm>
#include <charconv>

namespace pgtide::replicate {

namespace {

// PostgreSQL's epoch (2000-01-01 00:00:00 UTC) in Unix microseconds.
constexpr std::int64_t kPgEpochUnixMicros = 946'684'800'000'000;

std::string number(double v) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return ec == std::errc() ? std::string(buf, end) : std::string("NaN");
}

std::string label_value(const std::string& v) {
    std::string out;
    for (const char c : v) {
        if (c == '\\' || c == '"') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else {
            out += c;
        }
    }
    return out;
}

const char* phase_name(Metrics::Phase p) {
    switch (p) {
    case Metrics::Phase::Starting:
        return "starting";
    case Metrics::Phase::Snapshot:
        return "snapshot";
    case Metrics::Phase::Streaming:
        return "streaming";
    case Metrics::Phase::Reconnecting:
        return "reconnecting";
    case Metrics::Phase::Stopping:
        return "stopping";
    }
    return "unknown";
}

class Writer {
public:
    void head(const char* name, const char* type, const char* help) {
        out_ += "# HELP pgtide_";
        out_ += name;
        out_ += ' ';
        out_ += help;
        out_ += "\n# TYPE pgtide_";
        out_ += name;
        out_ += ' ';
        out_ += type;
        out_ += '\n';
    }
    void sample(const std::string& name, const std::string& value) {
        out_ += "pgtide_" + name + ' ' + value + '\n';
    }
    void sample(const std::string& name, std::int64_t value) {
        sample(name, std::to_string(value));
    }
    void sample(const std::string& name, std::uint64_t value) {
        sample(name, std::to_string(value));
    }
    std::string take() { return std::move(out_); }

private:
    std::string out_;
};

} // namespace

void Histogram::observe(double seconds) {
    for (std::size_t i = 0; i < kBounds.size(); ++i) {
        if (seconds <= kBounds[i]) {
            ++buckets[i];
        }
    }
    ++count;
    sum += seconds;
}

std::string render_metrics(const Metrics& m, std::chrono::system_clock::time_point now) {
    Writer w;
    w.head("up", "gauge", "1 while pgtide run is running.");
    w.sample("up", std::int64_t(1));
    w.head("phase", "gauge", "The phase pgtide run is in (1 for the current one).");
    for (const auto p :
         {Metrics::Phase::Starting, Metrics::Phase::Snapshot, Metrics::Phase::Streaming,
          Metrics::Phase::Reconnecting, Metrics::Phase::Stopping}) {
        w.sample(std::string("phase{phase=\"") + phase_name(p) + "\"}",
                 std::int64_t(p == m.phase ? 1 : 0));
    }
    w.head("epoch", "gauge", "Snapshot epoch of the destination's checkpoint.");
    w.sample("epoch", m.epoch);

    w.head("applied_transactions_total", "counter",
           "Source transactions applied and committed to the destination.");
    w.sample("applied_transactions_total", m.applied_transactions);
    w.head("applied_changes_total", "counter",
           "Row changes (inserts, updates, deletes, truncates) applied and committed.");
    w.sample("applied_changes_total", m.applied_changes);

    w.head("rows_copied_total", "counter", "Rows copied by snapshots.");
    w.sample("rows_copied_total", m.rows_copied);
    w.head("tables_copied_total", "counter", "Tables whose snapshot copy finished.");
    w.sample("tables_copied_total", m.tables_copied);
    w.head("snapshot_rows_copied", "gauge", "Rows copied per table in the current epoch.");
    for (const auto& [table, rows] : m.snapshot_rows) {
        w.sample("snapshot_rows_copied{table=\"" + label_value(table) + "\"}", rows);
    }

    w.head("destination_commits_total", "counter", "Destination transactions committed.");
    w.sample("destination_commits_total", m.destination_commits);
    w.head("destination_commit_seconds", "histogram",
           "Duration of each destination commit (checkpoint CAS and COMMIT).");
    for (std::size_t i = 0; i < Histogram::kBounds.size(); ++i) {
        w.sample("destination_commit_seconds_bucket{le=\"" + number(Histogram::kBounds[i]) + "\"}",
                 m.commit_seconds.buckets[i]);
    }
    w.sample("destination_commit_seconds_bucket{le=\"+Inf\"}", m.commit_seconds.count);
    w.sample("destination_commit_seconds_sum", number(m.commit_seconds.sum));
    w.sample("destination_commit_seconds_count", m.commit_seconds.count);

    w.head("checkpoint_lsn_bytes", "gauge", "Durable checkpoint LSN, as a byte position.");
    w.sample("checkpoint_lsn_bytes", m.checkpoint_lsn);
    w.head("source_wal_lsn_bytes", "gauge",
           "Source WAL end last reported by the walsender, as a byte position.");
    if (m.source_wal_end != 0) {
        w.sample("source_wal_lsn_bytes", m.source_wal_end);
    }
    w.head("replication_lag_bytes", "gauge",
           "Source WAL end minus the durable checkpoint LSN, in bytes.");
    if (m.source_wal_end != 0) {
        w.sample("replication_lag_bytes", m.source_wal_end > m.checkpoint_lsn
                                              ? m.source_wal_end - m.checkpoint_lsn
                                              : std::uint64_t(0));
    }
    w.head("replication_lag_seconds", "gauge",
           "Now minus the source commit time of the last applied transaction.");
    if (m.last_applied_commit_time != 0) {
        const std::int64_t now_us =
            std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
        const std::int64_t lag_us =
            std::max<std::int64_t>(0, now_us - (m.last_applied_commit_time + kPgEpochUnixMicros));
        w.sample("replication_lag_seconds", number(double(lag_us) / 1e6));
    }

    w.head("reconnects_total", "counter", "Reconnects to the source after a lost connection.");
    w.sample("reconnects_total", m.reconnects);
    w.head("destination_reconnects_total", "counter",
           "Reconnects to a PostgreSQL destination after a lost connection.");
    w.sample("destination_reconnects_total", m.destination_reconnects);
    w.head("last_error_timestamp_seconds", "gauge",
           "Unix time of the last lost source or destination connection.");
    if (m.last_error_unix_s != 0) {
        w.sample("last_error_timestamp_seconds", m.last_error_unix_s);
    }

    w.head("streamed_transactions_total", "counter",
           "Large transactions the source streamed while in progress, by how they ended.");
    w.sample("streamed_transactions_total{outcome=\"committed\"}", m.streamed_committed);
    w.sample("streamed_transactions_total{outcome=\"aborted\"}", m.streamed_aborted);
    w.head("spooled_bytes_total", "counter",
           "Bytes of streamed transactions written to spool files.");
    w.sample("spooled_bytes_total", m.spooled_bytes);
    return w.take();
}

} // namespace pgtide::replicate
