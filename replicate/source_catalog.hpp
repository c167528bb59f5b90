// SourceCatalog: what the publications publish, read from the source's catalog.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/pg_connection.hpp"
#include "io/task.hpp"
#include "schema/table.hpp"

namespace pgtide::replicate {

/// A user's per-table settings (DESIGN §6 `[[tables]]`), already parsed.
struct TableOverride {
    std::string schema;
    std::string name;
    std::optional<std::string> target;
    std::optional<std::vector<std::string>> key;
};

/// One published column, with the facts needed to copy it and to cast literals to its type.
struct SourceColumn {
    std::string name;
    std::uint32_t type_oid = 0; ///< as the catalog (and pgoutput's Relation) names it
    std::string type_sql;       ///< format_type(atttypid, atttypmod), for casts
};

/// A published table: the destination's view (schema::Table) plus source-only facts.
struct SourceTable {
    schema::Table table;
    std::vector<SourceColumn> columns; ///< parallel to table.columns
    /// The publications' row filters, OR-ed (a row is published when any accepts it); empty
    /// when some publication publishes every row.
    std::string row_filter;
};

/// An enum, domain or composite type that published columns use (directly, as an array
/// element, or through another such type), as SQL that creates it.
struct UserType {
    std::string schema;
    std::string name;
    std::string definition; ///< CREATE TYPE … / CREATE DOMAIN …, as the type's catalog says
};

/// The definition text user_types() gives a type, computed by the server from its catalog, as a
/// SQL expression over `t` (pg_type) and `n` (pg_namespace): the same text on the source and on
/// a PostgreSQL destination tells that their types agree.
extern const char* const kUserTypeDefinitionSql;

/// A SQL expression that estimates the rows of the relation whose OID the SQL expression
/// `relation` gives: pg_class.reltuples scaled to the relation's size on disk now (a table that
/// grew since its last ANALYZE), or its size over a guessed row width when it was never
/// analyzed; a partitioned table's is the sum of its leaves'. Cheap for a thousand relations
/// (pg_partition_tree is called for partitioned ones only), but it waits for each relation's
/// lock, as the copy that follows it does.
std::string estimated_rows_sql(const std::string& relation);

/// Reads publications, columns, types and keys through an ordinary SQL connection.
class SourceCatalog {
public:
    /// Every table of `publications` (deduplicated), in a stable order. Throws DefiniteError
    /// (exit 3) for a missing publication, a table without a usable key, or target-name
    /// collisions. Suspends.
    io::Task<std::vector<SourceTable>> published_tables(io::PgConnection& conn,
                                                        std::vector<std::string> publications,
                                                        std::vector<TableOverride> overrides);
    /// What published_names() tells of a table.
    struct PublishedName {
        std::string membership;     ///< schema::Table::publication_membership
        std::string source_columns; ///< schema::Table::source_columns
    };
    /// The names (`schema.name`) of the tables published_tables() returns, each with its
    /// publication membership and column numbers, and nothing else read: for a cheap look for
    /// tables the publications gained, or lost and gained again, and for columns dropped and
    /// added again. Suspends.
    static io::Task<std::map<std::string, PublishedName>>
    published_names(io::PgConnection& conn, std::vector<std::string> publications);

    /// Resolves type OIDs to the TypeRef the codecs need (domains to their base type, arrays to
    /// their element). Caches. Suspends only for OIDs it has not seen.
    io::Task<schema::TypeRef> resolve(io::PgConnection& conn, std::uint32_t type_oid);

    /// The enum, domain and composite types the columns of `tables` need, each after the types
    /// it depends on. Suspends.
    io::Task<std::vector<UserType>> user_types(io::PgConnection& conn,
                                               std::vector<SourceTable> tables);

    /// format_type(type_oid, typmod) on the source: the column type a PostgreSQL destination
    /// declares. Caches. Suspends only for pairs it has not seen.
    io::Task<std::string> format_type(io::PgConnection& conn, std::uint32_t type_oid,
                                      std::int32_t typmod);

    /// The missing values of the columns of relation `relid` (or of its partitions) that have
    /// one: the value rows older than the column hold (`ADD COLUMN ... DEFAULT` with a
    /// non-volatile default), as the column type's text output, by column name. Suspends.
    io::Task<std::map<std::string, std::string>> missing_values(io::PgConnection& conn,
                                                                std::uint32_t relid);

    /// The STORAGE of the columns of relation `relid` whose storage is not their type's
    /// default (`ALTER COLUMN ... SET STORAGE`), as the SQL word, by column name. Suspends.
    io::Task<std::map<std::string, std::string>> column_storage(io::PgConnection& conn,
                                                                std::uint32_t relid);

private:
    struct TypeRow {
        char typtype = 'b';
        std::uint32_t basetype = 0;
        std::uint32_t elem = 0;
        char category = 'U';
    };
    io::Task<void> load_types(io::PgConnection& conn, std::vector<std::uint32_t> oids);
    schema::TypeRef resolve_cached(std::uint32_t oid) const;

    std::map<std::uint32_t, TypeRow> types_;
    std::map<std::pair<std::uint32_t, std::int32_t>, std::string> type_sql_;
};

/// Whether two publication memberships (schema::Table::publication_membership) name a catalog
/// row in common. None in common means the table may have been published by none of the
/// publications in between, when the stream sent none of its changes.
bool share_a_membership(const std::string& a, const std::string& b);

/// schema::Table::source_columns of the columns (attnum, name): in attnum order, comma-separated,
/// each its number, a space and its name double-quoted (inner quotes doubled): `1 "id",4 "b"`.
std::string encode_column_numbers(const std::vector<std::pair<int, std::string>>& columns);

/// The name of a column that `recorded` and `now` (encode_column_numbers) both have, under
/// different numbers: dropped and added again in between, which leaves every existing row
/// without its old value and sends the stream nothing. nullopt when there is none, or when
/// either text is empty (not recorded) or unreadable.
std::optional<std::string> column_added_again(std::string_view recorded, std::string_view now);

} // namespace pgtide::replicate
