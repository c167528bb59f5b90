// Quoting of identifiers and literals for SQL that pgtide builds itself.
#pragma once

#include <string>
#include <string_view>

namespace pgtide::schema {

/// `name` as a double-quoted identifier with embedded `"` doubled; valid in PostgreSQL and
/// SQLite whatever the name's case or characters. Throws std::invalid_argument on a NUL byte.
std::string quote_identifier(std::string_view name);

/// `text` as an SQLite string literal: single-quoted, embedded `'` doubled (SQLite has no
/// backslash escapes). Throws std::invalid_argument on a NUL byte.
std::string quote_sqlite_literal(std::string_view text);

} // namespace pgtide::schema
