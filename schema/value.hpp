// Value: one canonical column value, already in the destination's storage class (DESIGN §5).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace pgtide::schema {

/// SQL NULL.
struct Null {
    friend bool operator==(Null, Null) = default;
};

/// pgoutput's 'u': an unchanged value stored out of line (TOAST); the destination keeps its own.
struct UnchangedToast {
    friend bool operator==(UnchangedToast, UnchangedToast) = default;
};

/// Raw bytes (bytea).
struct Blob {
    std::string bytes;
    friend bool operator==(const Blob&, const Blob&) = default;
};

/// A canonical value. Its alternative is the SQLite storage class it is written as:
/// int64 → INTEGER, double → REAL, string → TEXT (UTF-8), Blob → BLOB.
using Value = std::variant<Null, std::int64_t, double, std::string, Blob, UnchangedToast>;

/// One row (or one key) in column order.
using Row = std::vector<Value>;

/// The declared SQLite type of a column; values of that column always have this storage class
/// (or are NULL, or TEXT 'NaN' in a REAL column).
enum class StorageClass { Integer, Real, Text, Blob };

/// "INTEGER", "REAL", "TEXT", "BLOB".
const char* storage_class_name(StorageClass c);

/// Approximate in-memory size of a value, for batch byte bounds.
std::size_t value_bytes(const Value& v);

} // namespace pgtide::schema
