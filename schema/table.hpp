// Table: a replicated table as both sides see it: source name, target name, typed columns, key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schema/value.hpp"

namespace pgtide::schema {

/// What the codecs need to know of a column's type, resolved from the source catalog:
/// domains are replaced by their base type, arrays name their element's (base) type.
struct TypeRef {
    std::uint32_t oid = 0;         ///< base type OID (a domain's base, never the domain)
    std::uint32_t element_oid = 0; ///< for array types: the element's base type OID; else 0
    friend bool operator==(const TypeRef&, const TypeRef&) = default;
};

struct TableColumn {
    std::string name; ///< source column name (also the destination column name)
    TypeRef type;     ///< resolved type
    std::int32_t typmod = -1;
    StorageClass storage = StorageClass::Text; ///< declared SQLite type
    std::string type_sql; ///< the source's format_type(type, typmod): a PostgreSQL column type
    bool key = false;     ///< part of the ordering/identity key
    /// What the rows older than the column hold on the source, as its text output: the
    /// attmissingval of `ADD COLUMN ... DEFAULT <non-volatile>`, which writes no WAL for them.
    /// A destination that adds the column gives it this default, so that those rows (and any
    /// the stream inserts from before the ALTER, which do not name the column) hold it too.
    std::optional<std::string> missing_text;
    /// The source column's STORAGE (PLAIN, MAIN, EXTERNAL or EXTENDED) when it is not its
    /// type's default, else empty: a PostgreSQL destination gives it to the columns it creates.
    /// Read from the catalog (pgoutput does not send it); not part of what makes a schema change.
    std::string pg_storage;
    friend bool operator==(const TableColumn&, const TableColumn&) = default;
};

struct Table {
    std::string schema;                   ///< source schema, e.g. "public"
    std::string name;                     ///< source table name
    std::string target;                   ///< destination table name (DESIGN §5 naming)
    std::vector<TableColumn> columns;     ///< published columns, source order
    std::vector<std::size_t> key_columns; ///< indexes into columns, key order
    /// Values are the source's text output, verbatim, instead of canonical values: what a
    /// PostgreSQL destination reads back with the same types (readers and the stream then
    /// select and decode every column as text).
    bool source_text = false;
    /// With source_text: rows of a copy carry each value as the source's binary COPY output
    /// instead, passed through to the destination's binary COPY (every column's type is
    /// binary_portable). Stream changes stay text.
    bool copy_binary = false;
    /// pg_class.oid of the source table (0 when not read from the catalog): the same name with
    /// another OID is a table dropped and created again.
    std::uint32_t source_oid = 0;
    /// The sorted OIDs, comma-separated, of the catalog rows through which the publications
    /// publish the table (SourceCatalog); empty when not read. A table taken out of the
    /// publications and put back has none of its old ones.
    std::string publication_membership;
    /// The source's column numbers (pg_attribute.attnum) by name, as encode_column_numbers
    /// writes them; empty when not read. A column dropped and added again under its name has
    /// another number, and its old values are gone from the source without a change the
    /// stream sends: the table is copied again.
    std::string source_columns;
    /// The source's estimate of its rows when it was described (SourceCatalog), -1 when not
    /// read: for progress, and for a destination to choose how to load it.
    std::int64_t estimated_rows = -1;

    /// "schema.name" as the user writes it (unquoted).
    std::string qualified() const { return schema + "." + name; }
};

/// The destination name DESIGN §5 gives a source table: public.t → t, s.t → s__t.
std::string default_target_name(const std::string& schema, const std::string& name);

/// Whether PostgreSQL changes a column from `before`'s type to `after`'s (ALTER COLUMN ... TYPE
/// without USING) leaving the canonical value of every existing row as it was: integer
/// widening, varchar/text, a longer or unbounded varchar, varbit, numeric keeping its scale,
/// more time precision. Other changes may rewrite values (char(n) padding, numeric scale,
/// rounding) in rows the stream never sends again.
bool type_change_keeps_values(const TableColumn& before, const TableColumn& after);

} // namespace pgtide::schema
