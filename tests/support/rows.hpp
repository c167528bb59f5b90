// Rows as tests compare them: every value as canonical text, SQL NULL as nullopt.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace pgtide::testing {

/// One result row; NULL is nullopt.
using Row = std::vector<std::optional<std::string>>;
/// A result set in the order the query returned it.
using Rows = std::vector<Row>;

/// Spelling of NULL in expected rows: `Rows{{"1", null}}`.
inline constexpr std::nullopt_t null = std::nullopt;

} // namespace pgtide::testing
