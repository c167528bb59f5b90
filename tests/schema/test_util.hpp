// Helpers shared by the schema tests: fixture files and hex.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

#include "schema/codec.hpp"
#include "schema/value.hpp"

namespace pgtide::schema::test {

inline std::string fixture_path(std::string_view name) {
    return std::string(PGTIDE_SOURCE_DIR) + "/tests/fixtures/" + std::string(name);
}

inline std::string read_fixture(std::string_view name) {
    std::ifstream in(fixture_path(name), std::ios::binary);
    if (!in) {
        throw std::runtime_error("missing fixture " + fixture_path(name));
    }
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

inline std::string unhex(std::string_view hex) {
    const auto nibble = [](char c) -> int {
        const int v = pgtide::schema::hex_value(c);
        if (v < 0) {
            throw std::invalid_argument("bad hex");
        }
        return v;
    };
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
        if (hex[i] == ' ') {
            --i;
            continue;
        }
        out += char(nibble(hex[i]) * 16 + nibble(hex[i + 1]));
    }
    return out;
}

/// A Value as a readable string for failure messages.
inline std::string show(const Value& v) {
    struct Visitor {
        std::string operator()(Null) const { return "NULL"; }
        std::string operator()(UnchangedToast) const { return "UNCHANGED"; }
        std::string operator()(std::int64_t i) const { return "INTEGER " + std::to_string(i); }
        std::string operator()(double d) const {
            std::ostringstream s;
            s.precision(17);
            s << "REAL " << d;
            return s.str();
        }
        std::string operator()(const std::string& s) const { return "TEXT '" + s + "'"; }
        std::string operator()(const Blob& b) const {
            static constexpr char kHex[] = "0123456789abcdef";
            std::string out = "BLOB x'";
            for (const char c : b.bytes) {
                out += kHex[(static_cast<unsigned char>(c) >> 4) & 15];
                out += kHex[c & 15];
            }
            return out + "'";
        }
    };
    return std::visit(Visitor{}, v);
}

} // namespace pgtide::schema::test
