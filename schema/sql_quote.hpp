// Quoting of identifiers and literals for SQL that pgtide builds itself.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pgtide::schema {

/// `name` as a double-quoted identifier with embedded `"` doubled; valid in PostgreSQL and
/// SQLite whatever the name's case or characters. Throws std::invalid_argument on a NUL byte.
std::string quote_identifier(std::string_view name);

/// `text` as an SQLite string literal: single-quoted, embedded `'` doubled (SQLite has no
/// backslash escapes). Throws std::invalid_argument on a NUL byte.
std::string quote_sqlite_literal(std::string_view text);

/// A PostgreSQL text[] literal of `items` (each element double-quoted, `"` and `\` escaped),
/// for a `$1::text[]` parameter.
std::string text_array_literal(const std::vector<std::string>& items);

} // namespace pgtide::schema
