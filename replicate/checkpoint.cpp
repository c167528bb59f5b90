// Destination metadata rows: names of phases and table states, tombstone key encoding.
#include "replicate/checkpoint.hpp"

#include <charconv>
#include <cmath>
#include <variant>

#include "replicate/errors.hpp"

namespace pgtide::replicate {

namespace {

void append_part(std::string& out, char tag, std::string_view payload) {
    out += tag;
    out += std::to_string(payload.size());
    out += ':';
    out += payload;
}

void append_key_part(std::string& out, const schema::Value& v) {
    static constexpr char kHex[] = "0123456789abcdef";
    if (std::holds_alternative<schema::Null>(v)) {
        out += "n0:";
    } else if (const auto* i = std::get_if<std::int64_t>(&v)) {
        char buf[24];
        const auto r = std::to_chars(buf, buf + sizeof buf, *i);
        append_part(out, 'i', std::string_view(buf, std::size_t(r.ptr - buf)));
    } else if (const auto* d = std::get_if<double>(&v)) {
        // -0.0 and 0.0 are one key to SQLite; NaN never arrives as a double.
        const double x = (*d == 0.0) ? 0.0 : *d;
        if (std::isnan(x)) {
            append_part(out, 't', "NaN");
            return;
        }
        char buf[32];
        const auto r = std::to_chars(buf, buf + sizeof buf, x);
        append_part(out, 'r', std::string_view(buf, std::size_t(r.ptr - buf)));
    } else if (const auto* s = std::get_if<std::string>(&v)) {
        append_part(out, 't', *s);
    } else if (const auto* b = std::get_if<schema::Blob>(&v)) {
        std::string hex;
        hex.reserve(b->bytes.size() * 2);
        for (const unsigned char c : b->bytes) {
            hex += kHex[c >> 4];
            hex += kHex[c & 0xf];
        }
        append_part(out, 'b', hex);
    } else {
        throw InternalError("an unchanged-TOAST value cannot be part of a key");
    }
}

} // namespace

const char* to_string(Phase phase) {
    switch (phase) {
    case Phase::Snapshot:
        return "snapshot";
    case Phase::Streaming:
        return "streaming";
    }
    return "snapshot";
}

std::optional<Phase> parse_phase(std::string_view text) {
    if (text == "snapshot") {
        return Phase::Snapshot;
    }
    if (text == "streaming") {
        return Phase::Streaming;
    }
    return std::nullopt;
}

const char* to_string(TableState state) {
    switch (state) {
    case TableState::Init:
        return "init";
    case TableState::Copying:
        return "copying";
    case TableState::Copied:
        return "copied";
    case TableState::Ready:
        return "ready";
    }
    return "init";
}

std::optional<TableState> parse_table_state(std::string_view text) {
    if (text == "init") {
        return TableState::Init;
    }
    if (text == "copying") {
        return TableState::Copying;
    }
    if (text == "copied") {
        return TableState::Copied;
    }
    if (text == "ready") {
        return TableState::Ready;
    }
    return std::nullopt;
}

std::string encode_tombstone_key(const schema::Row& key) {
    std::string out;
    for (const schema::Value& v : key) {
        append_key_part(out, v);
    }
    return out;
}

std::string encode_tombstone_key(const schema::Row& row, const std::vector<std::size_t>& columns) {
    std::string out;
    for (const std::size_t c : columns) {
        append_key_part(out, row.at(c));
    }
    return out;
}

namespace {

constexpr std::string_view kCopyKeyTag = "k1 ";

void append_count(std::string& out, std::size_t n) {
    out += std::to_string(n);
    out += ';';
}

void append_text(std::string& out, std::string_view text) {
    out += std::to_string(text.size());
    out += ':';
    out += text;
}

void append_optional(std::string& out, const std::optional<std::string>& text) {
    if (text) {
        append_text(out, *text);
    } else {
        out += '-';
    }
}

/// Reads what append_* wrote from the front of `in`; nullopt when it is not there.
struct CopyKeyReader {
    std::string_view in;

    std::optional<std::size_t> number(char end) {
        std::size_t n = 0;
        const auto [p, ec] = std::from_chars(in.data(), in.data() + in.size(), n);
        if (ec != std::errc{} || p == in.data() || p == in.data() + in.size() || *p != end) {
            return std::nullopt;
        }
        in.remove_prefix(std::size_t(p - in.data()) + 1);
        return n;
    }
    std::optional<std::string> text() {
        const std::optional<std::size_t> n = number(':');
        if (!n || *n > in.size()) {
            return std::nullopt;
        }
        std::string out(in.substr(0, *n));
        in.remove_prefix(*n);
        return out;
    }
    /// nullopt: malformed; an absent value is an engaged optional holding nullopt.
    std::optional<std::optional<std::string>> optional_text() {
        if (!in.empty() && in.front() == '-') {
            in.remove_prefix(1);
            return std::optional<std::string>{};
        }
        std::optional<std::string> t = text();
        if (!t) {
            return std::nullopt;
        }
        return t;
    }
};

} // namespace

std::string encode_copy_key(const CopyKey& key) {
    std::string out(kCopyKeyTag);
    append_text(out, key.shape);
    append_count(out, key.ranges.size());
    for (const RangeProgress& r : key.ranges) {
        out += r.done ? 'd' : 'o';
        append_optional(out, r.lower);
        append_optional(out, r.upper);
        append_count(out, r.after.size());
        for (const std::string& v : r.after) {
            append_text(out, v);
        }
    }
    return out;
}

std::optional<CopyKey> parse_copy_key(std::string_view text) {
    if (!text.starts_with(kCopyKeyTag)) {
        return std::nullopt;
    }
    CopyKeyReader in{text.substr(kCopyKeyTag.size())};
    CopyKey key;
    std::optional<std::string> shape = in.text();
    const std::optional<std::size_t> ranges = in.number(';');
    if (!shape || !ranges || *ranges > text.size()) {
        return std::nullopt;
    }
    key.shape = std::move(*shape);
    for (std::size_t i = 0; i < *ranges; ++i) {
        if (in.in.empty() || (in.in.front() != 'd' && in.in.front() != 'o')) {
            return std::nullopt;
        }
        RangeProgress r;
        r.done = in.in.front() == 'd';
        in.in.remove_prefix(1);
        auto lower = in.optional_text();
        auto upper = lower ? in.optional_text() : std::nullopt;
        const std::optional<std::size_t> after = upper ? in.number(';') : std::nullopt;
        if (!after || *after > text.size()) {
            return std::nullopt;
        }
        r.lower = std::move(*lower);
        r.upper = std::move(*upper);
        for (std::size_t k = 0; k < *after; ++k) {
            std::optional<std::string> v = in.text();
            if (!v) {
                return std::nullopt;
            }
            r.after.push_back(std::move(*v));
        }
        key.ranges.push_back(std::move(r));
    }
    if (!in.in.empty()) {
        return std::nullopt;
    }
    return key;
}

} // namespace pgtide::replicate
