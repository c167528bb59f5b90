// Canonical values from PostgreSQL's binary send formats and text output (DESIGN §5). Each
// type has one canonical form; the binary decoders produce exactly what the text path yields
// for the same value, so a row is identical whether it came through COPY or the stream.
#include "schema/codec.hpp"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "schema/pg_datetime.hpp"
#include "schema/pg_float.hpp"
#include "schema/pg_types.hpp"

namespace pgtide::schema {

namespace {

enum class Kind {
    Bool,
    Int2,
    Int4,
    Int8,
    Oid,
    Float4,
    Float8,
    Numeric,
    Text, // text, varchar, bpchar, name, unknown: bytes as they are
    Char, // "char"
    Bytea,
    Uuid,
    Json,
    Jsonb,
    Xml,
    Date,
    Time,
    Timetz,
    Timestamp,
    Timestamptz,
    Interval,
    Other, // no mapping: the text output as is; no binary decoder
};

Kind kind_of(std::uint32_t type_oid) {
    switch (type_oid) {
    case oid::kBool:
        return Kind::Bool;
    case oid::kInt2:
        return Kind::Int2;
    case oid::kInt4:
        return Kind::Int4;
    case oid::kInt8:
        return Kind::Int8;
    case oid::kOid:
        return Kind::Oid;
    case oid::kFloat4:
        return Kind::Float4;
    case oid::kFloat8:
        return Kind::Float8;
    case oid::kNumeric:
        return Kind::Numeric;
    case oid::kText:
    case oid::kVarchar:
    case oid::kBpchar:
    case oid::kName:
    case oid::kUnknown:
        return Kind::Text;
    case oid::kChar:
        return Kind::Char;
    case oid::kBytea:
        return Kind::Bytea;
    case oid::kUuid:
        return Kind::Uuid;
    case oid::kJson:
        return Kind::Json;
    case oid::kJsonb:
        return Kind::Jsonb;
    case oid::kXml:
        return Kind::Xml;
    case oid::kDate:
        return Kind::Date;
    case oid::kTime:
        return Kind::Time;
    case oid::kTimetz:
        return Kind::Timetz;
    case oid::kTimestamp:
        return Kind::Timestamp;
    case oid::kTimestamptz:
        return Kind::Timestamptz;
    case oid::kInterval:
        return Kind::Interval;
    default:
        return Kind::Other;
    }
}

std::string type_name(std::uint32_t type_oid) {
    switch (type_oid) {
    case oid::kBool:
        return "bool";
    case oid::kInt2:
        return "int2";
    case oid::kInt4:
        return "int4";
    case oid::kInt8:
        return "int8";
    case oid::kOid:
        return "oid";
    case oid::kFloat4:
        return "float4";
    case oid::kFloat8:
        return "float8";
    case oid::kNumeric:
        return "numeric";
    case oid::kText:
        return "text";
    case oid::kVarchar:
        return "varchar";
    case oid::kBpchar:
        return "bpchar";
    case oid::kName:
        return "name";
    case oid::kUnknown:
        return "unknown";
    case oid::kChar:
        return "char";
    case oid::kBytea:
        return "bytea";
    case oid::kUuid:
        return "uuid";
    case oid::kJson:
        return "json";
    case oid::kJsonb:
        return "jsonb";
    case oid::kXml:
        return "xml";
    case oid::kDate:
        return "date";
    case oid::kTime:
        return "time";
    case oid::kTimetz:
        return "timetz";
    case oid::kTimestamp:
        return "timestamp";
    case oid::kTimestamptz:
        return "timestamptz";
    case oid::kInterval:
        return "interval";
    default:
        return "type " + std::to_string(type_oid);
    }
}

/// The element type of an array type, 0 for a scalar. Built-in OIDs below 16384 that are not
/// arrays (name, point, int2vector, ...) have a pg_type.typelem too: ignore it for them.
std::uint32_t array_element(const TypeRef& t) {
    if (t.element_oid == 0 && kind_of(t.oid) != Kind::Other) {
        return 0; // a scalar with a decoder: skip the array table search (hot path)
    }
    if (const std::uint32_t builtin = builtin_array_element(t.oid)) {
        return t.element_oid != 0 ? t.element_oid : builtin;
    }
    if (t.oid >= oid::kFirstNormalObjectId) {
        return t.element_oid;
    }
    return 0;
}

// Big-endian reader over one value; errors name the type and the offset within the field.
class Reader {
public:
    /// `type` must outlive the reader.
    Reader(std::string_view bytes, const std::string& type, std::size_t base)
        : bytes_(bytes), type_(&type), base_(base) {}
    /// A scalar type's reader: its name is looked up only when an error needs it.
    Reader(std::string_view bytes, std::uint32_t type_oid, std::size_t base)
        : bytes_(bytes), type_oid_(type_oid), base_(base) {}

    std::size_t pos() const { return pos_; }
    std::size_t offset() const { return base_ + pos_; }
    std::size_t left() const { return bytes_.size() - pos_; }

    std::string_view take(std::size_t n) {
        if (left() < n) {
            fail("truncated: need " + std::to_string(n) + " bytes, have " + std::to_string(left()));
        }
        const std::string_view out = bytes_.substr(pos_, n);
        pos_ += n;
        return out;
    }
    std::uint64_t unsigned_be(std::size_t n) {
        const std::string_view b = take(n);
        std::uint64_t v = 0;
        for (const char c : b) {
            v = (v << 8) | static_cast<unsigned char>(c);
        }
        return v;
    }
    std::uint8_t u8() { return std::uint8_t(unsigned_be(1)); }
    std::uint16_t u16() { return std::uint16_t(unsigned_be(2)); }
    std::int16_t i16() { return std::int16_t(u16()); }
    std::uint32_t u32() { return std::uint32_t(unsigned_be(4)); }
    std::int32_t i32() { return std::int32_t(u32()); }
    std::uint64_t u64() { return unsigned_be(8); }
    std::int64_t i64() { return std::int64_t(u64()); }
    std::string_view rest() { return take(left()); }

    void expect_end() const {
        if (left() != 0) {
            fail(std::to_string(left()) + " unexpected trailing bytes");
        }
    }
    [[noreturn]] void fail(std::string_view detail) const {
        throw DecodeError(type(), offset(), detail);
    }
    [[noreturn]] void fail_at(std::size_t pos, std::string_view detail) const {
        throw DecodeError(type(), base_ + pos, detail);
    }

private:
    std::string type() const { return type_ != nullptr ? *type_ : type_name(type_oid_); }

    std::string_view bytes_;
    const std::string* type_ = nullptr;
    std::uint32_t type_oid_ = 0;
    std::size_t base_;
    std::size_t pos_ = 0;
};

constexpr char kHex[] = "0123456789abcdef";

// ---- floats ------------------------------------------------------------------------------

/// Parses a finite decimal float (or the words) exactly as strtod/strtof would, locale-free.
template <typename F> bool parse_float(std::string_view text, F& out) {
    if (text == "NaN") {
        out = std::numeric_limits<F>::quiet_NaN();
        return true;
    }
    if (text == "Infinity") {
        out = std::numeric_limits<F>::infinity();
        return true;
    }
    if (text == "-Infinity") {
        out = -std::numeric_limits<F>::infinity();
        return true;
    }
    if (text.empty()) {
        return false;
    }
    for (const char c : text) {
        if (!((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E')) {
            return false;
        }
    }
    const auto r = std::from_chars(text.data(), text.data() + text.size(), out);
    if (r.ptr != text.data() + text.size()) {
        return false;
    }
    if (r.ec == std::errc::result_out_of_range) {
        // Subnormals: from_chars may refuse them; strtod gives the correctly rounded value.
        const std::string copy(text);
        char* end = nullptr;
        if constexpr (std::is_same_v<F, float>) {
            out = std::strtof(copy.c_str(), &end);
        } else {
            out = std::strtod(copy.c_str(), &end);
        }
        return end == copy.c_str() + copy.size() && std::isfinite(out);
    }
    return r.ec == std::errc{};
}

/// A float's canonical Value: NaN as TEXT, everything else REAL.
Value float_value(double v) {
    if (std::isnan(v)) {
        return std::string("NaN");
    }
    return v;
}

/// float4 → the double nearest the digits PostgreSQL prints for it (`1.1f` → 1.1).
Value float4_value(float f) {
    if (std::isnan(f) || std::isinf(f)) {
        return float_value(double(f));
    }
    double d = 0;
    parse_float(pg_float4_text(f), d);
    return d;
}

// ---- numeric -----------------------------------------------------------------------------

constexpr std::uint16_t kNumericPos = 0x0000;
constexpr std::uint16_t kNumericNeg = 0x4000;
constexpr std::uint16_t kNumericNaN = 0xC000;
constexpr std::uint16_t kNumericPinf = 0xD000;
constexpr std::uint16_t kNumericNinf = 0xF000;

/// numeric_send → numeric_out's text (get_str_from_var): dscale digits after the point.
std::string numeric_from_binary(Reader& r) {
    const std::int16_t ndigits = r.i16();
    std::int32_t weight = r.i16();
    const std::uint16_t sign = r.u16();
    const std::size_t dscale_at = r.pos();
    const std::uint16_t dscale = r.u16();
    if (ndigits < 0) {
        r.fail_at(0, "negative digit count");
    }
    if (sign == kNumericNaN || sign == kNumericPinf || sign == kNumericNinf) {
        r.expect_end();
        return sign == kNumericNaN ? "NaN" : sign == kNumericPinf ? "Infinity" : "-Infinity";
    }
    if (sign != kNumericPos && sign != kNumericNeg) {
        r.fail_at(4, "bad sign");
    }
    if ((dscale & 0x3FFF) != dscale) {
        r.fail_at(dscale_at, "bad display scale");
    }
    std::vector<int> digits(std::size_t(ndigits), 0);
    for (auto& d : digits) {
        const std::size_t at = r.pos();
        d = r.i16();
        if (d < 0 || d > 9999) {
            r.fail_at(at, "digit " + std::to_string(d) + " outside 0..9999");
        }
    }
    r.expect_end();
    // Leading zero digits (never sent by PostgreSQL) would print nothing: strip them.
    std::size_t first = 0;
    while (first < digits.size() && digits[first] == 0) {
        ++first;
        --weight;
    }
    digits.erase(digits.begin(), digits.begin() + std::ptrdiff_t(first));
    const auto digit_at = [&](std::int64_t i) {
        return i >= 0 && i < std::int64_t(digits.size()) ? digits[std::size_t(i)] : 0;
    };

    std::string out;
    std::int64_t d = 0;
    if (weight < 0 || digits.empty()) {
        out += '0';
        d = digits.empty() ? 0 : weight + 1;
    } else {
        out += std::to_string(digits[0]);
        for (d = 1; d <= weight; ++d) {
            const int dig = digit_at(d);
            out += char('0' + dig / 1000);
            out += char('0' + dig / 100 % 10);
            out += char('0' + dig / 10 % 10);
            out += char('0' + dig % 10);
        }
    }
    if (dscale > 0) {
        out += '.';
        const std::size_t end = out.size() + dscale;
        for (std::size_t i = 0; i < dscale; i += 4, ++d) {
            const int dig = digit_at(d);
            out += char('0' + dig / 1000);
            out += char('0' + dig / 100 % 10);
            out += char('0' + dig / 10 % 10);
            out += char('0' + dig % 10);
        }
        out.resize(end);
    }
    if (sign == kNumericNeg && out.find_first_not_of("0.") != std::string::npos) {
        out.insert(out.begin(), '-');
    }
    return out;
}

void check_numeric_text(std::string_view text) {
    if (text == "NaN" || text == "Infinity" || text == "-Infinity") {
        return;
    }
    std::size_t i = text.empty() || text[0] != '-' ? 0 : 1;
    std::size_t digits = 0;
    bool point = false;
    for (; i < text.size(); ++i) {
        if (text[i] >= '0' && text[i] <= '9') {
            ++digits;
        } else if (text[i] == '.' && !point) {
            point = true;
        } else {
            throw DecodeError("numeric", i, "unexpected character");
        }
    }
    if (digits == 0) {
        throw DecodeError("numeric", 0, "no digits");
    }
}

// ---- text forms of other scalars ---------------------------------------------------------

std::string uuid_text(std::string_view b) {
    std::string out;
    out.reserve(36);
    for (std::size_t i = 0; i < 16; ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) {
            out += '-';
        }
        const auto c = static_cast<unsigned char>(b[i]);
        out += kHex[c >> 4];
        out += kHex[c & 15];
    }
    return out;
}

std::string uuid_canonical(std::string_view text) {
    if (text.size() != 36) {
        throw DecodeError("uuid", 0, "expected 36 characters");
    }
    std::string out(text);
    for (std::size_t i = 0; i < out.size(); ++i) {
        const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? out[i] != '-' : hex_value(out[i]) < 0) {
            throw DecodeError("uuid", i, dash ? "expected '-'" : "expected a hex digit");
        }
        if (out[i] >= 'A' && out[i] <= 'F') {
            out[i] = char(out[i] - 'A' + 'a');
        }
    }
    return out;
}

/// charout: a high-bit byte as \ooo, NUL as the empty string.
std::string char_text(unsigned char c) {
    if (c == 0) {
        return {};
    }
    if (c >= 0x80) {
        return std::string{'\\', char('0' + (c >> 6)), char('0' + ((c >> 3) & 7)),
                           char('0' + (c & 7))};
    }
    return std::string(1, char(c));
}

/// bytea text: `\x` hex (bytea_output=hex), or the escape format.
Blob bytea_from_text(std::string_view text) {
    Blob out;
    if (text.substr(0, 2) == "\\x") {
        out.bytes.reserve((text.size() - 2) / 2);
        std::size_t i = 2;
        while (i < text.size()) {
            if (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r') {
                ++i;
                continue;
            }
            const int hi = hex_value(text[i]);
            const int lo = i + 1 < text.size() ? hex_value(text[i + 1]) : -1;
            if (hi < 0 || lo < 0) {
                throw DecodeError("bytea", i, "invalid hex digit");
            }
            out.bytes += char(hi * 16 + lo);
            i += 2;
        }
        return out;
    }
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '\\') {
            out.bytes += text[i];
        } else if (i + 1 < text.size() && text[i + 1] == '\\') {
            out.bytes += '\\';
            ++i;
        } else if (i + 3 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '3' &&
                   text[i + 2] >= '0' && text[i + 2] <= '7' && text[i + 3] >= '0' &&
                   text[i + 3] <= '7') {
            out.bytes +=
                char((text[i + 1] - '0') * 64 + (text[i + 2] - '0') * 8 + (text[i + 3] - '0'));
            i += 3;
        } else {
            throw DecodeError("bytea", i, "invalid escape");
        }
    }
    return out;
}

template <typename Int> Int parse_integer(std::string_view text, const char* type) {
    Int v = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (r.ec != std::errc{} || r.ptr != text.data() + text.size() || text.empty()) {
        const std::size_t at =
            r.ec == std::errc::result_out_of_range ? 0 : std::size_t(r.ptr - text.data());
        throw DecodeError(type, at, "not an integer in range");
    }
    return v;
}

// ---- scalar decoders ---------------------------------------------------------------------

/// Runs a datetime formatter, giving its range error the value's offset.
template <typename Fn> std::string formatted(const Reader& r, Fn&& fn) {
    try {
        return fn();
    } catch (const DecodeError&) {
        r.fail_at(0, "value out of range");
    }
}

Value binary_scalar(Kind kind, std::uint32_t type_oid, std::string_view bytes, std::size_t base) {
    Reader r(bytes, type_oid, base);
    Value out;
    switch (kind) {
    case Kind::Bool:
        out = std::int64_t(r.u8() != 0 ? 1 : 0);
        break;
    case Kind::Int2:
        out = std::int64_t(r.i16());
        break;
    case Kind::Int4:
        out = std::int64_t(r.i32());
        break;
    case Kind::Int8:
        out = r.i64();
        break;
    case Kind::Oid:
        out = std::int64_t(r.u32());
        break;
    case Kind::Float4:
        out = float4_value(std::bit_cast<float>(r.u32()));
        break;
    case Kind::Float8:
        out = float_value(std::bit_cast<double>(r.u64()));
        break;
    case Kind::Numeric:
        out = numeric_from_binary(r);
        break;
    case Kind::Text:
    case Kind::Json:
    case Kind::Xml:
        out = std::string(r.rest());
        break;
    case Kind::Char:
        out = char_text(r.u8());
        break;
    case Kind::Bytea:
        out = Blob{std::string(r.rest())};
        break;
    case Kind::Uuid:
        out = uuid_text(r.take(16));
        break;
    case Kind::Jsonb: {
        const std::uint8_t version = r.u8();
        if (version != 1) {
            r.fail_at(0, "unsupported jsonb version " + std::to_string(version));
        }
        out = std::string(r.rest());
        break;
    }
    case Kind::Date: {
        const std::int32_t days = r.i32();
        out = formatted(r, [&] { return datetime::format_date(days); });
        break;
    }
    case Kind::Time: {
        const std::int64_t usecs = r.i64();
        out = formatted(r, [&] { return datetime::format_time(usecs); });
        break;
    }
    case Kind::Timetz: {
        const std::int64_t usecs = r.i64();
        const std::int32_t zone = r.i32();
        out = formatted(r, [&] { return datetime::format_timetz(usecs, zone); });
        break;
    }
    case Kind::Timestamp:
    case Kind::Timestamptz: {
        const std::int64_t usecs = r.i64();
        out = formatted(
            r, [&] { return datetime::format_timestamp(usecs, kind == Kind::Timestamptz); });
        break;
    }
    case Kind::Interval: {
        const std::int64_t usecs = r.i64();
        const std::int32_t days = r.i32();
        const std::int32_t months = r.i32();
        out = datetime::format_interval(usecs, days, months);
        break;
    }
    case Kind::Other:
        throw DecodeError(type_name(type_oid), base, "no binary decoder for this type");
    }
    r.expect_end();
    return out;
}

Value text_scalar(Kind kind, std::uint32_t type_oid, std::string_view text) {
    switch (kind) {
    case Kind::Bool:
        if (text == "t" || text == "true") {
            return std::int64_t(1);
        }
        if (text == "f" || text == "false") {
            return std::int64_t(0);
        }
        throw DecodeError("bool", 0, "expected t or f");
    case Kind::Int2:
        return std::int64_t(parse_integer<std::int16_t>(text, "int2"));
    case Kind::Int4:
        return std::int64_t(parse_integer<std::int32_t>(text, "int4"));
    case Kind::Int8:
        return parse_integer<std::int64_t>(text, "int8");
    case Kind::Oid:
        return std::int64_t(parse_integer<std::uint32_t>(text, "oid"));
    case Kind::Float4:
    case Kind::Float8: {
        double d = 0;
        if (!parse_float(text, d)) {
            throw DecodeError(kind == Kind::Float4 ? "float4" : "float8", 0, "not a number");
        }
        return float_value(d);
    }
    case Kind::Numeric:
        check_numeric_text(text);
        return std::string(text);
    case Kind::Bytea:
        return bytea_from_text(text);
    case Kind::Uuid:
        return uuid_canonical(text);
    case Kind::Date:
        return datetime::format_date(datetime::parse_date(text));
    case Kind::Time:
        return datetime::format_time(datetime::parse_time(text));
    case Kind::Timetz: {
        const datetime::Timetz v = datetime::parse_timetz(text);
        return datetime::format_timetz(v.usecs, v.zone_west);
    }
    case Kind::Timestamp:
    case Kind::Timestamptz: {
        const bool zone = kind == Kind::Timestamptz;
        return datetime::format_timestamp(datetime::parse_timestamp(text, zone), zone);
    }
    case Kind::Interval: {
        const datetime::Interval v = datetime::parse_interval(text);
        return datetime::format_interval(v.usecs, v.days, v.months);
    }
    case Kind::Text:
    case Kind::Char:
    case Kind::Json:
    case Kind::Jsonb:
    case Kind::Xml:
    case Kind::Other:
        break;
    }
    (void)type_oid;
    return std::string(text);
}

// ---- arrays as JSON ----------------------------------------------------------------------

/// PostgreSQL's escape_json.
void append_json_string(std::string& out, std::string_view s) {
    out += '"';
    for (const char c : s) {
        switch (c) {
        case '\b':
            out += "\\b";
            break;
        case '\f':
            out += "\\f";
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
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                out += "\\u00";
                out += kHex[(c >> 4) & 15];
                out += kHex[c & 15];
            } else {
                out += c;
            }
        }
    }
    out += '"';
}

/// A float element: PostgreSQL's digits as a JSON number, NaN and infinities as strings.
void append_float_json(std::string& out, const std::string& text) {
    if (text == "NaN" || text == "Infinity" || text == "-Infinity") {
        append_json_string(out, text);
    } else {
        out += text;
    }
}

/// One non-float element's canonical Value as JSON (DESIGN §5 array rules).
void append_element_json(std::string& out, Kind kind, const Value& v) {
    if (std::holds_alternative<Null>(v)) {
        out += "null";
        return;
    }
    switch (kind) {
    case Kind::Bool:
        out += std::get<std::int64_t>(v) != 0 ? "true" : "false";
        return;
    case Kind::Int2:
    case Kind::Int4:
    case Kind::Int8:
    case Kind::Oid:
        out += std::to_string(std::get<std::int64_t>(v));
        return;
    case Kind::Numeric:
        append_float_json(out, std::get<std::string>(v));
        return;
    case Kind::Bytea: {
        const std::string& bytes = std::get<Blob>(v).bytes;
        std::string hex = "\\x";
        hex.reserve(2 + bytes.size() * 2);
        for (const char c : bytes) {
            hex += kHex[(static_cast<unsigned char>(c) >> 4) & 15];
            hex += kHex[c & 15];
        }
        append_json_string(out, hex);
        return;
    }
    default:
        append_json_string(out, std::get<std::string>(v));
        return;
    }
}

constexpr int kMaxDims = 6;                        // PostgreSQL's MAXDIM
constexpr std::int64_t kMaxArrayItems = 134217727; // MaxArraySize

class BinaryArray {
public:
    BinaryArray(std::uint32_t element, std::string_view bytes, const std::string& name)
        : element_(element), kind_(kind_of(element)), reader_(bytes, name, 0) {}

    std::string json() {
        const std::int32_t ndim = reader_.i32();
        if (ndim < 0 || ndim > kMaxDims) {
            reader_.fail_at(0, "bad dimension count " + std::to_string(ndim));
        }
        const std::int32_t has_nulls = reader_.i32();
        if (has_nulls != 0 && has_nulls != 1) {
            reader_.fail_at(4, "bad null flag");
        }
        reader_.u32(); // the element OID on the wire: a domain's, when the element is one
        std::int64_t items = ndim > 0 ? 1 : 0;
        for (std::int32_t i = 0; i < ndim; ++i) {
            const std::size_t at = reader_.pos();
            const std::int32_t length = reader_.i32();
            reader_.i32(); // lower bound: dropped
            if (length < 0) {
                reader_.fail_at(at, "negative dimension length");
            }
            items *= length;
            if (items > kMaxArrayItems) {
                reader_.fail_at(at, "array too large");
            }
            dims_.push_back(length);
        }
        std::string out;
        if (items == 0) {
            out = "[]";
        } else {
            append_level(out, 0);
        }
        reader_.expect_end();
        return out;
    }

private:
    void append_level(std::string& out, std::size_t dim) {
        out += '[';
        for (std::int32_t i = 0; i < dims_[dim]; ++i) {
            if (i > 0) {
                out += ',';
            }
            if (dim + 1 < dims_.size()) {
                append_level(out, dim + 1);
            } else {
                append_element(out);
            }
        }
        out += ']';
    }

    void append_element(std::string& out) {
        const std::size_t at = reader_.pos();
        const std::int32_t length = reader_.i32();
        if (length == -1) {
            out += "null";
            return;
        }
        if (length < 0) {
            reader_.fail_at(at, "bad element length");
        }
        const std::size_t start = reader_.offset();
        const std::string_view bytes = reader_.take(std::size_t(length));
        if (kind_ == Kind::Float4 || kind_ == Kind::Float8) {
            Reader r(bytes, element_, start);
            if (kind_ == Kind::Float4) {
                append_float_json(out, pg_float4_text(std::bit_cast<float>(r.u32())));
            } else {
                append_float_json(out, pg_float8_text(std::bit_cast<double>(r.u64())));
            }
            r.expect_end();
            return;
        }
        append_element_json(out, kind_, binary_scalar(kind_, element_, bytes, start));
    }

    std::uint32_t element_;
    Kind kind_;
    Reader reader_;
    std::vector<std::int32_t> dims_;
};

/// array_out's text (`{...}`, `[1:2]={...}`, quoting, backslash escapes, NULL) → JSON.
class TextArray {
public:
    TextArray(std::uint32_t element, std::string_view text, const std::string& name)
        : element_(element), kind_(kind_of(element)), text_(text), name_(name),
          delimiter_(element == oid::kBox ? ';' : ',') {}

    std::string json() {
        std::string out;
        skip_space();
        if (peek() == '[') {
            // Explicit bounds `[lo:hi][lo:hi]=`: dropped.
            while (accept('[')) {
                while (!done() && peek() != ']') {
                    ++pos_;
                }
                expect(']');
            }
            expect('=');
            skip_space();
        }
        expect('{');
        append_level(out, 1);
        skip_space();
        if (!done()) {
            fail("unexpected text after the array");
        }
        return out;
    }

private:
    bool done() const { return pos_ >= text_.size(); }
    char peek() const { return done() ? '\0' : text_[pos_]; }
    bool accept(char c) {
        if (!done() && text_[pos_] == c) {
            ++pos_;
            return true;
        }
        return false;
    }
    void expect(char c) {
        if (!accept(c)) {
            fail(std::string("expected '") + c + "'");
        }
    }
    void skip_space() {
        while (!done() && is_space(text_[pos_])) {
            ++pos_;
        }
    }
    static bool is_space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    }
    [[noreturn]] void fail(std::string_view detail) const {
        throw DecodeError(name_, pos_, detail);
    }

    // After '{'.
    void append_level(std::string& out, int depth) {
        if (depth > kMaxDims) {
            fail("too many dimensions");
        }
        out += '[';
        skip_space();
        if (accept('}')) {
            out += ']';
            return;
        }
        for (bool first = true;; first = false) {
            if (!first) {
                out += ',';
            }
            skip_space();
            if (accept('{')) {
                append_level(out, depth + 1);
            } else {
                append_element(out);
            }
            skip_space();
            if (accept('}')) {
                out += ']';
                return;
            }
            expect(delimiter_);
        }
    }

    void append_element(std::string& out) {
        const std::size_t start = pos_;
        std::string value;
        bool quoted = false;
        bool escaped = false;
        if (accept('"')) {
            quoted = true;
            for (;;) {
                if (done()) {
                    fail("unterminated quoted element");
                }
                const char c = text_[pos_++];
                if (c == '"') {
                    break;
                }
                if (c == '\\') {
                    if (done()) {
                        fail("unterminated escape");
                    }
                    value += text_[pos_++];
                } else {
                    value += c;
                }
            }
        } else {
            std::size_t keep = 0; // length without trailing unescaped spaces
            while (!done() && peek() != delimiter_ && peek() != '}') {
                const char c = text_[pos_++];
                if (c == '{' || c == '"') {
                    --pos_;
                    fail("unexpected character in element");
                }
                if (c == '\\') {
                    if (done()) {
                        fail("unterminated escape");
                    }
                    value += text_[pos_++];
                    escaped = true;
                    keep = value.size();
                } else {
                    value += c;
                    if (!is_space(c)) {
                        keep = value.size();
                    }
                }
            }
            value.resize(keep);
            if (value.empty() && !escaped) {
                fail("empty element");
            }
        }
        if (!quoted && !escaped && value.size() == 4 && (value[0] | 0x20) == 'n' &&
            (value[1] | 0x20) == 'u' && (value[2] | 0x20) == 'l' && (value[3] | 0x20) == 'l') {
            out += "null";
            return;
        }
        try {
            if (kind_ == Kind::Float4) {
                float f = 0;
                if (!parse_float(value, f)) {
                    throw DecodeError("float4", 0, "not a number");
                }
                append_float_json(out, pg_float4_text(f));
            } else if (kind_ == Kind::Float8) {
                double d = 0;
                if (!parse_float(value, d)) {
                    throw DecodeError("float8", 0, "not a number");
                }
                append_float_json(out, pg_float8_text(d));
            } else {
                append_element_json(out, kind_, text_scalar(kind_, element_, value));
            }
        } catch (const DecodeError& e) {
            throw DecodeError(name_, start + (quoted ? 1 : 0) + e.offset(),
                              std::string("element: ") + e.what());
        }
    }

    std::uint32_t element_;
    Kind kind_;
    std::string_view text_;
    const std::string& name_;
    char delimiter_;
    std::size_t pos_ = 0;
};

} // namespace

int hex_value(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

StorageClass storage_class(const TypeRef& t) {
    if (array_element(t) != 0) {
        return StorageClass::Text;
    }
    switch (kind_of(t.oid)) {
    case Kind::Bool:
    case Kind::Int2:
    case Kind::Int4:
    case Kind::Int8:
    case Kind::Oid:
        return StorageClass::Integer;
    case Kind::Float4:
    case Kind::Float8:
        return StorageClass::Real;
    case Kind::Bytea:
        return StorageClass::Blob;
    default:
        return StorageClass::Text;
    }
}

bool has_binary_decoder(const TypeRef& t) {
    if (const std::uint32_t element = array_element(t)) {
        return kind_of(element) != Kind::Other;
    }
    return kind_of(t.oid) != Kind::Other;
}

Value decode_binary(const TypeRef& t, std::string_view bytes) {
    if (const std::uint32_t element = array_element(t)) {
        const std::string name = type_name(element) + "[]";
        if (kind_of(element) == Kind::Other) {
            throw DecodeError(name, 0, "no binary decoder for this element type");
        }
        return BinaryArray(element, bytes, name).json();
    }
    return binary_scalar(kind_of(t.oid), t.oid, bytes, 0);
}

Value decode_text(const TypeRef& t, std::string_view text) {
    if (const std::uint32_t element = array_element(t)) {
        const std::string name = type_name(element) + "[]";
        return TextArray(element, text, name).json();
    }
    return text_scalar(kind_of(t.oid), t.oid, text);
}

} // namespace pgtide::schema
