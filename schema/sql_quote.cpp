// Identifier and literal quoting.
#include "schema/sql_quote.hpp"

#include <stdexcept>

namespace pgtide::schema {

namespace {

std::string quote_with(std::string_view text, char quote, const char* what) {
    std::string out;
    out.reserve(text.size() + 2);
    out += quote;
    for (const char c : text) {
        if (c == '\0') {
            throw std::invalid_argument(std::string(what) + " contains a NUL byte");
        }
        if (c == quote) {
            out += quote;
        }
        out += c;
    }
    out += quote;
    return out;
}

} // namespace

std::string quote_identifier(std::string_view name) {
    return quote_with(name, '"', "identifier");
}

std::string quote_sqlite_literal(std::string_view text) {
    return quote_with(text, '\'', "literal");
}

std::string text_array_literal(const std::vector<std::string>& items) {
    std::string out = "{";
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) {
            out += ',';
        }
        out += '"';
        for (const char ch : items[i]) {
            if (ch == '"' || ch == '\\') {
                out += '\\';
            }
            out += ch;
        }
        out += '"';
    }
    out += '}';
    return out;
}

} // namespace pgtide::schema
