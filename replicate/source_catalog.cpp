// SourceCatalog: publications, columns, types and keys from the source catalog.
#include "replicate/source_catalog.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "replicate/errors.hpp"
#include "schema/codec.hpp"
#include "schema/sql_quote.hpp"

namespace pgtide::replicate {

namespace {

constexpr std::uint32_t kTextOid = 25;

// Query parameters. A function, not a braced list at the call site: GCC 12 miscompiles
// initializer lists inside co_await expressions ("array used as initializer").
template <class... S> std::vector<std::optional<std::string>> params(S&&... s) {
    std::vector<std::optional<std::string>> out;
    (out.emplace_back(std::forward<S>(s)), ...);
    return out;
}

std::string oid_array_literal(const std::vector<std::uint32_t>& oids) {
    std::string s = "{";
    for (std::size_t i = 0; i < oids.size(); ++i) {
        if (i) {
            s += ',';
        }
        s += std::to_string(oids[i]);
    }
    return s + "}";
}

// A relation's estimated rows (c, its pg_class row) without touching the relation: the larger
// of the last ANALYZE's count and the statistics' live rows (inserts since are counted there,
// and a never analyzed table has reltuples -1); -1 (unknown) for a partitioned table, which
// has neither. pg_relation_size would be exact but waits for a lock, and one running DDL of a
// published table would then hold up every read of the publications.
constexpr const char* kCatalogEstimateSql =
    "CASE WHEN c.relkind = 'p' THEN -1 "
    "ELSE greatest(c.reltuples, pg_stat_get_live_tuples(c.oid))::bigint END";

// The relations the publications publish as themselves: oid, schema, name, estimated rows
// (kCatalogEstimateSql, or NULL without `estimates`: the publication poll has no use for them),
// membership. A partition is left out when one of its ancestors is listed
// by a publication that publishes via the partition root: pgoutput then publishes its changes as
// the topmost such ancestor, whichever other publication lists the partition itself (as
// PostgreSQL 16's pg_get_publication_tables does for several publications; 15 lists both). The
// membership is the sorted OIDs of the catalog rows that publish the relation
// (pg_publication_rel of it or an ancestor, pg_publication_namespace of their schemas, a FOR ALL
// TABLES publication; the ancestors function lists nothing for a table that is no partition):
// every ADD TABLE or ADD TABLES IN SCHEMA writes a row with a new OID. $1: the publications, a
// text array.
std::string published_relations_sql(int server_version, bool estimates) {
    std::string schemas;
    if (server_version >= 150000) { // pg_publication_namespace is new in 15
        schemas = "  UNION SELECT pn.oid FROM pg_publication_namespace pn "
                  "  JOIN pg_publication p ON p.oid = pn.pnpubid "
                  "  WHERE p.pubname = ANY($1::text[]) AND (pn.pnnspid = c.relnamespace "
                  "  OR pn.pnnspid IN (SELECT ac.relnamespace FROM pg_partition_ancestors(c.oid) a "
                  "    JOIN pg_class ac ON ac.oid = a.relid)) ";
    }
    return "SELECT DISTINCT c.oid, n.nspname, c.relname, " +
           std::string(estimates ? kCatalogEstimateSql : "NULL::bigint") +
           ", "
           "array_to_string(ARRAY(SELECT m FROM ("
           "  SELECT pr.oid AS m FROM pg_publication_rel pr "
           "  JOIN pg_publication p ON p.oid = pr.prpubid "
           "  WHERE p.pubname = ANY($1::text[]) "
           "  AND (pr.prrelid = c.oid "
           "  OR pr.prrelid IN (SELECT relid FROM pg_partition_ancestors(c.oid))) " +
           schemas +
           "  UNION SELECT p.oid FROM pg_publication p "
           "  WHERE p.pubname = ANY($1::text[]) AND p.puballtables"
           ") s ORDER BY m), ',') "
           "FROM pg_publication_tables pt "
           "JOIN pg_namespace n ON n.nspname = pt.schemaname "
           "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename "
           "WHERE pt.pubname = ANY($1::text[]) "
           "AND NOT (c.relispartition AND EXISTS ("
           "  SELECT 1 FROM pg_partition_ancestors(c.oid) a "
           "  JOIN pg_class ac ON ac.oid = a.relid AND ac.oid <> c.oid "
           "  JOIN pg_namespace an ON an.oid = ac.relnamespace "
           "  JOIN pg_publication_tables pa ON pa.schemaname = an.nspname "
           "    AND pa.tablename = ac.relname "
           "  JOIN pg_publication p ON p.pubname = pa.pubname "
           "  WHERE p.pubviaroot AND pa.pubname = ANY($1::text[]))) "
           "ORDER BY 2, 3";
}

// The rows of pg_publication_tables (pt) of publications $2 (a text array) about the tables
// whose OIDs (c.oid) are in $1 (an oid array): one per publication that publishes the table.
constexpr const char* kPublicationRowsOfTables =
    "FROM pg_publication_tables pt JOIN pg_namespace n ON n.nspname = pt.schemaname "
    "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename "
    "WHERE pt.pubname = ANY($2::text[]) AND c.oid = ANY($1::oid[])";

// The missing values (the value rows older than a column hold, `ADD COLUMN ... DEFAULT` with a
// non-volatile default) of the relations whose OIDs are in $1 (an oid array), as the type's text
// output in a one-element array: relation, column, value. From the relation or, for a
// partitioned table, which has no rows of its own, from a partition.
constexpr const char* kMissingValuesSql =
    "SELECT DISTINCT ON (r.relid, m.attname) r.relid, m.attname, m.attmissingval::text "
    "FROM unnest($1::oid[]) r(relid) "
    "CROSS JOIN LATERAL (SELECT r.relid AS member "
    "  UNION SELECT relid FROM pg_partition_tree(r.relid::regclass)) tree "
    "JOIN pg_attribute m ON m.attrelid = tree.member "
    "WHERE m.atthasmissing AND NOT m.attisdropped AND m.attnum > 0 "
    "ORDER BY r.relid, m.attname, m.attrelid";

// The column numbers (schema::Table::source_columns) of the relations whose OIDs are in
// oid_list (an oid array literal), by OID: every column, published or not, as a column
// dropped and added again under the name of an unpublished one is rare and costs only a copy.
io::Task<std::map<std::uint32_t, std::string>> read_column_numbers(io::PgConnection& conn,
                                                                   std::string oid_list) {
    const std::string sql = "SELECT a.attrelid, a.attnum, a.attname FROM pg_attribute a "
                            "WHERE a.attrelid = ANY($1::oid[]) AND a.attnum > 0 "
                            "AND NOT a.attisdropped ORDER BY a.attrelid, a.attnum";
    io::PgResult r = co_await conn.exec_params(sql, params(oid_list));
    std::map<std::uint32_t, std::vector<std::pair<int, std::string>>> columns;
    for (int i = 0; i < r.rows(); ++i) {
        columns[std::uint32_t(std::stoul(std::string(r.get(i, 0))))].emplace_back(
            std::stoi(std::string(r.get(i, 1))), std::string(r.get(i, 2)));
    }
    std::map<std::uint32_t, std::string> out;
    for (const auto& [oid, list] : columns) {
        out.emplace(oid, encode_column_numbers(list));
    }
    co_return out;
}

// Splits a PostgreSQL text array of names as array_to_json would not: we ask the server for
// one name per row instead, so this only has to deal with simple rows.
std::int64_t to_int64(std::string_view s) {
    return std::stoll(std::string(s));
}

// The one element of the array literal `literal` ("{7}", "{\"a b\"}"), unquoted; nullopt for
// NULL. Throws DefiniteError for anything else.
std::optional<std::string> single_array_element(std::string_view literal, const std::string& what) {
    const auto fail = [&]() {
        return DefiniteError(ExitCode::Other, "the source's missing value of " + what +
                                                  " is not a one-element array: " +
                                                  std::string(literal.substr(0, 200)));
    };
    if (literal.size() < 2 || literal.front() != '{' || literal.back() != '}') {
        throw fail();
    }
    const std::string_view inner = literal.substr(1, literal.size() - 2);
    if (inner.empty() || inner.front() != '"') {
        if (inner == "NULL") {
            return std::nullopt;
        }
        return std::string(inner);
    }
    std::string out;
    std::size_t i = 1;
    for (; i < inner.size() && inner[i] != '"'; ++i) {
        if (inner[i] == '\\' && i + 1 < inner.size()) {
            ++i;
        }
        out += inner[i];
    }
    if (i + 1 != inner.size()) {
        throw fail();
    }
    return out;
}

} // namespace

std::string estimated_rows_sql(const std::string& relation) {
    // Rows per page of the last ANALYZE times the pages now; never analyzed (reltuples -1) or
    // empty then: the size over a row of the columns' widths (32 bytes for a variable one).
    const std::string rows =
        "sum(CASE WHEN c.reltuples >= 0 AND c.relpages > 0 "
        "THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / "
        "current_setting('block_size')::float8) "
        "ELSE pg_relation_size(c.oid) / (24 + (SELECT coalesce(sum(CASE WHEN a.attlen > 0 "
        "THEN a.attlen ELSE 32 END), 0) FROM pg_attribute a WHERE a.attrelid = c.oid "
        "AND a.attnum > 0 AND NOT a.attisdropped))::float8 END)";
    return "(coalesce((SELECT " + rows + " FROM pg_class c WHERE c.oid = " + relation +
           " AND c.relkind <> 'p'), 0) + coalesce((SELECT " + rows +
           " FROM pg_class pr CROSS JOIN LATERAL pg_partition_tree(pr.oid::regclass) pt "
           "JOIN pg_class c ON c.oid = pt.relid WHERE pr.oid = " +
           relation + " AND pr.relkind = 'p' AND pt.isleaf AND c.relkind <> 'p'), 0))::bigint";
}

std::string encode_column_numbers(const std::vector<std::pair<int, std::string>>& columns) {
    std::string out;
    for (const auto& [number, name] : columns) {
        if (!out.empty()) {
            out += ',';
        }
        out += std::to_string(number) + " " + schema::quote_identifier(name);
    }
    return out;
}

namespace {

// encode_column_numbers' text as name -> number; nullopt when it is not that text.
std::optional<std::map<std::string, int>> parse_column_numbers(std::string_view text) {
    std::map<std::string, int> out;
    std::size_t at = 0;
    while (at < text.size()) {
        const std::size_t space = text.find(' ', at);
        if (space == std::string_view::npos || space == at || space + 1 >= text.size() ||
            text[space + 1] != '"') {
            return std::nullopt;
        }
        int number = 0;
        for (std::size_t i = at; i < space; ++i) {
            if (text[i] < '0' || text[i] > '9' || number > 100000) {
                return std::nullopt;
            }
            number = number * 10 + (text[i] - '0');
        }
        std::string name;
        std::size_t i = space + 2;
        for (;; ++i) {
            if (i >= text.size()) {
                return std::nullopt;
            }
            if (text[i] == '"') {
                if (i + 1 < text.size() && text[i + 1] == '"') {
                    name += '"';
                    ++i;
                    continue;
                }
                break;
            }
            name += text[i];
        }
        out[std::move(name)] = number;
        at = i + 1;
        if (at < text.size()) {
            if (text[at] != ',') {
                return std::nullopt;
            }
            ++at;
        }
    }
    return out;
}

} // namespace

std::optional<std::string> column_added_again(std::string_view recorded, std::string_view now) {
    const auto before = parse_column_numbers(recorded);
    const auto after = parse_column_numbers(now);
    if (!before || !after) {
        return std::nullopt;
    }
    for (const auto& [name, number] : *before) {
        if (const auto found = after->find(name);
            found != after->end() && found->second != number) {
            return name;
        }
    }
    return std::nullopt;
}

bool share_a_membership(const std::string& a, const std::string& b) {
    const auto split = [](const std::string& s) {
        std::set<std::string> out;
        std::size_t from = 0;
        while (from < s.size()) {
            std::size_t to = s.find(',', from);
            if (to == std::string::npos) {
                to = s.size();
            }
            out.insert(s.substr(from, to - from));
            from = to + 1;
        }
        return out;
    };
    const std::set<std::string> left = split(a);
    for (const std::string& m : split(b)) {
        if (left.contains(m)) {
            return true;
        }
    }
    return false;
}

io::Task<std::map<std::string, SourceCatalog::PublishedName>>
SourceCatalog::published_names(io::PgConnection& conn, std::vector<std::string> publications) {
    io::PgResult rels =
        co_await conn.exec_params(published_relations_sql(conn.server_version(), false),
                                  params(schema::text_array_literal(publications)));
    std::vector<std::uint32_t> oids;
    for (int r = 0; r < rels.rows(); ++r) {
        oids.push_back(std::uint32_t(std::stoul(std::string(rels.get(r, 0)))));
    }
    const std::string oid_list = oid_array_literal(oids);
    const std::map<std::uint32_t, std::string> numbers =
        co_await read_column_numbers(conn, oid_list);
    std::map<std::string, PublishedName> names;
    for (int r = 0; r < rels.rows(); ++r) {
        PublishedName& n = names[std::string(rels.get(r, 1)) + "." + std::string(rels.get(r, 2))];
        n.membership = std::string(rels.get(r, 4));
        if (const auto found = numbers.find(oids[std::size_t(r)]); found != numbers.end()) {
            n.source_columns = found->second;
        }
    }
    co_return names;
}

io::Task<std::vector<SourceTable>>
SourceCatalog::published_tables(io::PgConnection& conn, std::vector<std::string> publications,
                                std::vector<TableOverride> overrides) {
    // Every publication must exist: a typo would otherwise replicate nothing, silently.
    io::PgResult pubs =
        co_await conn.exec_params("SELECT p FROM unnest($1::text[]) p WHERE NOT EXISTS "
                                  "(SELECT 1 FROM pg_publication WHERE pubname = p)",
                                  params(schema::text_array_literal(publications)));
    if (pubs.rows() > 0) {
        throw DefiniteError(ExitCode::SourceNotReady,
                            "publication \"" + std::string(pubs.get(0, 0)) +
                                "\" does not exist on the source; create it (CREATE PUBLICATION "
                                "... FOR TABLE ...) or fix source.publications");
    }

    io::PgResult rels =
        co_await conn.exec_params(published_relations_sql(conn.server_version(), true),
                                  params(schema::text_array_literal(publications)));

    // One query per kind of fact for all tables at once, not per table: a publication of a
    // thousand tables would otherwise cost thousands of round trips, and every query that reads
    // pg_publication_tables evaluates the publications in full (FOR ALL TABLES: every table).
    std::vector<SourceTable> out;
    std::map<std::uint32_t, std::size_t> by_oid;
    std::vector<std::uint32_t> oids;
    for (int r = 0; r < rels.rows(); ++r) {
        SourceTable st;
        st.table.schema = std::string(rels.get(r, 1));
        st.table.name = std::string(rels.get(r, 2));
        st.table.source_oid = std::uint32_t(std::stoul(std::string(rels.get(r, 0))));
        st.table.publication_membership = std::string(rels.get(r, 4));
        st.table.estimated_rows = to_int64(rels.get(r, 3));
        by_oid.emplace(st.table.source_oid, out.size());
        oids.push_back(st.table.source_oid);
        out.push_back(std::move(st));
    }
    if (out.empty()) {
        co_return out;
    }
    const std::string oid_list = oid_array_literal(oids);
    const std::string publication_list = schema::text_array_literal(publications);
    // The table a row of the queries below is about, by the OID in its first column.
    struct ByOid {
        std::vector<SourceTable>& tables;
        const std::map<std::uint32_t, std::size_t>& index;
        SourceTable& operator()(std::string_view oid) const {
            return tables[index.at(std::uint32_t(std::stoul(std::string(oid))))];
        }
    };
    const ByOid table_of{out, by_oid};

    // Published columns: PostgreSQL does not let the publications' column lists of one table
    // differ, so a column is published when every row of pg_publication_tables lists it (or
    // has no list). With each: its STORAGE when not its type's default (`ALTER COLUMN ... SET
    // STORAGE`), as the SQL word.
    // Named first: GCC 12 mishandles temporaries built inside a co_await expression.
    const std::string columns_sql =
        "SELECT a.attrelid, a.attname, a.atttypid, format_type(a.atttypid, a.atttypmod), "
        "a.atttypmod, CASE WHEN a.attstorage = t.typstorage THEN NULL "
        "  WHEN a.attstorage = 'p' THEN 'PLAIN' WHEN a.attstorage = 'm' THEN 'MAIN' "
        "  WHEN a.attstorage = 'e' THEN 'EXTERNAL' ELSE 'EXTENDED' END "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "JOIN (SELECT c.oid, pt.attnames " +
        std::string(kPublicationRowsOfTables) +
        ") p ON p.oid = a.attrelid "
        "WHERE a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' "
        "GROUP BY a.attrelid, a.attnum, a.attname, a.atttypid, a.atttypmod, a.attstorage, "
        "t.typstorage "
        "HAVING bool_and(p.attnames IS NULL OR a.attname = ANY(p.attnames)) "
        "ORDER BY a.attrelid, a.attnum";
    io::PgResult cols = co_await conn.exec_params(columns_sql, params(oid_list, publication_list));
    std::vector<std::uint32_t> type_oids;
    for (int c = 0; c < cols.rows(); ++c) {
        const auto oid = std::uint32_t(std::stoul(std::string(cols.get(c, 2))));
        if (!types_.count(oid)) {
            type_oids.push_back(oid);
        }
    }
    std::sort(type_oids.begin(), type_oids.end());
    type_oids.erase(std::unique(type_oids.begin(), type_oids.end()), type_oids.end());
    co_await load_types(conn, std::move(type_oids));
    for (int c = 0; c < cols.rows(); ++c) {
        SourceTable& st = table_of(cols.get(c, 0));
        SourceColumn sc;
        sc.name = std::string(cols.get(c, 1));
        sc.type_oid = std::uint32_t(std::stoul(std::string(cols.get(c, 2))));
        sc.type_sql = std::string(cols.get(c, 3));
        schema::TableColumn tc;
        tc.type_sql = sc.type_sql;
        tc.name = sc.name;
        tc.typmod = std::int32_t(std::stol(std::string(cols.get(c, 4))));
        tc.type = co_await resolve(conn, sc.type_oid);
        tc.storage = schema::storage_class(tc.type);
        if (!cols.is_null(c, 5)) {
            tc.pg_storage = std::string(cols.get(c, 5));
        }
        st.columns.push_back(std::move(sc));
        st.table.columns.push_back(std::move(tc));
    }

    const std::map<std::uint32_t, std::string> numbers =
        co_await read_column_numbers(conn, oid_list);
    for (SourceTable& st : out) {
        if (const auto found = numbers.find(st.table.source_oid); found != numbers.end()) {
            st.table.source_columns = found->second;
        }
    }

    io::PgResult missing = co_await conn.exec_params(kMissingValuesSql, params(oid_list));
    for (int i = 0; i < missing.rows(); ++i) {
        SourceTable& st = table_of(missing.get(i, 0));
        const std::string column(missing.get(i, 1));
        std::optional<std::string> value =
            single_array_element(missing.get(i, 2), "column \"" + column + "\"");
        for (schema::TableColumn& tc : st.table.columns) {
            if (tc.name == column && value) {
                tc.missing_text = *value;
            }
        }
    }

    // Row filters: a row is published when any publication's filter accepts it. In the
    // publications' creation order, so that the text is the same from one run to the next.
    const std::string filters_sql =
        "SELECT c.oid, pt.rowfilter " + std::string(kPublicationRowsOfTables) +
        " ORDER BY c.oid, (SELECT pp.oid FROM pg_publication pp WHERE pp.pubname = pt.pubname)";
    io::PgResult filters =
        co_await conn.exec_params(filters_sql, params(oid_list, publication_list));
    std::set<std::uint32_t> unfiltered;
    for (int f = 0; f < filters.rows(); ++f) {
        SourceTable& st = table_of(filters.get(f, 0));
        if (unfiltered.contains(st.table.source_oid)) {
            continue;
        }
        if (filters.is_null(f, 1)) {
            st.row_filter.clear();
            unfiltered.insert(st.table.source_oid);
            continue;
        }
        st.row_filter +=
            (st.row_filter.empty() ? "(" : " OR (") + std::string(filters.get(f, 1)) + ")";
    }

    // Keys. Updates and deletes identify rows by the replica identity, so the key is the
    // replica identity index when there is one, else the primary key, else the user's `key`
    // (which must then lie within the replica identity, unless it is FULL).
    io::PgResult identity = co_await conn.exec_params(
        "SELECT c.oid, c.relreplident, a.attname FROM pg_class c "
        "LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indexrelid = "
        "  (SELECT i2.indexrelid FROM pg_index i2 WHERE i2.indrelid = c.oid "
        "   AND ((c.relreplident = 'i' AND i2.indisreplident) "
        "        OR (c.relreplident <> 'i' AND i2.indisprimary)) LIMIT 1) "
        "LEFT JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, ord) ON true "
        "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
        "WHERE c.oid = ANY($1::oid[]) ORDER BY c.oid, k.ord",
        params(oid_list));
    std::map<std::uint32_t, char> replident;
    std::map<std::uint32_t, std::vector<std::string>> identity_names;
    for (int k = 0; k < identity.rows(); ++k) {
        const std::uint32_t oid = table_of(identity.get(k, 0)).table.source_oid;
        replident.emplace(oid, identity.get(k, 1).empty() ? 'd' : identity.get(k, 1)[0]);
        if (!identity.is_null(k, 2)) {
            identity_names[oid].emplace_back(identity.get(k, 2));
        }
    }
    // REPLICA IDENTITY FULL: any unique key works; the primary key if there is one.
    std::map<std::uint32_t, std::vector<std::string>> primary_keys;
    if (std::any_of(replident.begin(), replident.end(),
                    [](const auto& r) { return r.second == 'f'; })) {
        io::PgResult keys = co_await conn.exec_params(
            "SELECT i.indrelid, a.attname FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, ord) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = ANY($1::oid[]) AND i.indisprimary ORDER BY i.indrelid, k.ord",
            params(oid_list));
        for (int k = 0; k < keys.rows(); ++k) {
            primary_keys[table_of(keys.get(k, 0)).table.source_oid].emplace_back(keys.get(k, 1));
        }
    }

    std::map<std::string, std::string> target_owner; // lower-cased target → source name
    for (SourceTable& st : out) {
        const TableOverride* ov = nullptr;
        for (const auto& o : overrides) {
            if (o.schema == st.table.schema && o.name == st.table.name) {
                ov = &o;
            }
        }
        st.table.target = ov && ov->target
                              ? *ov->target
                              : schema::default_target_name(st.table.schema, st.table.name);

        const std::uint32_t oid = st.table.source_oid;
        const char ident = replident.contains(oid) ? replident.at(oid) : 'd';
        const std::vector<std::string>& ident_names = identity_names[oid];
        std::vector<std::string> key_names;
        if (ov && ov->key) {
            key_names = *ov->key;
            for (const auto& k : key_names) {
                const bool covered =
                    std::find(ident_names.begin(), ident_names.end(), k) != ident_names.end();
                if (!covered && ident != 'f' && !ident_names.empty()) {
                    throw DefiniteError(
                        ExitCode::SourceNotReady,
                        "key column \"" + k + "\" of table " + st.table.qualified() +
                            " is not part of its replica identity, so deletes and key changes "
                            "would not carry it: use the replica identity's columns as key, or "
                            "ALTER TABLE " +
                            st.table.qualified() + " REPLICA IDENTITY FULL");
                }
            }
        } else if (ident != 'f' || !ident_names.empty()) {
            key_names = ident_names;
        } else {
            key_names = primary_keys[oid];
        }
        if (key_names.empty()) {
            throw DefiniteError(
                ExitCode::SourceNotReady,
                "table " + st.table.qualified() +
                    " has no usable key: give it a primary key (ALTER TABLE ... ADD PRIMARY "
                    "KEY), a replica identity index (ALTER TABLE ... REPLICA IDENTITY USING "
                    "INDEX ...), or set key = [...] in its [[tables]] entry");
        }
        for (const auto& k : key_names) {
            auto it = std::find_if(st.table.columns.begin(), st.table.columns.end(),
                                   [&](const schema::TableColumn& c) { return c.name == k; });
            if (it == st.table.columns.end()) {
                throw DefiniteError(ExitCode::SourceNotReady,
                                    "key column \"" + k + "\" of table " + st.table.qualified() +
                                        " is not published (column list) or does not exist");
            }
            it->key = true;
            st.table.key_columns.push_back(std::size_t(it - st.table.columns.begin()));
        }

        std::string lowered = st.table.target;
        std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                       [](unsigned char ch) { return char(std::tolower(ch)); });
        if (auto [it, fresh] = target_owner.emplace(lowered, st.table.qualified()); !fresh) {
            throw DefiniteError(ExitCode::Usage,
                                "tables " + it->second + " and " + st.table.qualified() +
                                    " both map to the destination table \"" + st.table.target +
                                    "\"; set target = \"...\" in a [[tables]] entry for one");
        }
    }
    co_return out;
}

io::Task<void> SourceCatalog::load_types(io::PgConnection& conn, std::vector<std::uint32_t> oids) {
    while (!oids.empty()) {
        io::PgResult r = co_await conn.exec_params(
            "SELECT oid, typtype, typbasetype, typelem, typcategory FROM pg_type "
            "WHERE oid = ANY($1::oid[])",
            params(oid_array_literal(oids)));
        std::vector<std::uint32_t> next;
        for (int i = 0; i < r.rows(); ++i) {
            TypeRow row;
            const auto oid = std::uint32_t(std::stoul(std::string(r.get(i, 0))));
            row.typtype = r.get(i, 1).empty() ? 'b' : r.get(i, 1)[0];
            row.basetype = std::uint32_t(std::stoul(std::string(r.get(i, 2))));
            row.elem = std::uint32_t(std::stoul(std::string(r.get(i, 3))));
            row.category = r.get(i, 4).empty() ? 'U' : r.get(i, 4)[0];
            types_[oid] = row;
            for (std::uint32_t ref : {row.basetype, row.elem}) {
                if (ref != 0 && !types_.count(ref)) {
                    next.push_back(ref);
                }
            }
        }
        for (auto o : oids) {
            if (!types_.count(o)) {
                types_[o] = TypeRow{}; // unknown: treated as a plain base type (text output)
            }
        }
        oids = std::move(next);
    }
}

schema::TypeRef SourceCatalog::resolve_cached(std::uint32_t oid) const {
    // Follow domains down to their base type (domains of domains too).
    for (int depth = 0; depth < 32; ++depth) {
        const auto it = types_.find(oid);
        if (it == types_.end() || it->second.typtype != 'd') {
            break;
        }
        oid = it->second.basetype;
    }
    const auto it = types_.find(oid);
    if (it != types_.end() && it->second.typtype == 'e') {
        return schema::TypeRef{kTextOid, 0}; // an enum's binary form is its label, as text
    }
    schema::TypeRef ref{oid, 0};
    if (it != types_.end() && it->second.category == 'A' && it->second.elem != 0) {
        ref.element_oid = resolve_cached(it->second.elem).oid;
    }
    return ref;
}

// NOT NULL comes from typnotnull: PostgreSQL 17+ also keeps it as a pg_constraint row ('n').
const char* const kUserTypeDefinitionSql = R"sql(
CASE t.typtype
WHEN 'e' THEN format('CREATE TYPE %I.%I AS ENUM (%s)', n.nspname, t.typname,
    (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder)
     FROM pg_enum e WHERE e.enumtypid = t.oid))
WHEN 'd' THEN format('CREATE DOMAIN %I.%I AS %s', n.nspname, t.typname,
        format_type(t.typbasetype, t.typtypmod))
    || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
    || coalesce(' DEFAULT ' || t.typdefault, '')
    || coalesce((SELECT string_agg(' CONSTRAINT ' || quote_ident(c.conname) || ' '
                                   || pg_get_constraintdef(c.oid), '' ORDER BY c.conname)
                 FROM pg_constraint c WHERE c.contypid = t.oid AND c.contype <> 'n'), '')
WHEN 'c' THEN format('CREATE TYPE %I.%I AS (%s)', n.nspname, t.typname,
    (SELECT string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', '
                       ORDER BY a.attnum)
     FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped))
END)sql";

io::Task<std::vector<UserType>> SourceCatalog::user_types(io::PgConnection& conn,
                                                          std::vector<SourceTable> tables) {
    std::vector<std::string> names;
    for (const auto& st : tables) {
        names.push_back(schema::quote_identifier(st.table.schema) + "." +
                        schema::quote_identifier(st.table.name));
    }
    // Every type reachable from the columns, through array elements, domain bases and
    // composite attributes; the deepest dependency first.
    io::PgResult r = co_await conn.exec_params(std::string(R"sql(
WITH RECURSIVE used(oid, depth) AS (
    SELECT CASE WHEN t.typcategory = 'A' AND t.typelem <> 0 THEN t.typelem ELSE t.oid END, 0
    FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
    WHERE a.attrelid = ANY ($1::regclass[]) AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
    SELECT CASE WHEN d.typcategory = 'A' AND d.typelem <> 0 THEN d.typelem ELSE d.oid END,
           u.depth + 1
    FROM used u
    JOIN pg_type t ON t.oid = u.oid
    JOIN LATERAL (SELECT t.typbasetype AS dep WHERE t.typtype = 'd'
                  UNION ALL
                  SELECT ca.atttypid FROM pg_attribute ca
                  WHERE t.typtype = 'c' AND ca.attrelid = t.typrelid AND ca.attnum > 0
                    AND NOT ca.attisdropped) x ON true
    JOIN pg_type d ON d.oid = x.dep
    WHERE u.depth < 16
)
SELECT n.nspname, t.typname, )sql") + kUserTypeDefinitionSql +
                                                   R"sql(
FROM (SELECT oid, max(depth) AS depth FROM used GROUP BY oid) u
JOIN pg_type t ON t.oid = u.oid
JOIN pg_namespace n ON n.oid = t.typnamespace
LEFT JOIN pg_class r ON r.oid = t.typrelid
WHERE t.typtype IN ('e', 'd', 'c') AND (t.typtype <> 'c' OR r.relkind = 'c')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY u.depth DESC, n.nspname, t.typname)sql",
                                               params(schema::text_array_literal(names)));
    std::vector<UserType> out;
    for (int i = 0; i < r.rows(); ++i) {
        out.push_back(
            UserType{std::string(r.get(i, 0)), std::string(r.get(i, 1)), std::string(r.get(i, 2))});
    }
    co_return out;
}

io::Task<std::string> SourceCatalog::format_type(io::PgConnection& conn, std::uint32_t type_oid,
                                                 std::int32_t typmod) {
    const std::pair<std::uint32_t, std::int32_t> key(type_oid, typmod);
    if (const auto it = type_sql_.find(key); it != type_sql_.end()) {
        co_return it->second;
    }
    io::PgResult r =
        co_await conn.exec_params("SELECT format_type($1::oid, $2::int)",
                                  params(std::to_string(type_oid), std::to_string(typmod)));
    std::string sql(r.get(0, 0));
    type_sql_.emplace(key, sql);
    co_return sql;
}

io::Task<schema::TypeRef> SourceCatalog::resolve(io::PgConnection& conn, std::uint32_t type_oid) {
    // Walk until every type the chain needs is cached.
    for (;;) {
        std::vector<std::uint32_t> missing;
        std::uint32_t oid = type_oid;
        for (int depth = 0; depth < 32; ++depth) {
            const auto it = types_.find(oid);
            if (it == types_.end()) {
                missing.push_back(oid);
                break;
            }
            if (it->second.typtype == 'd') {
                oid = it->second.basetype;
                continue;
            }
            if (it->second.category == 'A' && it->second.elem != 0 &&
                !types_.count(it->second.elem)) {
                missing.push_back(it->second.elem);
            }
            break;
        }
        if (missing.empty()) {
            co_return resolve_cached(type_oid);
        }
        co_await load_types(conn, std::move(missing));
    }
}

io::Task<std::map<std::string, std::string>> SourceCatalog::missing_values(io::PgConnection& conn,
                                                                           std::uint32_t relid) {
    // Named first: GCC 12 miscompiles initializer lists inside co_await expressions.
    const std::string relids = oid_array_literal(std::vector<std::uint32_t>(1, relid));
    io::PgResult r = co_await conn.exec_params(kMissingValuesSql, params(relids));
    std::map<std::string, std::string> values;
    for (int i = 0; i < r.rows(); ++i) {
        const std::string column(r.get(i, 1));
        std::optional<std::string> value =
            single_array_element(r.get(i, 2), "column \"" + column + "\"");
        if (value) {
            values.emplace(column, std::move(*value));
        }
    }
    co_return values;
}

io::Task<std::map<std::string, std::string>> SourceCatalog::column_storage(io::PgConnection& conn,
                                                                           std::uint32_t relid) {
    io::PgResult r = co_await conn.exec_params(
        "SELECT a.attname, CASE a.attstorage WHEN 'p' THEN 'PLAIN' WHEN 'm' THEN 'MAIN' "
        "WHEN 'e' THEN 'EXTERNAL' ELSE 'EXTENDED' END "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped "
        "AND a.attstorage <> t.typstorage",
        params(std::to_string(relid)));
    std::map<std::string, std::string> storage;
    for (int i = 0; i < r.rows(); ++i) {
        storage.emplace(std::string(r.get(i, 0)), std::string(r.get(i, 1)));
    }
    co_return storage;
}

} // namespace pgtide::replicate
