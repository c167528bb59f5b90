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

} // namespace pgtide::replicate
