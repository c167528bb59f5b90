// SnapshotCopier: parallel keyset-paged binary COPY under an exported snapshot.
#include "replicate/snapshot_copier.hpp"

#include <algorithm>

#include "io/log.hpp"
#include "io/when_all.hpp"
#include "replicate/errors.hpp"
#include "replicate/session.hpp"
#include "schema/binary_copy.hpp"
#include "schema/codec.hpp"
#include "schema/sql_quote.hpp"

namespace pgtide::replicate {

namespace {

std::string describe_key(const schema::Table& table, const schema::Row& row) {
    std::string s;
    for (std::size_t i = 0; i < table.key_columns.size(); ++i) {
        const auto k = table.key_columns[i];
        if (i) {
            s += ", ";
        }
        s += table.columns[k].name + "=";
        const auto& v = row[k];
        if (auto* n = std::get_if<std::int64_t>(&v)) {
            s += std::to_string(*n);
        } else if (auto* t = std::get_if<std::string>(&v)) {
            s += t->size() > 64 ? t->substr(0, 64) + "…" : *t;
        } else {
            s += "?";
        }
    }
    return s;
}

} // namespace

SnapshotCopier::SnapshotCopier(std::string dsn, std::string snapshot_name,
                               const std::vector<SourceTable>& tables, SnapshotOptions options)
    : dsn_(std::move(dsn)), snapshot_name_(std::move(snapshot_name)), tables_(tables),
      options_(options) {}

std::string SnapshotCopier::page_query(const SourceTable& st, const std::vector<std::string>& after,
                                       std::int64_t limit) {
    const schema::Table& t = st.table;
    std::string select;
    for (std::size_t i = 0; i < t.columns.size(); ++i) {
        if (i) {
            select += ", ";
        }
        const std::string column = "src." + schema::quote_identifier(t.columns[i].name);
        if (schema::has_binary_decoder(t.columns[i].type)) {
            select += column;
        } else {
            // The type's output function, as the stream prints it: `::text` is not always
            // that (inet's cast to text keeps the /32 that its output omits).
            select +=
                "CASE WHEN " + column + " IS NULL THEN NULL ELSE format('%s', " + column + ") END";
        }
    }
    // The text form of every non-integer key column, for the next page's literals.
    for (auto k : t.key_columns) {
        if (t.columns[k].storage != schema::StorageClass::Integer) {
            select += ", " + schema::quote_identifier(t.columns[k].name) + "::text";
        }
    }
    std::string keys;
    for (std::size_t i = 0; i < t.key_columns.size(); ++i) {
        if (i) {
            keys += ", ";
        }
        // Qualified: the key's ::text copy in the select list has the same output name.
        keys += "src." + schema::quote_identifier(t.columns[t.key_columns[i]].name);
    }
    std::string sql = "COPY (SELECT " + select + " FROM " + schema::quote_identifier(t.schema) +
                      "." + schema::quote_identifier(t.name) + " AS src";
    std::string where = st.row_filter.empty() ? "" : "(" + st.row_filter + ")";
    if (!after.empty()) {
        where += where.empty() ? "(" : " AND (";
        where += keys + ") > (";
        for (std::size_t i = 0; i < after.size(); ++i) {
            if (i) {
                where += ", ";
            }
            where += after[i];
        }
        where += ")";
    }
    if (!where.empty()) {
        sql += " WHERE " + where;
    }
    sql += " ORDER BY " + keys + " LIMIT " + std::to_string(limit) + ") TO STDOUT (FORMAT binary)";
    return sql;
}

io::Task<void> SnapshotCopier::run(io::Channel<ApplyWork>& out) {
    const int n = std::max(1, std::min<int>(options_.parallel_tables, int(tables_.size())));
    std::vector<io::Task<void>> readers;
    for (int i = 0; i < n; ++i) {
        readers.push_back(reader(this, &out));
    }
    co_await io::when_all(std::move(readers));
}

io::Task<void> SnapshotCopier::reader(SnapshotCopier* self, io::Channel<ApplyWork>* out) {
    io::PgConnection conn = co_await io::PgConnection::connect(
        self->dsn_, sql_connection_params(self->options_.application_name));
    co_await conn.exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    co_await conn.exec("SET TRANSACTION SNAPSHOT " + conn.escape_literal(self->snapshot_name_));
    while (self->next_table_ < self->tables_.size()) {
        const std::size_t index = self->next_table_++;
        co_await self->copy_table(conn, index, *out);
    }
    co_await conn.exec("COMMIT");
}

io::Task<void> SnapshotCopier::copy_table(io::PgConnection& conn, std::size_t index,
                                          io::Channel<ApplyWork>& out) {
    const SourceTable& st = tables_[index];
    const schema::Table& t = st.table;
    io::log_info("copying table",
                 {{"table", t.qualified()}, {"estimated_rows", std::to_string(st.estimated_rows)}});
    std::vector<std::string> after;
    std::int64_t total = 0;
    CopyRows batch{index, {}};
    std::uint64_t batch_bytes = 0;
    std::vector<std::optional<std::string_view>> fields;
    for (;;) {
        if (options_.stop_requested != nullptr && *options_.stop_requested) {
            throw StopRequested();
        }
        co_await conn.copy_out_start(page_query(st, after, options_.page_rows));
        schema::BinaryCopyParser parser;
        std::int64_t in_page = 0;
        schema::Row last;
        std::vector<std::string> last_key_text;
        for (;;) {
            std::optional<io::PgBuffer> chunk = co_await conn.copy_out_next();
            if (!chunk) {
                break;
            }
            parser.feed(chunk->view());
            while (parser.next(fields) == schema::BinaryCopyParser::Status::RowReady) {
                if (fields.size() < t.columns.size()) {
                    throw InternalError("COPY of " + t.qualified() + " returned " +
                                        std::to_string(fields.size()) + " columns, expected " +
                                        std::to_string(t.columns.size()));
                }
                schema::Row row;
                row.reserve(t.columns.size());
                std::uint64_t row_bytes = 0;
                for (std::size_t c = 0; c < t.columns.size(); ++c) {
                    const auto& f = fields[c];
                    if (!f) {
                        row.emplace_back(schema::Null{});
                        continue;
                    }
                    row_bytes += f->size();
                    try {
                        row.push_back(schema::has_binary_decoder(t.columns[c].type)
                                          ? schema::decode_binary(t.columns[c].type, *f)
                                          : schema::decode_text(t.columns[c].type, *f));
                    } catch (const std::exception& e) {
                        throw DefiniteError(ExitCode::Other,
                                            std::string(e.what()) + " in column \"" +
                                                t.columns[c].name + "\" while copying " +
                                                t.qualified());
                    }
                }
                if (row_bytes > options_.max_row_bytes) {
                    throw DefiniteError(
                        ExitCode::Other,
                        "row of " + t.qualified() + " (key " + describe_key(t, row) + ") is " +
                            std::to_string(row_bytes) + " bytes, over max_row_bytes " +
                            std::to_string(options_.max_row_bytes));
                }
                last_key_text.clear();
                std::size_t extra = t.columns.size();
                for (auto k : t.key_columns) {
                    if (t.columns[k].storage == schema::StorageClass::Integer) {
                        last_key_text.push_back(std::to_string(std::get<std::int64_t>(row[k])));
                    } else {
                        const auto& f = fields.at(extra++);
                        last_key_text.push_back(conn.escape_literal(f ? *f : std::string_view{}) +
                                                "::" + st.columns[k].type_sql);
                    }
                }
                batch_bytes += row_bytes + 16 * row.size();
                batch.rows.push_back(std::move(row));
                ++in_page;
                if (std::int64_t(batch.rows.size()) >= options_.batch_rows ||
                    batch_bytes >= options_.batch_bytes) {
                    total += std::int64_t(batch.rows.size());
                    ApplyWork work(std::move(batch)); // named: see tests/lint_layers.sh
                    co_await out.send(std::move(work));
                    batch = CopyRows{index, {}};
                    batch_bytes = 0;
                }
            }
        }
        if (in_page < options_.page_rows) {
            break;
        }
        after = std::move(last_key_text);
    }
    if (!batch.rows.empty()) {
        total += std::int64_t(batch.rows.size());
        ApplyWork work(std::move(batch));
        co_await out.send(std::move(work));
    }
    ApplyWork work(CopyComplete{index, total});
    co_await out.send(std::move(work));
}

} // namespace pgtide::replicate
