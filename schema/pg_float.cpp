// PostgreSQL's float output (Ryu, src/common/f2s.c and d2s.c, built without
// STRICTLY_SHORTEST): the fewest significant digits that lie strictly inside the value's
// rounding interval, closest to the value; fixed notation for decimal exponents in
// [-4, 6) (float4) or [-4, 15) (float8), else `d.ddde+XX`.
//
// std::to_chars gives the shortest digits that read back as the value, which may sit exactly
// on the interval's edge (a tie that strtod resolves to the even neighbour); PostgreSQL never
// prints those. We start from to_chars and, only in that rare case, search with exact decimal
// arithmetic.
#include "schema/pg_float.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

namespace pgtide::schema {

namespace {

/// A positive decimal 0.d1d2d3... × 10^(exponent + 1), i.e. d1.d2d3... × 10^exponent; digits
/// start with a non-zero digit and carry no trailing zeros.
struct Decimal {
    std::string digits;
    int exponent = 0;
};

void normalize(Decimal& d) {
    const std::size_t first = d.digits.find_first_not_of('0');
    if (first == std::string::npos) {
        d.digits = "0";
        d.exponent = 0;
        return;
    }
    d.digits.erase(0, first);
    d.exponent -= int(first);
    d.digits.erase(d.digits.find_last_not_of('0') + 1);
}

/// Parses to_chars' scientific output of a positive value: `d[.ddd]e±XX`.
Decimal parse_scientific(std::string_view s) {
    Decimal d;
    const std::size_t e = s.find('e');
    for (std::size_t i = 0; i < e; ++i) {
        if (s[i] != '.') {
            d.digits += s[i];
        }
    }
    const char* exp_begin = s.data() + e + 1 + (s[e + 1] == '+' ? 1 : 0);
    std::from_chars(exp_begin, s.data() + s.size(), d.exponent);
    normalize(d);
    return d;
}

template <typename T> Decimal scientific(T v, int precision) {
    char buf[1600];
    const auto r =
        std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific, precision);
    return parse_scientific(std::string_view(buf, std::size_t(r.ptr - buf)));
}

template <typename T> Decimal shortest(T v) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    return parse_scientific(std::string_view(buf, std::size_t(r.ptr - buf)));
}

/// The exact decimal expansion of a long double (every binary fraction has a finite one).
Decimal exact(long double v) {
    return scientific(v, 1500);
}

int compare(const Decimal& a, const Decimal& b) {
    if (a.exponent != b.exponent) {
        return a.exponent < b.exponent ? -1 : 1;
    }
    const int c = a.digits.compare(0, b.digits.size(), b.digits, 0, a.digits.size());
    if (c != 0) {
        return c < 0 ? -1 : 1;
    }
    if (a.digits.size() == b.digits.size()) {
        return 0;
    }
    return a.digits.size() < b.digits.size() ? -1 : 1;
}

/// `d` moved by one unit in its `places`-th significant digit, up or down.
Decimal step(Decimal d, std::size_t places, bool up) {
    d.digits.resize(places, '0');
    std::size_t i = places;
    if (up) {
        while (i > 0 && d.digits[i - 1] == '9') {
            d.digits[--i] = '0';
        }
        if (i == 0) {
            d.digits.insert(d.digits.begin(), '1');
            ++d.exponent;
        } else {
            ++d.digits[i - 1];
        }
    } else {
        while (i > 0 && d.digits[i - 1] == '0') {
            d.digits[--i] = '9';
        }
        if (i > 0) {
            --d.digits[i - 1];
        }
    }
    normalize(d);
    return d;
}

/// False only when `d` (at most 19 digits) is certainly not equal to `v`: d is rebuilt in long
/// double with one rounding, which is exact whenever d equals a long double.
bool maybe_equal(const Decimal& d, long double v) {
    std::uint64_t mantissa = 0;
    for (const char c : d.digits) {
        mantissa = mantissa * 10 + std::uint64_t(c - '0');
    }
    const int scale = d.exponent - int(d.digits.size()) + 1; // d = mantissa × 10^scale
    if (scale > 27 || scale < -27) {
        long double parsed = 0;
        const std::string text = d.digits + "e" + std::to_string(scale);
        std::from_chars(text.data(), text.data() + text.size(), parsed);
        return parsed == v;
    }
    long double power = 1; // 10^27 < 2^64: exact
    for (int i = 0; i < (scale < 0 ? -scale : scale); ++i) {
        power *= 10;
    }
    const long double rebuilt = scale < 0 ? mantissa / power : mantissa * power;
    return rebuilt == v;
}

template <typename F> Decimal pg_digits(F v) {
    const Decimal quick = shortest(v);
    // The rounding interval's edges, exact in long double (64-bit significand).
    const F below = std::nextafter(v, F(0));
    F above = std::nextafter(v, std::numeric_limits<F>::infinity());
    const long double lv = v;
    const long double lo = (lv + below) / 2;
    const long double hi = std::isinf(above) ? lv + (lv - below) / 2 : (lv + above) / 2;
    if (!maybe_equal(quick, lo) && !maybe_equal(quick, hi)) {
        return quick; // inside the closed interval and not on an edge: strictly inside
    }
    const Decimal low = exact(lo);
    const Decimal high = exact(hi);
    const Decimal value = exact(lv);
    auto inside = [&](const Decimal& d) { return compare(d, low) > 0 && compare(d, high) < 0; };
    for (int places = 1; places <= std::numeric_limits<F>::max_digits10; ++places) {
        const Decimal rounded = scientific(v, places - 1);
        if (inside(rounded)) {
            return rounded;
        }
        const Decimal toward = step(rounded, std::size_t(places), compare(rounded, value) < 0);
        if (inside(toward)) {
            return toward;
        }
    }
    return quick;
}

template <typename F> std::string pg_float_text(F v, int fixed_limit) {
    if (std::isnan(v)) {
        return "NaN";
    }
    if (std::isinf(v)) {
        return v > 0 ? "Infinity" : "-Infinity";
    }
    std::string out = std::signbit(v) ? "-" : "";
    if (v == 0) {
        return out + "0";
    }
    const Decimal d = pg_digits(std::fabs(v));
    const int exponent = d.exponent;
    if (exponent >= -4 && exponent < fixed_limit) {
        if (exponent < 0) {
            out += "0.";
            out.append(std::size_t(-exponent - 1), '0');
            out += d.digits;
        } else if (d.digits.size() <= std::size_t(exponent) + 1) {
            out += d.digits;
            out.append(std::size_t(exponent) + 1 - d.digits.size(), '0');
        } else {
            out.append(d.digits, 0, std::size_t(exponent) + 1);
            out += '.';
            out.append(d.digits, std::size_t(exponent) + 1);
        }
        return out;
    }
    out += d.digits[0];
    if (d.digits.size() > 1) {
        out += '.';
        out.append(d.digits, 1);
    }
    out += 'e';
    out += exponent < 0 ? '-' : '+';
    const int magnitude = exponent < 0 ? -exponent : exponent;
    if (magnitude < 10) {
        out += '0';
    }
    out += std::to_string(magnitude);
    return out;
}

} // namespace

std::string pg_float4_text(float v) {
    return pg_float_text(v, 6);
}

std::string pg_float8_text(double v) {
    return pg_float_text(v, 15);
}

} // namespace pgtide::schema
