// Date/time formatting and parsing, following PostgreSQL's datetime.c (EncodeDateTime,
// EncodeInterval, AppendSeconds) with proleptic Gregorian arithmetic (year 0 = 1 BC).
#include "schema/pg_datetime.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "schema/decode_error.hpp"

namespace pgtide::schema::datetime {

namespace {

constexpr std::int64_t kUsecsPerMinute = 60 * kUsecsPerSec;
constexpr std::int64_t kUsecsPerHour = 60 * kUsecsPerMinute;
constexpr std::int64_t kEpochDaysFrom1970 = 10957; // 2000-01-01 - 1970-01-01

// PostgreSQL's ranges: Julian day 0 (4714-11-24 BC) up to, excluding, 5874898-01-01 for dates
// and 294277-01-01 for timestamps (datatype/timestamp.h).
constexpr std::int64_t kMinDate = -2451545;
constexpr std::int64_t kEndDate = 2147483494 - 2451545;
constexpr std::int64_t kMinTimestamp = -211813488000000000;
constexpr std::int64_t kEndTimestamp = 9223371331200000000;
constexpr std::int32_t kTzLimit = 16 * 3600; // TZDISP_LIMIT

struct Civil {
    std::int64_t year; // astronomical: 0 is 1 BC
    int month;
    int day;
};

constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    const std::int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Howard Hinnant's civil_from_days / days_from_civil, days relative to 1970-01-01.
Civil civil_from_days(std::int64_t z) {
    z += 719468;
    const std::int64_t era = floor_div(z, 146097);
    const std::int64_t doe = z - era * 146097;
    const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const std::int64_t mp = (5 * doy + 2) / 153;
    const int day = int(doy - (153 * mp + 2) / 5 + 1);
    const int month = int(mp < 10 ? mp + 3 : mp - 9);
    return Civil{yoe + era * 400 + (month <= 2 ? 1 : 0), month, day};
}

constexpr std::int64_t days_from_civil(std::int64_t y, int m, int d) {
    y -= m <= 2 ? 1 : 0;
    const std::int64_t era = floor_div(y, 400);
    const std::int64_t yoe = y - era * 400;
    const std::int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

bool leap_year(std::int64_t y) {
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int days_in_month(std::int64_t y, int m) {
    static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && leap_year(y) ? 29 : kDays[m - 1];
}

void append_padded(std::string& out, std::uint64_t v, int width) {
    char buf[24];
    int start = int(sizeof buf);
    do {
        buf[--start] = char('0' + v % 10);
        v /= 10;
    } while (v > 0);
    const int digits = int(sizeof buf) - start;
    if (digits < width) {
        out.append(std::size_t(width - digits), '0');
    }
    out.append(buf + start, std::size_t(digits));
}

void append_int(std::string& out, std::int64_t v) {
    if (v < 0) {
        out += '-';
        append_padded(out, std::uint64_t(0) - std::uint64_t(v), 1);
    } else {
        append_padded(out, std::uint64_t(v), 1);
    }
}

// ".ffffff" without trailing zeros; nothing for 0.
void append_fraction(std::string& out, std::int64_t fsec) {
    if (fsec == 0) {
        return;
    }
    char digits[6];
    for (int i = 5; i >= 0; --i) {
        digits[i] = char('0' + fsec % 10);
        fsec /= 10;
    }
    int n = 6;
    while (digits[n - 1] == '0') {
        --n;
    }
    out += '.';
    out.append(digits, std::size_t(n));
}

// Year part of a date: at least 4 digits, BC years counted from 1.
void append_year(std::string& out, std::int64_t year) {
    append_padded(out, std::uint64_t(year > 0 ? year : 1 - year), 4);
}

void append_date_fields(std::string& out, const Civil& c) {
    append_year(out, c.year);
    out += '-';
    append_padded(out, std::uint64_t(c.month), 2);
    out += '-';
    append_padded(out, std::uint64_t(c.day), 2);
}

void append_time_fields(std::string& out, std::int64_t usecs) {
    const std::int64_t hour = usecs / kUsecsPerHour;
    usecs -= hour * kUsecsPerHour;
    const std::int64_t minute = usecs / kUsecsPerMinute;
    usecs -= minute * kUsecsPerMinute;
    const std::int64_t sec = usecs / kUsecsPerSec;
    append_padded(out, std::uint64_t(hour), 2);
    out += ':';
    append_padded(out, std::uint64_t(minute), 2);
    out += ':';
    append_padded(out, std::uint64_t(sec), 2);
    append_fraction(out, usecs - sec * kUsecsPerSec);
}

// EncodeTimezone: the sign is east of UTC; minutes and seconds only when needed.
void append_zone(std::string& out, std::int32_t zone_west) {
    std::int32_t sec = zone_west < 0 ? -zone_west : zone_west;
    std::int32_t minute = sec / 60;
    sec -= minute * 60;
    const std::int32_t hour = minute / 60;
    minute -= hour * 60;
    out += zone_west <= 0 ? '+' : '-';
    append_padded(out, std::uint64_t(hour), 2);
    if (sec != 0 || minute != 0) {
        out += ':';
        append_padded(out, std::uint64_t(minute), 2);
    }
    if (sec != 0) {
        out += ':';
        append_padded(out, std::uint64_t(sec), 2);
    }
}

void append_iso_part(std::string& out, std::int64_t value, char unit) {
    if (value != 0) {
        append_int(out, value);
        out += unit;
    }
}

// A cursor over text output, with errors naming the type and the offset.
class TextCursor {
public:
    TextCursor(std::string_view text, const char* type) : text_(text), type_(type) {}

    bool done() const { return pos_ == text_.size(); }
    std::size_t pos() const { return pos_; }
    char peek() const { return done() ? '\0' : text_[pos_]; }
    bool accept(char c) {
        if (peek() == c && !done()) {
            ++pos_;
            return true;
        }
        return false;
    }
    bool accept(std::string_view s) {
        if (text_.substr(pos_, s.size()) == s) {
            pos_ += s.size();
            return true;
        }
        return false;
    }
    void expect(char c) {
        if (!accept(c)) {
            fail(std::string("expected '") + c + "'");
        }
    }
    /// Unsigned decimal of `min`..`max` digits (max 18).
    std::int64_t digits(int min_digits, int max_digits) {
        std::int64_t v = 0;
        int n = 0;
        while (n < max_digits && !done() && peek() >= '0' && peek() <= '9') {
            v = v * 10 + (peek() - '0');
            ++pos_;
            ++n;
        }
        if (n < min_digits) {
            fail("expected digits");
        }
        return v;
    }
    void expect_end() {
        if (!done()) {
            fail("unexpected trailing text");
        }
    }
    [[noreturn]] void fail(std::string_view detail) const {
        throw DecodeError(type_, pos_, detail);
    }
    [[noreturn]] void fail_at(std::size_t at, std::string_view detail) const {
        throw DecodeError(type_, at, detail);
    }

private:
    std::string_view text_;
    const char* type_;
    std::size_t pos_ = 0;
};

// YYYY-MM-DD (without era): days since 1970 are computed once the era is known.
struct DateFields {
    std::int64_t year;
    int month;
    int day;
    std::size_t at;
};

DateFields read_date_fields(TextCursor& c) {
    const std::size_t at = c.pos();
    const std::int64_t year = c.digits(1, 9);
    c.expect('-');
    const int month = int(c.digits(2, 2));
    c.expect('-');
    const int day = int(c.digits(2, 2));
    return DateFields{year, month, day, at};
}

std::int64_t days_of(const TextCursor& c, const DateFields& f, bool bc) {
    if (bc && f.year == 0) {
        c.fail_at(f.at, "year 0 BC does not exist");
    }
    const std::int64_t year = bc ? 1 - f.year : f.year;
    if (f.month < 1 || f.month > 12 || f.day < 1 || f.day > days_in_month(year, f.month)) {
        c.fail_at(f.at, "impossible date");
    }
    return days_from_civil(year, f.month, f.day) - kEpochDaysFrom1970;
}

// HH:MM:SS[.f{1,6}] → µs since midnight (≤ 24:00:00).
std::int64_t read_time(TextCursor& c) {
    const std::size_t at = c.pos();
    const std::int64_t hour = c.digits(2, 2);
    c.expect(':');
    const std::int64_t minute = c.digits(2, 2);
    c.expect(':');
    const std::int64_t sec = c.digits(2, 2);
    std::int64_t fsec = 0;
    if (c.accept('.')) {
        const std::size_t start = c.pos();
        fsec = c.digits(1, 6);
        for (std::size_t n = c.pos() - start; n < 6; ++n) {
            fsec *= 10;
        }
    }
    const std::int64_t usecs =
        hour * kUsecsPerHour + minute * kUsecsPerMinute + sec * kUsecsPerSec + fsec;
    if (minute > 59 || sec > 59 || usecs > kUsecsPerDay) {
        c.fail_at(at, "time out of range");
    }
    return usecs;
}

// [+-]HH[:MM[:SS]] → seconds west of UTC.
std::int32_t read_zone(TextCursor& c) {
    const std::size_t at = c.pos();
    bool east = true;
    if (c.accept('-')) {
        east = false;
    } else {
        c.expect('+');
    }
    std::int64_t sec = c.digits(2, 2) * 3600;
    if (c.accept(':')) {
        sec += c.digits(2, 2) * 60;
        if (c.accept(':')) {
            sec += c.digits(2, 2);
        }
    }
    if (sec >= kTzLimit) {
        c.fail_at(at, "time zone offset out of range");
    }
    return std::int32_t(east ? -sec : sec);
}

// ---- the timestamp fast path ---------------------------------------------------------------
// Nearly every timestamp a table holds lies in years 1..9999: four-digit years, no era suffix.
// Those are written into a stack buffer with 32-bit calendar arithmetic and a digit-pair table,
// then copied into the string once; the general path above handles everything else. Both give
// the same text (tests/schema pins it).

// µs since 2000-01-01 of 0001-01-01T00:00:00 and of 10000-01-01T00:00:00.
constexpr std::int64_t kFastMinUsecs =
    (days_from_civil(1, 1, 1) - kEpochDaysFrom1970) * kUsecsPerDay;
constexpr std::int64_t kFastEndUsecs =
    (days_from_civil(10000, 1, 1) - kEpochDaysFrom1970) * kUsecsPerDay;
// Days from 0000-03-01 (the start of Hinnant's shifted year) to 0001-01-01.
constexpr std::uint32_t kMarchZeroToYearOne = 306;

constexpr std::array<char, 200> kDigitPairs = [] {
    std::array<char, 200> pairs{};
    for (int i = 0; i < 100; ++i) {
        pairs[std::size_t(2 * i)] = char('0' + i / 10);
        pairs[std::size_t(2 * i + 1)] = char('0' + i % 10);
    }
    return pairs;
}();

// Two digits of v < 100.
char* put_two(char* p, std::uint32_t v) {
    std::memcpy(p, &kDigitPairs[2 * v], 2);
    return p + 2;
}

// `YYYY-MM-DDTHH:MM:SS[.ffffff][Z]` for kFastMinUsecs <= usecs < kFastEndUsecs; returns the
// end of the text written to `out` (at least 28 bytes).
char* put_timestamp_ad(char* out, std::int64_t usecs, bool with_zone) {
    const auto since = std::uint64_t(usecs - kFastMinUsecs);
    const auto days = std::uint32_t(since / std::uint64_t(kUsecsPerDay));
    const std::uint64_t time_of_day = since - std::uint64_t(days) * std::uint64_t(kUsecsPerDay);
    const auto secs = std::uint32_t(time_of_day / std::uint64_t(kUsecsPerSec));
    const auto fsec =
        std::uint32_t(time_of_day - std::uint64_t(secs) * std::uint64_t(kUsecsPerSec));

    // civil_from_days, unsigned: every value here is non-negative and fits 32 bits.
    const std::uint32_t z = days + kMarchZeroToYearOne;
    const std::uint32_t era = z / 146097;
    const std::uint32_t doe = z - era * 146097;
    const std::uint32_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const std::uint32_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const std::uint32_t mp = (5 * doy + 2) / 153;
    const std::uint32_t day = doy - (153 * mp + 2) / 5 + 1;
    const std::uint32_t month = mp < 10 ? mp + 3 : mp - 9;
    const std::uint32_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);

    const std::uint32_t hour = secs / 3600;
    const std::uint32_t minute = secs / 60 - hour * 60;
    const std::uint32_t second = secs - (secs / 60) * 60;

    char* p = put_two(out, year / 100);
    p = put_two(p, year % 100);
    *p++ = '-';
    p = put_two(p, month);
    *p++ = '-';
    p = put_two(p, day);
    *p++ = 'T';
    p = put_two(p, hour);
    *p++ = ':';
    p = put_two(p, minute);
    *p++ = ':';
    p = put_two(p, second);
    if (fsec != 0) {
        *p++ = '.';
        p = put_two(p, fsec / 10000);
        p = put_two(p, fsec / 100 % 100);
        p = put_two(p, fsec % 100);
        while (p[-1] == '0') { // stops at a non-zero digit: fsec != 0
            --p;
        }
    }
    if (with_zone) {
        *p++ = 'Z';
    }
    return p;
}

[[noreturn]] void out_of_range(const char* type) {
    throw DecodeError(type, 0, "value out of range");
}

} // namespace

std::string format_date(std::int32_t days) {
    if (days == std::numeric_limits<std::int32_t>::max()) {
        return "infinity";
    }
    if (days == std::numeric_limits<std::int32_t>::min()) {
        return "-infinity";
    }
    if (days < kMinDate || days >= kEndDate) {
        out_of_range("date");
    }
    const Civil c = civil_from_days(std::int64_t(days) + kEpochDaysFrom1970);
    std::string out;
    append_date_fields(out, c);
    if (c.year <= 0) {
        out += " BC";
    }
    return out;
}

std::string format_time(std::int64_t usecs) {
    if (usecs < 0 || usecs > kUsecsPerDay) {
        out_of_range("time");
    }
    std::string out;
    append_time_fields(out, usecs);
    return out;
}

std::string format_timetz(std::int64_t usecs, std::int32_t zone_west) {
    if (usecs < 0 || usecs > kUsecsPerDay || zone_west <= -kTzLimit || zone_west >= kTzLimit) {
        out_of_range("timetz");
    }
    std::string out;
    append_time_fields(out, usecs);
    append_zone(out, zone_west);
    return out;
}

std::string format_timestamp(std::int64_t usecs, bool with_zone) {
    if (usecs >= kFastMinUsecs && usecs < kFastEndUsecs) {
        char buf[32];
        const char* end = put_timestamp_ad(buf, usecs, with_zone);
        return std::string(buf, std::size_t(end - buf));
    }
    if (usecs == std::numeric_limits<std::int64_t>::max()) {
        return "infinity";
    }
    if (usecs == std::numeric_limits<std::int64_t>::min()) {
        return "-infinity";
    }
    if (usecs < kMinTimestamp || usecs >= kEndTimestamp) {
        out_of_range(with_zone ? "timestamptz" : "timestamp");
    }
    const std::int64_t days = floor_div(usecs, kUsecsPerDay);
    const Civil c = civil_from_days(days + kEpochDaysFrom1970);
    std::string out;
    out.reserve(32); // one allocation: YYYY-MM-DDTHH:MM:SS.ffffffZ
    append_date_fields(out, c);
    out += 'T';
    append_time_fields(out, usecs - days * kUsecsPerDay);
    if (with_zone) {
        out += 'Z';
    }
    if (c.year <= 0) {
        out += " BC";
    }
    return out;
}

std::string format_interval(std::int64_t usecs, std::int32_t days, std::int32_t months) {
    using L64 = std::numeric_limits<std::int64_t>;
    using L32 = std::numeric_limits<std::int32_t>;
    if (usecs == L64::max() && days == L32::max() && months == L32::max()) {
        return "infinity";
    }
    if (usecs == L64::min() && days == L32::min() && months == L32::min()) {
        return "-infinity";
    }
    const std::int64_t year = months / 12;
    const std::int64_t mon = months % 12;
    const std::int64_t hour = usecs / kUsecsPerHour;
    std::int64_t rest = usecs - hour * kUsecsPerHour;
    const std::int64_t minute = rest / kUsecsPerMinute;
    rest -= minute * kUsecsPerMinute;
    const std::int64_t sec = rest / kUsecsPerSec;
    const std::int64_t fsec = rest - sec * kUsecsPerSec;
    if (year == 0 && mon == 0 && days == 0 && hour == 0 && minute == 0 && sec == 0 && fsec == 0) {
        return "PT0S";
    }
    std::string out = "P";
    append_iso_part(out, year, 'Y');
    append_iso_part(out, mon, 'M');
    append_iso_part(out, days, 'D');
    if (hour != 0 || minute != 0 || sec != 0 || fsec != 0) {
        out += 'T';
    }
    append_iso_part(out, hour, 'H');
    append_iso_part(out, minute, 'M');
    if (sec != 0 || fsec != 0) {
        if (sec < 0 || fsec < 0) {
            out += '-';
        }
        append_padded(out, std::uint64_t(sec < 0 ? -sec : sec), 1);
        append_fraction(out, fsec < 0 ? -fsec : fsec);
        out += 'S';
    }
    return out;
}

std::int32_t parse_date(std::string_view text) {
    if (text == "infinity") {
        return std::numeric_limits<std::int32_t>::max();
    }
    if (text == "-infinity") {
        return std::numeric_limits<std::int32_t>::min();
    }
    TextCursor c(text, "date");
    const DateFields f = read_date_fields(c);
    const bool bc = c.accept(" BC");
    c.expect_end();
    const std::int64_t days = days_of(c, f, bc);
    if (days < kMinDate || days >= kEndDate) {
        c.fail_at(f.at, "date out of range");
    }
    return std::int32_t(days);
}

std::int64_t parse_time(std::string_view text) {
    TextCursor c(text, "time");
    const std::int64_t usecs = read_time(c);
    c.expect_end();
    return usecs;
}

Timetz parse_timetz(std::string_view text) {
    TextCursor c(text, "timetz");
    const std::int64_t usecs = read_time(c);
    const std::int32_t zone = read_zone(c);
    c.expect_end();
    return Timetz{usecs, zone};
}

std::int64_t parse_timestamp(std::string_view text, bool with_zone) {
    if (text == "infinity") {
        return std::numeric_limits<std::int64_t>::max();
    }
    if (text == "-infinity") {
        return std::numeric_limits<std::int64_t>::min();
    }
    TextCursor c(text, with_zone ? "timestamptz" : "timestamp");
    const DateFields f = read_date_fields(c);
    if (!c.accept(' ')) {
        c.expect('T');
    }
    const std::int64_t time = read_time(c);
    std::int32_t zone_west = 0;
    if (with_zone) {
        if (!c.accept('Z')) {
            zone_west = read_zone(c);
        }
    }
    const bool bc = c.accept(" BC");
    c.expect_end();
    const std::int64_t days = days_of(c, f, bc);
    // The day first, so the µs below cannot overflow; a zone moves it by less than a day.
    if (days < kMinTimestamp / kUsecsPerDay - 1 || days > kEndTimestamp / kUsecsPerDay + 1) {
        c.fail_at(f.at, "timestamp out of range");
    }
    const std::int64_t usecs = days * kUsecsPerDay + time + std::int64_t(zone_west) * kUsecsPerSec;
    if (usecs < kMinTimestamp || usecs >= kEndTimestamp) {
        c.fail_at(f.at, "timestamp out of range");
    }
    return usecs;
}

Interval parse_interval(std::string_view text) {
    using L64 = std::numeric_limits<std::int64_t>;
    using L32 = std::numeric_limits<std::int32_t>;
    if (text == "infinity") {
        return Interval{L64::max(), L32::max(), L32::max()};
    }
    if (text == "-infinity") {
        return Interval{L64::min(), L32::min(), L32::min()};
    }
    TextCursor c(text, "interval");
    c.expect('P');
    std::int64_t months = 0;
    std::int64_t days = 0;
    std::int64_t usecs = 0;
    bool in_time = false;
    bool any = false;
    auto add = [&](std::int64_t& total, std::int64_t value, std::int64_t unit) {
        std::int64_t scaled = 0;
        if (__builtin_mul_overflow(value, unit, &scaled) ||
            __builtin_add_overflow(total, scaled, &total)) {
            c.fail("interval out of range");
        }
    };
    while (!c.done()) {
        if (!in_time && c.accept('T')) {
            in_time = true;
            continue;
        }
        const bool negative = c.accept('-');
        const std::int64_t value = c.digits(1, 18);
        const std::int64_t signed_value = negative ? -value : value;
        if (in_time && c.peek() == '.') {
            c.accept('.');
            const std::size_t start = c.pos();
            std::int64_t fsec = c.digits(1, 6);
            for (std::size_t n = c.pos() - start; n < 6; ++n) {
                fsec *= 10;
            }
            c.expect('S');
            add(usecs, signed_value, kUsecsPerSec);
            add(usecs, negative ? -fsec : fsec, 1);
            any = true;
            continue;
        }
        const char unit = c.peek();
        if (!c.accept(unit) || unit == '\0') {
            c.fail("expected a unit");
        }
        if (!in_time && unit == 'Y') {
            add(months, signed_value, 12);
        } else if (!in_time && unit == 'M') {
            add(months, signed_value, 1);
        } else if (!in_time && unit == 'W') {
            add(days, signed_value, 7);
        } else if (!in_time && unit == 'D') {
            add(days, signed_value, 1);
        } else if (in_time && unit == 'H') {
            add(usecs, signed_value, kUsecsPerHour);
        } else if (in_time && unit == 'M') {
            add(usecs, signed_value, kUsecsPerMinute);
        } else if (in_time && unit == 'S') {
            add(usecs, signed_value, kUsecsPerSec);
        } else {
            c.fail("unexpected unit");
        }
        any = true;
    }
    if (!any) {
        c.fail("empty interval");
    }
    if (months < L32::min() || months > L32::max() || days < L32::min() || days > L32::max()) {
        c.fail("interval out of range");
    }
    return Interval{usecs, std::int32_t(days), std::int32_t(months)};
}

} // namespace pgtide::schema::datetime
