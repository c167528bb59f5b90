// Codec: column values from PostgreSQL's binary send format and text output to canonical Values.
#pragma once

#include <string_view>

#include "schema/decode_error.hpp"
#include "schema/table.hpp"
#include "schema/value.hpp"

namespace pgtide::schema {

/// The SQLite storage class of a type's canonical values (DESIGN §5): bool, int2/4/8 and oid
/// are Integer; float4/8 Real (their NaN is TEXT 'NaN'); bytea Blob; everything else,
/// arrays included, Text.
StorageClass storage_class(const TypeRef& t);

/// Whether decode_binary() understands the type. Columns without a binary decoder are read as
/// `col::text` in the snapshot and decoded with decode_text().
bool has_binary_decoder(const TypeRef& t);

/// The canonical Value of a type's binary send format (a binary COPY field, or a pgoutput 'b'
/// column). Equal to decode_text() of the same value's text output. Throws DecodeError naming
/// the type and byte offset on malformed or out-of-range input, or for a type without a
/// binary decoder.
Value decode_binary(const TypeRef& t, std::string_view bytes);

/// The canonical Value of a type's text output under pgtide's session settings (DateStyle=ISO,
/// TimeZone=UTC, IntervalStyle=iso_8601, extra_float_digits=1, bytea_output=hex): a pgoutput
/// 't' column or a `::text` column. Types without a mapping are kept as text. Throws
/// DecodeError naming the type and offset when a mapped type's text is malformed.
Value decode_text(const TypeRef& t, std::string_view text);

/// The value of the hex digit `c` (either case); -1 when `c` is not one.
int hex_value(char c);

} // namespace pgtide::schema
