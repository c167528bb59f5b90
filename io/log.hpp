// Log: one line per event on stderr, as text or JSON with stable field names.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pgtide::io {

enum class LogLevel { Debug, Info, Warn, Error };
enum class LogFormat { Text, Json };

/// A field of a log line: `table`, `lsn`, `epoch`, `error`, ...
using LogField = std::pair<std::string, std::string>;

/// Appends `s` as the inside of a JSON string (quotes not included): log lines and the
/// commands' --json output share it.
void append_json_string(std::string& out, std::string_view s);

/// Process-wide settings; set once by main before any work starts.
void set_log_options(LogLevel level, LogFormat format);
bool log_enabled(LogLevel level);

/// Writes one line: `level: message key=value ...` or one JSON object. Thread-safe (one
/// write(2) per line).
void log(LogLevel level, std::string_view message, const std::vector<LogField>& fields = {});

/// A live status block at the bottom of a terminal (the TTY progress display): replaces the
/// block drawn before; log lines are written above it and the block is redrawn under them.
/// Only for a terminal on stderr; an empty vector erases the block.
void set_status_lines(std::vector<std::string> lines);

inline void log_debug(std::string_view m, const std::vector<LogField>& f = {}) {
    log(LogLevel::Debug, m, f);
}
inline void log_info(std::string_view m, const std::vector<LogField>& f = {}) {
    log(LogLevel::Info, m, f);
}
inline void log_warn(std::string_view m, const std::vector<LogField>& f = {}) {
    log(LogLevel::Warn, m, f);
}
inline void log_error(std::string_view m, const std::vector<LogField>& f = {}) {
    log(LogLevel::Error, m, f);
}

} // namespace pgtide::io
