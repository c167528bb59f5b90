// Log lines on stderr.
#include "io/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include <ctime>
#include <unistd.h>

namespace pgtide::io {

namespace {

std::atomic<int> g_level{int(LogLevel::Info)};
std::atomic<int> g_format{int(LogFormat::Text)};

const char* level_name(LogLevel l) {
    switch (l) {
    case LogLevel::Debug:
        return "debug";
    case LogLevel::Info:
        return "info";
    case LogLevel::Warn:
        return "warn";
    case LogLevel::Error:
        return "error";
    }
    return "info";
}

std::string timestamp() {
    const auto now = std::chrono::system_clock::now();
    const auto t = std::chrono::system_clock::to_time_t(now);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms));
    return buf;
}

} // namespace

void append_json_string(std::string& out, std::string_view s) {
    for (unsigned char c : s) {
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += char(c);
            }
        }
    }
}

namespace {

std::mutex g_status_mutex;
std::vector<std::string> g_status; ///< drawn at the bottom of the terminal; guarded by the mutex

/// Moves to the first line of the drawn status block, erasing it (the cursor ends there).
std::string erase_status() {
    std::string out;
    if (!g_status.empty()) {
        out += "\r\x1b[2K";
        for (std::size_t i = 1; i < g_status.size(); ++i) {
            out += "\x1b[1A\x1b[2K";
        }
    }
    return out;
}

/// The status block, its last line left open (no newline) so that it can be redrawn in place.
std::string draw_status() {
    std::string out;
    for (std::size_t i = 0; i < g_status.size(); ++i) {
        if (i) {
            out += '\n';
        }
        out += g_status[i];
    }
    return out;
}

/// One write per line (with the status block erased before and redrawn after) keeps lines whole
/// when threads log at once.
void write_above_status(const std::string& line) {
    std::lock_guard<std::mutex> lock(g_status_mutex);
    if (g_status.empty()) {
        [[maybe_unused]] const auto n = ::write(2, line.data(), line.size());
        return;
    }
    std::string out = erase_status() + line + draw_status();
    [[maybe_unused]] const auto n = ::write(2, out.data(), out.size());
}

} // namespace

void set_log_options(LogLevel level, LogFormat format) {
    g_level = int(level);
    g_format = int(format);
}

bool log_enabled(LogLevel level) {
    return int(level) >= g_level.load();
}

void log(LogLevel level, std::string_view message, const std::vector<LogField>& fields) {
    if (!log_enabled(level)) {
        return;
    }
    std::string line;
    if (LogFormat(g_format.load()) == LogFormat::Json) {
        line =
            "{\"time\":\"" + timestamp() + "\",\"level\":\"" + level_name(level) + "\",\"msg\":\"";
        append_json_string(line, message);
        line += '"';
        for (const auto& [k, v] : fields) {
            line += ",\"";
            append_json_string(line, k);
            line += "\":\"";
            append_json_string(line, v);
            line += '"';
        }
        line += "}\n";
    } else {
        line = timestamp() + " " + level_name(level) + ": ";
        line += message;
        for (const auto& [k, v] : fields) {
            line += ' ';
            line += k;
            line += '=';
            const bool quote = v.find_first_of(" \t\"") != std::string::npos || v.empty();
            if (quote) {
                line += '"';
            }
            line += v;
            if (quote) {
                line += '"';
            }
        }
        line += '\n';
    }
    write_above_status(line);
}

void set_status_lines(std::vector<std::string> lines) {
    std::lock_guard<std::mutex> lock(g_status_mutex);
    std::string out = erase_status();
    g_status = std::move(lines);
    out += draw_status();
    [[maybe_unused]] const auto n = ::write(2, out.data(), out.size());
}

} // namespace pgtide::io
