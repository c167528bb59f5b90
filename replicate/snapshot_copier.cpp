// SnapshotCopier: parallel keyset-paged binary COPY under an exported snapshot.
#include "replicate/snapshot_copier.hpp"

#include <algorithm>
#include <cstdio>

#include "io/log.hpp"
#include "io/when_all.hpp"
#include "replicate/errors.hpp"
#include "replicate/session.hpp"
#include "schema/binary_copy.hpp"
#include "schema/codec.hpp"
#include "schema/pg_types.hpp"
#include "schema/sql_quote.hpp"

namespace pgtide::replicate {

namespace {

using schema::append_be32;

/// Whether a key column's literal for the next page is its value's digits: int2, int4, int8 and
/// oid (or a domain over one). A bool is stored as an integer too, but the literal 1 does not
/// compare with a boolean: it is quoted and cast ('1'::boolean is true).
bool integer_literal_key(const schema::TableColumn& c) {
    return c.storage == schema::StorageClass::Integer && c.type.oid != schema::oid::kBool;
}

/// Whether a key column of a binary copy has its next-page literal printed from its binary
/// value, so that the page query selects no `::text` of it: that column cost the source's
/// readers about a third more CPU per row of a narrow table (bench/RESULTS.md, 2026-12-04).
bool binary_integer_key(const schema::Table& t, std::size_t k) {
    return t.copy_binary && integer_literal_key(t.columns[k]);
}

/// Prints into `key` the binary integer key columns (binary_integer_key) whose values `raw`
/// holds as read, once a batch, page or range ends: printing every row's key cost as much as
/// reading it.
void print_integer_keys(const schema::Table& t, const std::vector<std::string>& raw,
                        std::vector<std::string>& key) {
    for (std::size_t n = 0; n < t.key_columns.size(); ++n) {
        const auto k = t.key_columns[n];
        if (binary_integer_key(t, k) && !raw[n].empty()) {
            key[n] = std::to_string(
                std::get<std::int64_t>(schema::decode_binary(t.columns[k].type, raw[n])));
        }
    }
}

/// An empty batch of range `range` of table `table`, with room reserved for `rows` rows, or
/// for `bytes` of tuples when the table is copied in binary.
CopyRows empty_batch(std::size_t table, std::size_t range, bool binary, std::size_t rows,
                     std::size_t bytes) {
    CopyRows b{table, {}, range};
    if (binary) {
        b.tuples.bytes.reserve(bytes);
        b.tuples.version_at.reserve(rows);
    } else {
        b.rows.reserve(rows);
    }
    return b;
}

/// Appends the first `columns` of `fields` (a row of the source's binary COPY) to `tuples` as
/// a destination tuple: field count, those fields as they are, and the 8-byte _pgtide_lsn
/// field, left zero for the destination to fill in. Returns the bytes of the values.
std::uint64_t append_tuple(CopyTuples& tuples,
                           const std::vector<std::optional<std::string_view>>& fields,
                           std::size_t columns) {
    std::string& out = tuples.bytes;
    const auto count = std::uint16_t(columns + 1);
    out += char(count >> 8);
    out += char(count & 0xff);
    std::uint64_t bytes = 0;
    for (std::size_t c = 0; c < columns; ++c) {
        const auto& f = fields[c];
        if (!f) {
            append_be32(out, 0xffffffffu);
            continue;
        }
        append_be32(out, std::uint32_t(f->size()));
        out.append(*f);
        bytes += f->size();
    }
    append_be32(out, 8);
    tuples.version_at.push_back(out.size());
    out.append(8, '\0');
    return bytes;
}

/// A key as its columns' text output (`texts`, one per key column), for messages.
std::string describe_key(const schema::Table& table, const std::vector<std::string>& texts) {
    std::string s;
    for (std::size_t i = 0; i < table.key_columns.size() && i < texts.size(); ++i) {
        s += (i ? ", " : "") + table.columns[table.key_columns[i]].name + "=" +
             (texts[i].size() > 64 ? texts[i].substr(0, 64) + "…" : texts[i]);
    }
    return s;
}

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

/// The key of a row of a binary copy (`fields`, its values as read), for messages.
std::string describe_binary_key(const schema::Table& table,
                                const std::vector<std::optional<std::string_view>>& fields) {
    schema::Row row(table.columns.size(), schema::Value{schema::Null{}});
    for (const auto k : table.key_columns) {
        if (fields[k] && schema::has_binary_decoder(table.columns[k].type)) {
            row[k] = schema::decode_binary(table.columns[k].type, *fields[k]);
        }
    }
    return describe_key(table, row);
}

// Rows to sample per range, and at least, when choosing cut points: SYSTEM sampling reads whole
// pages, whose rows often hold neighbouring keys, so a sample needs many pages to be spread.
constexpr std::int64_t kSampleRowsPerRange = 1000;
constexpr std::int64_t kMinSampleRows = 50000;
// At least, for the chunks of a range. Their sizes matter less than the ranges' balance: one
// reader reads a range's chunks in turn, and a chunk twice the planned size only costs a copy
// cut short inside it more to read again. The source reads the sample before the range's
// first row: 50,000 rows of the bench's 300,000-row `wide` (its 5 chunks) took 104–140 ms of
// a backend alone and 273 ms beside the other copies; 5,000 rows took 27 ms and placed the
// cuts within 2 % of the table of those.
constexpr std::int64_t kMinChunkSampleRows = 5000;

// Rows of a table to sample when it is cut into `pieces` pieces (ranges, or chunks of all its
// ranges), at least `at_least`.
std::int64_t sample_rows(std::int64_t pieces, std::int64_t at_least = kMinSampleRows) {
    return std::max(at_least, kSampleRowsPerRange * pieces);
}

std::string table_sql(const schema::Table& t) {
    return schema::quote_identifier(t.schema) + "." + schema::quote_identifier(t.name);
}

std::string first_key_sql(const schema::Table& t) {
    return "src." + schema::quote_identifier(t.columns[t.key_columns.at(0)].name);
}

// An integer's text ("-12"): safe to splice into SQL as it is.
bool is_integer_text(std::string_view text) {
    if (!text.empty() && text.front() == '-') {
        text.remove_prefix(1);
    }
    return !text.empty() && text.size() <= 20 &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The literals of a key (one text output per key column), to continue a keyset after it:
// integers as they are (their text is digits), every other value quoted and cast to its type.
std::vector<std::string> key_literals(io::PgConnection& conn, const SourceTable& st,
                                      const std::vector<std::string>& key) {
    const schema::Table& t = st.table;
    std::vector<std::string> out;
    for (std::size_t n = 0; n < key.size() && n < t.key_columns.size(); ++n) {
        const auto k = t.key_columns[n];
        const bool literal =
            !t.source_text && integer_literal_key(t.columns[k]) && is_integer_text(key[n]);
        out.push_back(literal ? key[n]
                              : conn.escape_literal(key[n]) + "::" + st.columns[k].type_sql);
    }
    return out;
}

// A number as an SQL float literal ("%.17g": exact; may use an exponent, which SQL accepts).
std::string float_sql(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

} // namespace

SnapshotCopier::SnapshotCopier(std::string dsn, std::string snapshot_name,
                               const std::vector<SourceTable>& tables, SnapshotOptions options)
    : dsn_(std::move(dsn)), snapshot_name_(std::move(snapshot_name)), tables_(tables),
      options_(options) {}

void SnapshotCopier::resume(std::size_t table, CopyKey key) {
    resume_[table] = std::move(key);
}

std::string SnapshotCopier::copy_shape(const SourceTable& st) {
    const schema::Table& t = st.table;
    std::string shape = t.source_text ? "text" : "values";
    for (std::size_t c = 0; c < t.columns.size(); ++c) {
        shape += "\n" + t.columns[c].name + " " + st.columns.at(c).type_sql;
    }
    shape += "\nkey";
    for (const auto k : t.key_columns) {
        shape += " " + std::to_string(k);
    }
    shape += "\nfilter " + st.row_filter;
    return shape;
}

namespace {

// The select list of a page or chunk: every column (binary, or its type's output when the
// values are decoded from text), then, for a keyset read, the text form of every key column
// whose next-page literal is not printed from its binary value (binary_integer_key).
std::string select_list(const schema::Table& t, bool key_texts) {
    std::string select;
    for (std::size_t i = 0; i < t.columns.size(); ++i) {
        if (i) {
            select += ", ";
        }
        const std::string column = "src." + schema::quote_identifier(t.columns[i].name);
        if (t.copy_binary || (!t.source_text && schema::has_binary_decoder(t.columns[i].type))) {
            select += column;
        } else {
            // The type's output function, as the stream prints it: `::text` is not always
            // that (inet's cast to text keeps the /32 that its output omits).
            select +=
                "CASE WHEN " + column + " IS NULL THEN NULL ELSE format('%s', " + column + ") END";
        }
    }
    if (!key_texts) {
        return select;
    }
    // The text form of every non-integer key column (when the values stay binary, of every key
    // column but int2, int4, int8 and oid: binary_integer_key), for the next page's literals.
    for (auto k : t.key_columns) {
        if ((t.copy_binary && !binary_integer_key(t, k)) ||
            (!t.copy_binary && t.columns[k].storage != schema::StorageClass::Integer)) {
            select += ", " + schema::quote_identifier(t.columns[k].name) + "::text";
        }
    }
    return select;
}

// The row filter and the range's bounds on the first key column, half-open (every key falls in
// one range), ANDed; empty when there are none.
std::string range_condition(const SourceTable& st, const KeyRange& range) {
    const schema::Table& t = st.table;
    std::string where = st.row_filter.empty() ? "" : "(" + st.row_filter + ")";
    if (range.lower) {
        where += (where.empty() ? "" : " AND ") + first_key_sql(t) + " >= " + *range.lower;
    }
    if (range.upper) {
        where += (where.empty() ? "" : " AND ") + first_key_sql(t) + " < " + *range.upper;
    }
    return where;
}

} // namespace

std::string SnapshotCopier::page_query(const SourceTable& st, const std::vector<std::string>& after,
                                       std::int64_t limit, const KeyRange& range) {
    const schema::Table& t = st.table;
    std::string keys;
    for (std::size_t i = 0; i < t.key_columns.size(); ++i) {
        if (i) {
            keys += ", ";
        }
        // Qualified: the key's ::text copy in the select list has the same output name.
        keys += "src." + schema::quote_identifier(t.columns[t.key_columns[i]].name);
    }
    std::string sql = "COPY (SELECT " + select_list(t, true) + " FROM " + table_sql(t) + " AS src";
    std::string where = range_condition(st, range);
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

std::string SnapshotCopier::chunk_query(const SourceTable& st, const KeyRange& range) {
    const schema::Table& t = st.table;
    std::string sql = "COPY (SELECT " + select_list(t, false) + " FROM " + table_sql(t) + " AS src";
    const std::string where = range_condition(st, range);
    if (!where.empty()) {
        sql += " WHERE " + where;
    }
    return sql + ") TO STDOUT (FORMAT binary)";
}

bool SnapshotCopier::chunked_key(const schema::Table& t) {
    return !t.key_columns.empty() && integer_literal_key(t.columns[t.key_columns.front()]);
}

int SnapshotCopier::range_count(std::int64_t estimated_rows, std::int64_t split_rows, int readers) {
    if (split_rows <= 0 || readers < 2 || estimated_rows <= split_rows) {
        return 1;
    }
    const std::int64_t by_size = (estimated_rows + split_rows - 1) / split_rows;
    return int(std::min<std::int64_t>(kMaxRanges, std::max<std::int64_t>(readers, by_size)));
}

void SnapshotCopier::check_stop() const {
    if (options_.stop_requested != nullptr && *options_.stop_requested) {
        throw StopRequested();
    }
}

io::Task<void> SnapshotCopier::run(io::Channel<ApplyWork>& out) {
    // The first reader plans the work inside the snapshot, then copies like the others; the
    // other readers connect once it is known how many there is work for.
    io::PgConnection first = co_await open_reader();
    co_await plan(first);
    // The plans first, in table order: the applier knows every range before any row of it.
    for (std::size_t i = 0; i < tables_.size(); ++i) {
        ApplyWork planned(CopyPlanned{i, plans_[i]});
        if (!co_await out.send(std::move(planned))) {
            co_return;
        }
        if (copies_[i].ranges_left == 0) {
            // Every range was done before: only the CopyComplete was missing.
            ApplyWork complete(CopyComplete{i, 0});
            if (!co_await out.send(std::move(complete))) {
                co_return;
            }
        }
    }
    const int n = std::max(1, std::min<int>(options_.parallel_tables, int(work_.size())));
    std::vector<io::Task<void>> readers;
    readers.push_back(reader(this, &out, std::move(first)));
    for (int i = 1; i < n; ++i) {
        io::PgConnection later; // connects inside its reader
        readers.push_back(reader(this, &out, std::move(later)));
    }
    co_await io::when_all(std::move(readers));
}

io::Task<io::PgConnection> SnapshotCopier::open_reader() {
    io::PgConnection conn =
        co_await io::PgConnection::connect(dsn_, sql_connection_params(options_.application_name));
    co_await conn.exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    co_await conn.exec("SET TRANSACTION SNAPSHOT " + conn.escape_literal(snapshot_name_));
    co_return conn;
}

io::Task<void> SnapshotCopier::plan(io::PgConnection& conn) {
    copies_.assign(tables_.size(), TableCopy{});
    work_.clear();
    std::vector<std::int64_t> estimates(tables_.size(), 0);
    const bool may_split =
        options_.split_rows > 0 && options_.parallel_tables >= 2 && !tables_.empty();
    // Chunks are sized by the estimate too.
    const bool estimate = may_split || (options_.read_chunks && !tables_.empty());
    if (estimate) {
        estimates = co_await estimate_rows(conn);
    }
    plans_.assign(tables_.size(), CopyKey{});
    for (std::size_t i = 0; i < tables_.size(); ++i) {
        copies_[i].estimated_rows =
            estimate ? estimates[i] : std::max<std::int64_t>(0, tables_[i].table.estimated_rows);
        plans_[i].shape = copy_shape(tables_[i]);
        const std::string& first_type =
            tables_[i].columns.at(tables_[i].table.key_columns.at(0)).type_sql;
        if (const auto resumed = resume_.find(i); resumed != resume_.end()) {
            // The earlier copy's ranges, each from where it got.
            plans_[i].ranges = resumed->second.ranges;
            const auto& ranges = plans_[i].ranges;
            copies_[i].ranges = int(ranges.size());
            copies_[i].ranges_left = 0;
            for (std::size_t r = 0; r < ranges.size(); ++r) {
                if (ranges[r].done) {
                    continue;
                }
                copies_[i].ranges_left += 1;
                Work w{i, KeyRange{}, int(r) + 1, {}};
                if (ranges[r].lower) {
                    w.range.lower = conn.escape_literal(*ranges[r].lower) + "::" + first_type;
                }
                if (ranges[r].upper) {
                    w.range.upper = conn.escape_literal(*ranges[r].upper) + "::" + first_type;
                }
                w.after = key_literals(conn, tables_[i], ranges[r].after);
                work_.push_back(std::move(w));
            }
            if (ranges.size() > 1) {
                stats_.tables_split += 1;
                stats_.ranges_planned += std::int64_t(ranges.size());
            }
            continue;
        }
        const int want = range_count(estimates[i], options_.split_rows, options_.parallel_tables);
        std::vector<std::string> cuts;
        if (want > 1) {
            check_stop();
            cuts = co_await cut_points(conn, i, want, sample_rows(want));
        }
        if (cuts.empty()) {
            work_.push_back(Work{i, KeyRange{}, 1, {}});
            plans_[i].ranges.push_back(RangeProgress{});
            continue;
        }
        const int ranges = int(cuts.size()) + 1;
        copies_[i].ranges = ranges;
        copies_[i].ranges_left = ranges;
        stats_.tables_split += 1;
        stats_.ranges_planned += ranges;
        for (int r = 0; r < ranges; ++r) {
            KeyRange range;
            RangeProgress progress;
            if (r > 0) {
                progress.lower = cuts[std::size_t(r - 1)];
                range.lower = conn.escape_literal(*progress.lower) + "::" + first_type;
            }
            if (r + 1 < ranges) {
                progress.upper = cuts[std::size_t(r)];
                range.upper = conn.escape_literal(*progress.upper) + "::" + first_type;
            }
            work_.push_back(Work{i, std::move(range), r + 1, {}});
            plans_[i].ranges.push_back(std::move(progress));
        }
        io::log_info("splitting table into key ranges",
                     {{"table", tables_[i].table.qualified()},
                      {"estimated_rows", std::to_string(estimates[i])},
                      {"ranges", std::to_string(ranges)},
                      {"key", tables_[i].table.columns[tables_[i].table.key_columns.at(0)].name}});
    }
    // Every table's first item before any table's second: tables are copied at once rather
    // than one table's ranges taking every reader, so that a destination that writes each
    // table through a connection of its own (PostgreSQL) writes them at once too.
    std::vector<std::size_t> seen(tables_.size(), 0);
    std::vector<std::pair<std::size_t, Work>> ranked;
    for (Work& w : work_) {
        const std::size_t rank = seen[w.table]++;
        ranked.emplace_back(rank, std::move(w));
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    work_.clear();
    for (auto& [rank, w] : ranked) {
        work_.push_back(std::move(w));
    }
}

// Every table's row count as the planner would estimate it: reltuples/relpages scaled to the
// current number of pages (a table that grew since its last ANALYZE counts its new pages), or,
// never analyzed, its size over a width guessed from the column types; a partitioned table
// sums its leaves. One query for all tables.
io::Task<std::vector<std::int64_t>> SnapshotCopier::estimate_rows(io::PgConnection& conn) {
    std::string relations;
    for (const auto& st : tables_) {
        relations += (relations.empty() ? "" : ", ") + conn.escape_literal(table_sql(st.table));
    }
    const std::string sql = "SELECT " + estimated_rows_sql("u.rel") + " FROM unnest(ARRAY[" +
                            relations + "]::regclass[]) WITH ORDINALITY AS u(rel, i) ORDER BY u.i";
    io::PgResult r = co_await conn.exec(sql);
    std::vector<std::int64_t> out;
    for (int row = 0; row < r.rows(); ++row) {
        out.push_back(std::stoll(std::string(r.get(row, 0))));
    }
    if (out.size() != tables_.size()) {
        throw InternalError("row estimates: " + std::to_string(out.size()) + " rows for " +
                            std::to_string(tables_.size()) + " tables");
    }
    co_return out;
}

// Up to pieces - 1 cut points of the first key column inside `within`, as its text output, in
// the column's own order (percentile_disc returns them in the order of its fractions, sorted by
// the column's operator class and collation), from a sample of about `sample` rows of the
// whole table; repeats are dropped. Empty when the sample is.
io::Task<std::vector<std::string>> SnapshotCopier::cut_points(io::PgConnection& conn,
                                                              std::size_t index, int pieces,
                                                              std::int64_t sample,
                                                              KeyRange within) {
    const SourceTable& st = tables_[index];
    const schema::Table& t = st.table;
    std::string fractions;
    for (int i = 1; i < pieces; ++i) {
        fractions += (i > 1 ? "," : "") + float_sql(double(i) / pieces);
    }
    const std::int64_t estimated_rows = copies_[index].estimated_rows;
    std::string from = table_sql(t) + " AS src";
    if (sample < estimated_rows) {
        from += " TABLESAMPLE SYSTEM (" +
                float_sql(100.0 * double(sample) / double(estimated_rows)) + ") REPEATABLE (0)";
    }
    if (const std::string where = range_condition(st, within); !where.empty()) {
        from += " WHERE " + where;
    }
    const std::string sql = "SELECT u.cut::text FROM unnest((SELECT percentile_disc('{" +
                            fractions + "}'::float8[]) WITHIN GROUP (ORDER BY " + first_key_sql(t) +
                            ") FROM " + from + ")) WITH ORDINALITY AS u(cut, i) ORDER BY u.i";
    io::PgResult r = co_await conn.exec(sql);
    std::vector<std::string> cuts;
    std::string previous;
    for (int row = 0; row < r.rows(); ++row) {
        if (r.is_null(row, 0)) {
            continue;
        }
        const std::string text(r.get(row, 0));
        if (!cuts.empty() && text == previous) {
            continue;
        }
        previous = text;
        cuts.push_back(text);
    }
    co_return cuts;
}

io::Task<void> SnapshotCopier::reader(SnapshotCopier* self, io::Channel<ApplyWork>* out,
                                      io::PgConnection conn) {
    if (!conn.is_open()) {
        conn = co_await self->open_reader();
    }
    while (self->next_work_ < self->work_.size()) {
        const Work work = self->work_[self->next_work_++];
        const bool applier_listens = co_await self->copy_range(conn, work, *out);
        if (!applier_listens) {
            co_return; // the applier stopped (and says why): reading on would be wasted work
        }
    }
    co_await conn.exec("COMMIT");
}

io::Task<bool> SnapshotCopier::copy_range(io::PgConnection& conn, Work work,
                                          io::Channel<ApplyWork>& out) {
    const std::size_t index = work.table;
    const SourceTable& st = tables_[index];
    const schema::Table& t = st.table;
    TableCopy& copy = copies_[index];
    if (!copy.started) {
        copy.started = true;
        io::log_info("copying table", {{"table", t.qualified()},
                                       {"estimated_rows", std::to_string(copy.estimated_rows)},
                                       {"ranges", std::to_string(copy.ranges)}});
    }
    const std::string part = std::to_string(work.part) + "/" + std::to_string(copy.ranges);
    if (copy.ranges > 1) {
        io::log_info("copying key range", {{"table", t.qualified()}, {"range", part}});
    }
    copy.in_flight += 1;
    stats_.max_ranges_in_flight = std::max(stats_.max_ranges_in_flight, copy.in_flight);
    std::vector<std::string> after = work.after;
    std::vector<std::string> last_key(t.key_columns.size());
    // A binary integer key column's value as read (2, 4 or 8 bytes), printed into last_key only
    // when last_key is used (print_integer_keys).
    std::vector<std::string> last_raw(t.key_columns.size());
    std::int64_t total = 0;
    // Reserved, so that a batch does not grow by reallocation (capped: batch_rows may be big).
    const auto reserve = std::size_t(std::min<std::int64_t>(options_.batch_rows, 4096));
    const auto range_index = std::size_t(work.part - 1);
    // Tuples need room for a whole batch and the row that fills it (capped: batch_bytes may
    // be big).
    const auto reserve_bytes =
        std::size_t(std::min<std::uint64_t>(options_.batch_bytes, 16u << 20) + (64u << 10));
    CopyRows batch = empty_batch(index, range_index, t.copy_binary, reserve, reserve_bytes);
    std::uint64_t batch_bytes = 0;
    std::vector<std::optional<std::string_view>> fields;
    // An integer-keyed range not cut short inside a keyset page is read as unordered chunks
    // (SnapshotOptions::read_chunks): `cuts` are the chunks' bounds inside the range.
    const bool chunked = options_.read_chunks && after.empty() && chunked_key(t);
    std::vector<std::string> cuts;
    std::size_t chunk = 0;
    const std::string& first_type = st.columns.at(t.key_columns.at(0)).type_sql;
    if (chunked) {
        const std::int64_t range_rows = copy.estimated_rows / std::max(1, copy.ranges);
        const std::int64_t per_chunk = std::max<std::int64_t>(1, options_.chunk_rows);
        const auto chunks = int(std::clamp<std::int64_t>(
            range_rows / per_chunk + (range_rows % per_chunk != 0), 1, kMaxChunks));
        if (chunks > 1) {
            check_stop();
            cuts = co_await cut_points(
                conn, index, chunks,
                sample_rows(std::int64_t(chunks) * copy.ranges, kMinChunkSampleRows), work.range);
        }
    }
    for (;;) {
        check_stop();
        std::string query;
        if (chunked) {
            KeyRange bounds;
            bounds.lower = chunk == 0 ? work.range.lower
                                      : conn.escape_literal(cuts[chunk - 1]) + "::" + first_type;
            bounds.upper = chunk == cuts.size()
                               ? work.range.upper
                               : conn.escape_literal(cuts[chunk]) + "::" + first_type;
            query = chunk_query(st, bounds);
        } else {
            query = page_query(st, after, options_.page_rows, work.range);
        }
        co_await conn.copy_out_start(std::move(query));
        schema::BinaryCopyParser parser;
        std::int64_t in_page = 0;
        for (;;) {
            std::optional<io::PgBuffer> data = co_await conn.copy_out_next();
            if (!data) {
                break;
            }
            parser.feed(data->view());
            while (parser.next(fields) == schema::BinaryCopyParser::Status::RowReady) {
                if (fields.size() < t.columns.size()) {
                    throw InternalError("COPY of " + t.qualified() + " returned " +
                                        std::to_string(fields.size()) + " columns, expected " +
                                        std::to_string(t.columns.size()));
                }
                schema::Row row;
                std::uint64_t row_bytes = 0;
                if (t.copy_binary) {
                    row_bytes = append_tuple(batch.tuples, fields, t.columns.size());
                } else {
                    row.reserve(t.columns.size());
                    for (std::size_t c = 0; c < t.columns.size(); ++c) {
                        const auto& f = fields[c];
                        if (!f) {
                            row.emplace_back(schema::Null{});
                            continue;
                        }
                        row_bytes += f->size();
                        try {
                            if (t.source_text) {
                                row.emplace_back(std::string(*f));
                            } else {
                                row.push_back(schema::has_binary_decoder(t.columns[c].type)
                                                  ? schema::decode_binary(t.columns[c].type, *f)
                                                  : schema::decode_text(t.columns[c].type, *f));
                            }
                        } catch (const std::exception& e) {
                            throw DefiniteError(ExitCode::Other,
                                                std::string(e.what()) + " in column \"" +
                                                    t.columns[c].name + "\" while copying " +
                                                    t.qualified());
                        }
                    }
                }
                // The key of the last row read, kept raw: only the page's last row becomes
                // literals (escaping every row's key would allocate for each). A chunk has no
                // order, and so no key reached.
                std::size_t extra = t.columns.size();
                for (std::size_t n = 0; n < t.key_columns.size() && !chunked; ++n) {
                    const auto k = t.key_columns[n];
                    if (binary_integer_key(t, k)) {
                        const auto& f = fields[k];
                        if (!f) {
                            throw DefiniteError(ExitCode::Other,
                                                "a NULL in key column \"" + t.columns[k].name +
                                                    "\" while copying " + t.qualified());
                        }
                        last_raw[n].assign(*f);
                    } else if (t.copy_binary) {
                        // The value is binary: its text output was selected after the columns.
                        const auto& f = fields.at(extra++);
                        last_key[n].assign(f ? *f : std::string_view{});
                    } else if (t.source_text) {
                        // The value is the column's text output already.
                        if (t.columns[k].storage != schema::StorageClass::Integer) {
                            ++extra;
                        }
                        last_key[n].assign(std::get<std::string>(row[k]));
                    } else if (t.columns[k].storage == schema::StorageClass::Integer) {
                        last_key[n].assign(std::to_string(std::get<std::int64_t>(row[k])));
                    } else {
                        const auto& f = fields.at(extra++);
                        last_key[n].assign(f ? *f : std::string_view{});
                    }
                }
                if (row_bytes > options_.max_row_bytes) {
                    std::string key;
                    if (t.copy_binary && chunked) {
                        key = describe_binary_key(t, fields);
                    } else if (t.copy_binary) {
                        print_integer_keys(t, last_raw, last_key);
                        key = describe_key(t, last_key);
                    } else {
                        key = describe_key(t, row);
                    }
                    throw DefiniteError(ExitCode::Other,
                                        "row of " + t.qualified() + " (key " + key + ") is " +
                                            std::to_string(row_bytes) +
                                            " bytes, over max_row_bytes " +
                                            std::to_string(options_.max_row_bytes));
                }
                if (t.copy_binary) {
                    batch_bytes = batch.tuples.bytes.size();
                } else {
                    batch_bytes += row_bytes + 16 * row.size();
                    batch.rows.push_back(std::move(row));
                }
                stats_.rows_read += 1;
                ++in_page;
                if (batch.size() >= options_.batch_rows || batch_bytes >= options_.batch_bytes) {
                    total += batch.size();
                    if (!chunked) {
                        print_integer_keys(t, last_raw, last_key);
                        batch.reached = last_key;
                    }
                    ApplyWork full(std::move(batch)); // named: see tests/lint_layers.sh
                    const bool sent = co_await out.send(std::move(full));
                    if (!sent) {
                        co_return false;
                    }
                    batch = empty_batch(index, range_index, t.copy_binary, reserve, reserve_bytes);
                    batch_bytes = 0;
                }
            }
        }
        if (chunked) {
            stats_.chunks_read += 1;
            if (chunk == cuts.size()) {
                break;
            }
            // Goes with the batch being filled, whose rows (and those before) hold every row
            // below it: the range's progress may go on from there.
            batch.chunks_done_below = cuts[chunk];
            ++chunk;
            continue;
        }
        if (in_page < options_.page_rows) {
            break;
        }
        print_integer_keys(t, last_raw, last_key);
        after = key_literals(conn, st, last_key);
    }
    // The range's last batch, even without rows: it tells the applier the range is done.
    total += batch.size();
    if (batch.size() > 0 && !chunked) {
        print_integer_keys(t, last_raw, last_key);
        batch.reached = last_key;
    }
    batch.range_done = true;
    {
        ApplyWork rows(std::move(batch));
        const bool sent = co_await out.send(std::move(rows));
        if (!sent) {
            co_return false;
        }
    }
    copy.in_flight -= 1;
    copy.rows += total;
    copy.ranges_left -= 1;
    if (copy.ranges > 1) {
        stats_.ranges_copied += 1;
        io::log_info("key range copied",
                     {{"table", t.qualified()}, {"range", part}, {"rows", std::to_string(total)}});
    }
    // The last range of the table to finish reports it: every batch of every range is queued.
    if (copy.ranges_left == 0) {
        ApplyWork complete(CopyComplete{index, copy.rows});
        const bool sent = co_await out.send(std::move(complete));
        if (!sent) {
            co_return false;
        }
    }
    co_return true;
}

} // namespace pgtide::replicate
