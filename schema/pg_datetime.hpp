// PostgreSQL date/time values ↔ pgtide's canonical text (DESIGN §5): the internal integers of
// the binary send formats, and parsers for the ISO text output that lead to the same integers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pgtide::schema::datetime {

constexpr std::int64_t kUsecsPerSec = 1000000;
constexpr std::int64_t kUsecsPerDay = 86400 * kUsecsPerSec;

/// `YYYY-MM-DD[ BC]` (year at least 4 digits), `infinity`, `-infinity` for days since
/// 2000-01-01. Throws DecodeError("date", 0, ...) outside PostgreSQL's date range.
std::string format_date(std::int32_t days);

/// `HH:MM:SS[.ffffff]` (fraction without trailing zeros) for µs since midnight, 0..24:00:00.
/// Throws DecodeError("time", 0, ...) outside that range.
std::string format_time(std::int64_t usecs);

/// format_time plus the zone as PostgreSQL prints it (`+05:30`, `-08`, `+01:02:03`); the zone
/// is in seconds west of UTC, as timetz stores it. Throws DecodeError("timetz", 0, ...).
std::string format_timetz(std::int64_t usecs, std::int32_t zone_west);

/// `YYYY-MM-DDTHH:MM:SS[.ffffff][ BC]` for µs since 2000-01-01 (timestamp), or with `Z` before
/// the era for timestamptz (UTC); `infinity` / `-infinity`. Throws DecodeError out of range.
std::string format_timestamp(std::int64_t usecs, bool with_zone);

/// ISO 8601 as PostgreSQL prints it under IntervalStyle=iso_8601 (`P1Y2M3DT4H5M6.5S`, `PT0S`,
/// `P-1Y-2M3DT-4H`); PostgreSQL 17's infinite intervals as `infinity` / `-infinity`.
std::string format_interval(std::int64_t usecs, std::int32_t days, std::int32_t months);

struct Timetz {
    std::int64_t usecs;
    std::int32_t zone_west;
};

struct Interval {
    std::int64_t usecs;
    std::int32_t days;
    std::int32_t months;
};

/// Parsers of PostgreSQL's text output (DateStyle=ISO; any zone offset; IntervalStyle=iso_8601)
/// into the binary format's integers. Throw DecodeError naming the type and the text offset.
std::int32_t parse_date(std::string_view text);
std::int64_t parse_time(std::string_view text);
Timetz parse_timetz(std::string_view text);
std::int64_t parse_timestamp(std::string_view text, bool with_zone);
Interval parse_interval(std::string_view text);

} // namespace pgtide::schema::datetime
