// PostgresDestination: set-based versioned apply into PostgreSQL over the async connection.
#include "replicate/postgres_destination.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "io/log.hpp"
#include "io/when_all.hpp"
#include "replicate/errors.hpp"
#include "replicate/session.hpp"
#include "replicate/snapshot_copier.hpp"
#include "schema/binary_copy.hpp"
#include "schema/codec.hpp"
#include "schema/pg_types.hpp"
#include "schema/sql_quote.hpp"

namespace pgtide::replicate {

namespace {

using schema::append_be32;
using schema::quote_identifier;

constexpr const char* kCheckpointTable = R"("public"."_pgtide_checkpoint")";
constexpr const char* kTablesTable = R"("public"."_pgtide_tables")";
constexpr const char* kTombstonesTable = R"("public"."_pgtide_tombstones")";
constexpr const char* kLsnColumn = R"("_pgtide_lsn")";
constexpr const char* kDeletedColumn = R"("_pgtide_deleted")";
/// The column of a table written with soft deletes (Deletes::Soft).
constexpr const char* kDeletedColumnDdl = R"("_pgtide_deleted" smallint NOT NULL DEFAULT 0)";
/// COPY data is sent in pieces of about this size.
constexpr std::size_t kCopyChunk = 1u << 20;
/// A table estimated to hold at most this many rows keeps its primary key through its copy
/// (hard deletes). Dropping the key and building it again after the copy costs an index build
/// and its fsync, a fixed cost that rows maintained one by one in the key cost less than below
/// a few thousand rows. By hand, fsync on, a COPY and a commit per table: 100 rows 1.4 ms
/// with the key against 2.6 ms with the drop and the build; 1,000 rows 5.2 against 6.9 ms;
/// 10,000 rows 26 against 23 ms.
constexpr std::int64_t kKeepKeyRows = 5000;
/// A table that keeps its key and is estimated at this many rows or fewer is copied through the
/// main connection, in the main transaction with other tables, not through a lane of its own: a
/// lane commits each table apart (its round of statements and a WAL flush), which for small
/// tables costs more than their rows. Ad hoc, 2 cores, fsync on, copy phase old (a lane each)
/// against new: 1,000 tables of 100 rows 1.8-2.0 s against 0.8-1.1 s; 500 of 1,000 rows
/// 2.0-2.4 s against 1.8-2.0 s; 200 of 5,000 rows 2.6-3.0 s against 3.0-3.1 s (there one
/// backend is the bound, and lanes copy tables side by side).
constexpr std::int64_t kMainConnectionRows = 1000;
/// create_tables creates the tables it lacks over a connection per this many, up to max_lanes.
constexpr std::size_t kTablesPerCreateSession = 16;

constexpr const char* kCreateMetadata = R"sql(
CREATE TABLE IF NOT EXISTS "public"."_pgtide_checkpoint" (
    "slot_name" text NOT NULL PRIMARY KEY,
    "system_identifier" text NOT NULL,
    "timeline" bigint NOT NULL,
    "database" text NOT NULL,
    "epoch" bigint NOT NULL,
    "phase" text NOT NULL,
    "consistent_lsn" bigint NOT NULL,
    "lsn" bigint NOT NULL,
    "owner" text NOT NULL,
    "lease_until" bigint NOT NULL,
    "updated_at" bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS "public"."_pgtide_tables" (
    "slot_name" text NOT NULL,
    "source_table" text NOT NULL,
    "target_table" text NOT NULL,
    "state" text NOT NULL,
    "epoch" bigint NOT NULL,
    "copy_lsn" bigint NOT NULL,
    "rows_copied" bigint NOT NULL,
    "updated_at" bigint NOT NULL,
    "source_oid" bigint NOT NULL DEFAULT 0,
    "membership" text NOT NULL DEFAULT '',
    "copy_key" text NOT NULL DEFAULT '',
    "source_columns" text NOT NULL DEFAULT '',
    PRIMARY KEY ("slot_name", "source_table")
);
-- Written before pgtide recorded source OIDs (0), publication memberships or column numbers
-- (''): unknown;
-- copy keys (''): a copy starts from the beginning.
ALTER TABLE "public"."_pgtide_tables" ADD COLUMN IF NOT EXISTS "source_oid" bigint NOT NULL DEFAULT 0;
ALTER TABLE "public"."_pgtide_tables" ADD COLUMN IF NOT EXISTS "membership" text NOT NULL DEFAULT '';
ALTER TABLE "public"."_pgtide_tables" ADD COLUMN IF NOT EXISTS "copy_key" text NOT NULL DEFAULT '';
ALTER TABLE "public"."_pgtide_tables" ADD COLUMN IF NOT EXISTS "source_columns" text NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS "public"."_pgtide_tombstones" (
    "target_table" text NOT NULL,
    "key" text NOT NULL,
    "lsn" bigint NOT NULL,
    PRIMARY KEY ("target_table", "key")
);
)sql";

std::int64_t unix_ms_now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

/// A session of the destination, main or lane. Its commits must be durable when COMMIT returns:
/// the checkpoint is, before the source is told it may recycle its WAL (DESIGN §1.3). A
/// destination whose sessions commit asynchronously (synchronous_commit = off, chosen there for
/// speed) would lose the last checkpoints in a crash after the source forgot their changes, so
/// pgtide's sessions get `local` then. Every other setting flushes locally already, and stays as
/// the destination chose it (waiting for its synchronous standbys, too).
io::Task<io::PgConnection> connect_session(std::string url, std::string application_name) {
    io::PgConnection conn =
        co_await io::PgConnection::connect(url, sql_connection_params(application_name));
    co_await conn.exec("SELECT pg_catalog.set_config('synchronous_commit', 'local', false) "
                       "WHERE pg_catalog.current_setting('synchronous_commit') = 'off'");
    co_return conn;
}

std::string lsn_text(schema::Lsn lsn) {
    return std::to_string(std::int64_t(lsn.value()));
}

DestinationErrorKind kind_of(const io::PgError& e) {
    const std::string& s = e.sqlstate;
    if (e.connection_lost || s.starts_with("08") || s == "57P01" || s == "57P02" || s == "57P03") {
        return DestinationErrorKind::Io;
    }
    if (s.starts_with("53")) {
        return DestinationErrorKind::Full;
    }
    if (s.starts_with("23")) {
        return DestinationErrorKind::Constraint;
    }
    if (s == "25006" || s == "42501") {
        return DestinationErrorKind::ReadOnly;
    }
    if (s == "40P01" || s == "55P03" || s == "40001") {
        return DestinationErrorKind::Busy;
    }
    return DestinationErrorKind::Other;
}

/// COPY's text format: backslash escapes for the characters that delimit it, \N for NULL.
void append_copy_value(std::string& out, const schema::Value& value) {
    if (const auto* text = std::get_if<std::string>(&value)) {
        for (const char ch : *text) {
            switch (ch) {
            case '\\':
                out += "\\\\";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            default:
                out += ch;
            }
        }
    } else if (std::holds_alternative<schema::Null>(value)) {
        out += "\\N";
    } else if (const auto* i = std::get_if<std::int64_t>(&value)) {
        out += std::to_string(*i);
    } else {
        // Tables of a PostgreSQL destination carry the source's text output only.
        throw InternalError("a PostgreSQL destination was handed a value that is not source text");
    }
}

/// Text of a value for a query parameter (nullopt: NULL).
std::optional<std::string> param_of(const schema::Value& value) {
    if (const auto* text = std::get_if<std::string>(&value)) {
        return *text;
    }
    if (std::holds_alternative<schema::Null>(value)) {
        return std::nullopt;
    }
    if (const auto* i = std::get_if<std::int64_t>(&value)) {
        return std::to_string(*i);
    }
    throw InternalError("a PostgreSQL destination was handed a value that is not source text");
}

std::string join_quoted(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) {
        if (!out.empty()) {
            out += ", ";
        }
        out += quote_identifier(n);
    }
    return out;
}

std::vector<std::string> column_names(const schema::Table& t) {
    std::vector<std::string> names;
    for (const auto& c : t.columns) {
        names.push_back(c.name);
    }
    return names;
}

const std::string& type_of(const schema::Table& t, std::size_t column) {
    const std::string& sql = t.columns.at(column).type_sql;
    if (sql.empty()) {
        throw InternalError("column \"" + t.columns[column].name + "\" of " + t.qualified() +
                            " has no SQL type for a PostgreSQL destination");
    }
    return sql;
}

template <class... S> std::vector<std::optional<std::string>> params(S&&... s) {
    std::vector<std::optional<std::string>> out;
    (out.emplace_back(std::forward<S>(s)), ...);
    return out;
}

/// Writes the progress rows of progress_params: one statement for any number of tables (a
/// round trip each was 4,000 of them for the copy of 1,000 small tables).
std::string progress_upsert_sql() {
    return std::string("INSERT INTO ") + kTablesTable +
           " (slot_name, source_table, target_table, state, epoch, copy_lsn, rows_copied, "
           "updated_at, source_oid, membership, copy_key, source_columns) "
           "SELECT $1, t.source_table, t.target_table, t.state, t.epoch::bigint, "
           "t.copy_lsn::bigint, t.rows_copied::bigint, t.updated_at::bigint, "
           "t.source_oid::bigint, t.membership, t.copy_key, t.source_columns "
           "FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], "
           "$8::text[], $9::text[], $10::text[], $11::text[], $12::text[]) AS t(source_table, "
           "target_table, state, epoch, copy_lsn, rows_copied, updated_at, source_oid, "
           "membership, copy_key, source_columns) "
           "ON CONFLICT (slot_name, source_table) DO UPDATE SET "
           "target_table = excluded.target_table, state = excluded.state, "
           "epoch = excluded.epoch, copy_lsn = excluded.copy_lsn, "
           "rows_copied = excluded.rows_copied, updated_at = excluded.updated_at, "
           "source_oid = excluded.source_oid, membership = excluded.membership, "
           "copy_key = excluded.copy_key, source_columns = excluded.source_columns";
}

/// The parameters of progress_upsert_sql for `rows`; of two rows of one table, the later wins
/// (one statement cannot update a row twice).
std::vector<std::optional<std::string>> progress_params(const std::string& slot,
                                                        const std::vector<TableProgress>& rows) {
    std::map<std::string, const TableProgress*> last;
    for (const TableProgress& p : rows) {
        last.insert_or_assign(p.source_table, &p);
    }
    std::vector<std::vector<std::string>> columns(11);
    const std::string now = std::to_string(unix_ms_now());
    for (const auto& [name, p] : last) {
        const std::string values[] = {p->source_table,
                                      p->target_table,
                                      std::string(to_string(p->state)),
                                      std::to_string(p->epoch),
                                      lsn_text(p->copy_lsn),
                                      std::to_string(p->rows_copied),
                                      now,
                                      std::to_string(p->source_oid),
                                      p->membership,
                                      p->copy_key,
                                      p->source_columns};
        for (std::size_t c = 0; c < columns.size(); ++c) {
            columns[c].push_back(values[c]);
        }
    }
    std::vector<std::optional<std::string>> out{slot};
    for (const auto& column : columns) {
        out.emplace_back(schema::text_array_literal(column));
    }
    return out;
}

bool has_unchanged(const schema::Row& row) {
    for (const auto& v : row) {
        if (std::holds_alternative<schema::UnchangedToast>(v)) {
            return true;
        }
    }
    return false;
}

/// `v` as `bytes` big-endian bytes (two's complement).
void append_be(std::string& out, std::int64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) {
        out.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
    }
}

/// The whole of `text` as a number of type T (integers in decimal; floats as the source prints
/// them, NaN and Infinity included); nullopt when it is not one.
template <class T> std::optional<T> parse_whole(const std::string& text) {
    T v{};
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (ec != std::errc() || ptr != end) {
        return std::nullopt;
    }
    return v;
}

/// A uuid as uuid_out prints it (8-4-4-4-12 hex digits) as an array field (its length, then
/// its 16 bytes); false, with nothing appended, when it is not one.
bool append_uuid(std::string& out, const std::string& text) {
    if (text.size() != 36) {
        return false;
    }
    std::string bytes;
    int high = -1;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (text[i] != '-') {
                return false;
            }
            continue;
        }
        const int d = schema::hex_value(text[i]);
        if (d < 0) {
            return false;
        }
        if (high < 0) {
            high = d;
        } else {
            bytes.push_back(static_cast<char>((high << 4) | d));
            high = -1;
        }
    }
    append_be32(out, 16);
    out += bytes;
    return true;
}

/// A float of type F as an array field (its length, then its IEEE bits, of the unsigned type
/// Bits, big-endian): from a canonical double, or from the source's text (NaN and Infinity
/// included); false, with nothing appended, when the text is not one.
template <class F, class Bits>
bool append_float(std::string& out, const double* real, const std::string* text) {
    const std::optional<F> f = real != nullptr   ? std::optional<F>(static_cast<F>(*real))
                               : text != nullptr ? parse_whole<F>(*text)
                                                 : std::nullopt;
    if (!f) {
        return false;
    }
    Bits bits = 0;
    std::memcpy(&bits, &*f, sizeof bits);
    append_be32(out, sizeof bits);
    append_be(out, static_cast<std::int64_t>(bits), sizeof bits);
    return true;
}

} // namespace

PostgresDestination::ParamArray::ElementType
PostgresDestination::ParamArray::element_type(Element element) {
    switch (element) {
    case Element::Int2:
        return {schema::oid::kInt2, "pg_catalog.int2[]"};
    case Element::Int4:
        return {schema::oid::kInt4, "pg_catalog.int4[]"};
    case Element::Int8:
        return {schema::oid::kInt8, "pg_catalog.int8[]"};
    case Element::Float4:
        return {schema::oid::kFloat4, "pg_catalog.float4[]"};
    case Element::Float8:
        return {schema::oid::kFloat8, "pg_catalog.float8[]"};
    case Element::Bool:
        return {schema::oid::kBool, "pg_catalog.bool[]"};
    case Element::Uuid:
        return {schema::oid::kUuid, "pg_catalog.uuid[]"};
    case Element::Text:
        break;
    }
    return {schema::oid::kText, "pg_catalog.text[]"};
}

PostgresDestination::ParamArray::Element
PostgresDestination::ParamArray::element_of(const schema::TypeRef& type) {
    if (type.element_oid != 0) {
        return Element::Text;
    }
    for (Element e : {Element::Int2, Element::Int4, Element::Int8, Element::Float4, Element::Float8,
                      Element::Bool, Element::Uuid}) {
        if (element_type(e).oid == type.oid) {
            return e;
        }
    }
    return Element::Text;
}

const char* PostgresDestination::ParamArray::sql_type(Element element) {
    return element_type(element).array_sql;
}

bool PostgresDestination::ParamArray::add(const schema::Value& value) {
    if (std::holds_alternative<schema::Null>(value)) {
        ++count_;
        has_null_ = true;
        append_be32(elements_, 0xffffffffu); // length -1
        return true;
    }
    const auto* text = std::get_if<std::string>(&value);
    const auto* integer = std::get_if<std::int64_t>(&value);
    const auto* real = std::get_if<double>(&value);
    switch (element_) {
    case Element::Text: {
        const std::optional<std::string> other =
            text == nullptr ? param_of(value) : std::nullopt; // an integer, or throws
        const std::string& t = text != nullptr ? *text : *other;
        append_be32(elements_, std::uint32_t(t.size()));
        elements_ += t;
        break;
    }
    case Element::Bool: {
        // The source's output ('t', 'f'), or a canonical value (1, 0).
        const bool yes = text != nullptr ? *text == "t" : integer != nullptr && *integer == 1;
        const bool no = text != nullptr ? *text == "f" : integer != nullptr && *integer == 0;
        if (!yes && !no) {
            return false;
        }
        append_be32(elements_, 1);
        elements_.push_back(yes ? 1 : 0);
        break;
    }
    case Element::Int2:
    case Element::Int4:
    case Element::Int8: {
        const std::optional<std::int64_t> n = integer != nullptr
                                                  ? std::optional<std::int64_t>(*integer)
                                              : text != nullptr ? parse_whole<std::int64_t>(*text)
                                                                : std::nullopt;
        const int bytes = element_ == Element::Int2 ? 2 : element_ == Element::Int4 ? 4 : 8;
        if (!n || (bytes < 8 && (*n < -(std::int64_t(1) << (8 * bytes - 1)) ||
                                 *n >= (std::int64_t(1) << (8 * bytes - 1))))) {
            return false;
        }
        append_be32(elements_, std::uint32_t(bytes));
        append_be(elements_, *n, bytes);
        break;
    }
    case Element::Float4:
        if (!append_float<float, std::uint32_t>(elements_, real, text)) {
            return false;
        }
        break;
    case Element::Float8:
        if (!append_float<double, std::uint64_t>(elements_, real, text)) {
            return false;
        }
        break;
    case Element::Uuid:
        if (text == nullptr || !append_uuid(elements_, *text)) {
            return false;
        }
        break;
    }
    ++count_;
    return true;
}

std::string PostgresDestination::ParamArray::finish() && {
    const std::uint32_t oid = element_type(element_).oid;
    std::string out;
    out.reserve(20 + elements_.size());
    append_be32(out, 1); // dimensions
    append_be32(out, has_null_ ? 1 : 0);
    append_be32(out, oid);
    append_be32(out, count_);
    append_be32(out, 1); // lower bound
    out += elements_;
    return out;
}

namespace {

/// An upsert to a new key that must read the old key's row for its unchanged TOAST columns.
bool is_move(const Change& c) {
    return c.kind == Change::Kind::Upsert && !c.moved_from.empty() && has_unchanged(c.values);
}

} // namespace

PostgresDestination::TargetName PostgresDestination::target_name(const schema::Table& t) {
    if (t.target == t.schema + "." + t.name ||
        t.target == schema::default_target_name(t.schema, t.name)) {
        return {t.schema, t.name};
    }
    const auto dot = t.target.find('.');
    if (dot == std::string::npos) {
        return {t.schema, t.target};
    }
    return {t.target.substr(0, dot), t.target.substr(dot + 1)};
}

const std::vector<std::string>& PostgresDestination::metadata_tables() {
    static const std::vector<std::string> names{"_pgtide_checkpoint", "_pgtide_tables",
                                                "_pgtide_tombstones"};
    return names;
}

std::string PostgresDestination::target_sql(const schema::Table& table) {
    const TargetName n = target_name(table);
    return quote_identifier(n.schema) + "." + quote_identifier(n.name);
}

PostgresDestination::PostgresDestination(io::PgConnection conn, std::string target, std::string url,
                                         std::string application_name,
                                         std::int64_t copy_commit_rows, Deletes deletes,
                                         std::size_t max_lanes)
    : conn_(std::move(conn)), target_(std::move(target)), url_(std::move(url)),
      application_name_(std::move(application_name)), copy_commit_rows_(copy_commit_rows),
      max_lanes_(std::max<std::size_t>(1, max_lanes)), deletes_(deletes),
      merge_upserts_(conn_.server_version() >= 150000) {}

void PostgresDestination::use_on_conflict_upserts() {
    if (!merges_.empty()) {
        throw InternalError("use_on_conflict_upserts after merge statements were prepared");
    }
    merge_upserts_ = false;
}

io::Task<std::unique_ptr<PostgresDestination>>
PostgresDestination::open(std::string url, std::string application_name,
                          std::int64_t copy_commit_rows, Deletes deletes, std::size_t max_lanes) {
    std::optional<io::PgConnection> conn;
    try {
        conn = co_await connect_session(url, application_name);
    } catch (const io::PgError& e) {
        throw DestinationError(DestinationErrorKind::CantOpen, 0,
                               std::string("cannot connect to the postgresql destination: ") +
                                   e.what());
    }
    const std::string target = conn->target();
    std::unique_ptr<PostgresDestination> dest(new PostgresDestination(
        std::move(*conn), target, url, application_name, copy_commit_rows, deletes, max_lanes));
    co_await dest->run(kCreateMetadata, "creating the metadata tables (_pgtide_checkpoint, "
                                        "_pgtide_tables, _pgtide_tombstones in schema public)");
    co_return dest;
}

void PostgresDestination::fail(const std::exception& e, const std::string& what) const {
    if (const auto* pe = dynamic_cast<const io::PgError*>(&e)) {
        throw DestinationError(kind_of(*pe), 0, describe() + ": " + what + ": " + e.what());
    }
    throw DestinationError(DestinationErrorKind::Other, 0,
                           describe() + ": " + what + ": " + e.what());
}

io::Task<io::PgResult> PostgresDestination::run(std::string sql, std::string what) {
    if (!copying_.empty()) {
        co_await end_copy();
    }
    co_await settle();
    try {
        io::PgResult r = co_await conn_.exec(std::move(sql));
        co_return r;
    } catch (const io::PgError& e) {
        fail(e, what);
    }
}

io::Task<io::PgResult>
PostgresDestination::run_params(std::string sql, std::vector<std::optional<std::string>> values,
                                std::string what) {
    if (!copying_.empty()) {
        co_await end_copy();
    }
    co_await settle();
    try {
        io::PgResult r = co_await conn_.exec_params(std::move(sql), std::move(values));
        co_return r;
    } catch (const io::PgError& e) {
        fail(e, what);
    }
}

io::Task<void> PostgresDestination::begin() {
    if (in_transaction_) {
        co_return;
    }
    co_await run("BEGIN", "starting a transaction");
    in_transaction_ = true;
}

io::Task<void> PostgresDestination::end_copy() {
    const std::string target = copying_;
    copying_.clear();
    copy_columns_.clear();
    try {
        co_await conn_.copy_in_end();
    } catch (const io::PgError& e) {
        fail(e, "copying rows into " + target);
    }
}

io::Task<void> PostgresDestination::settle() {
    if (!sent_) {
        co_return;
    }
    const std::string what = std::move(*sent_);
    sent_.reset();
    try {
        co_await conn_.finish_sent();
    } catch (const io::PgError& e) {
        fail(e, what);
    }
}

io::Task<void> PostgresDestination::send_copy(std::string& buffer, bool last) {
    if (buffer.empty() || (!last && buffer.size() < kCopyChunk)) {
        co_return;
    }
    std::string chunk = std::move(buffer);
    buffer.clear();
    try {
        co_await conn_.put_copy_data(std::move(chunk));
    } catch (const io::PgError& e) {
        fail(e, "sending COPY data");
    }
}

// ---- metadata ----------------------------------------------------------------------------

io::Task<std::vector<TableProgress>> PostgresDestination::table_states(std::string slot) {
    const std::string what = "reading the table states of slot " + slot;
    io::PgResult r = co_await run_params(
        std::string("SELECT source_table, target_table, state, epoch, copy_lsn, rows_copied, "
                    "source_oid, membership, copy_key, source_columns FROM ") +
            kTablesTable + " WHERE slot_name = $1 ORDER BY source_table",
        params(slot), what);
    std::vector<TableProgress> out;
    for (int i = 0; i < r.rows(); ++i) {
        TableProgress p;
        p.source_table = r.get(i, 0);
        p.target_table = r.get(i, 1);
        const std::string state(r.get(i, 2));
        const auto parsed = parse_table_state(state);
        const std::int64_t copy_lsn = std::stoll(std::string(r.get(i, 4)));
        if (!parsed || copy_lsn < 0) {
            throw DestinationError(DestinationErrorKind::Corrupt, 0,
                                   describe() + ": " + what + ": table " + p.source_table +
                                       " has state '" + state + "' and copy_lsn " +
                                       std::to_string(copy_lsn));
        }
        p.state = *parsed;
        p.epoch = std::stoll(std::string(r.get(i, 3)));
        p.copy_lsn = schema::Lsn(std::uint64_t(copy_lsn));
        p.rows_copied = std::stoll(std::string(r.get(i, 5)));
        p.source_oid = std::uint32_t(std::stoull(std::string(r.get(i, 6))));
        p.membership = std::string(r.get(i, 7));
        p.copy_key = std::string(r.get(i, 8));
        p.source_columns = std::string(r.get(i, 9));
        out.push_back(std::move(p));
    }
    co_return out;
}

io::Task<std::optional<Checkpoint>> PostgresDestination::load_checkpoint(std::string slot) {
    const std::string what = "reading the checkpoint of slot " + slot;
    io::PgResult r = co_await run_params(
        std::string("SELECT slot_name, system_identifier, timeline, database, epoch, phase, "
                    "consistent_lsn, lsn, owner, lease_until, updated_at FROM ") +
            kCheckpointTable + " WHERE slot_name = $1",
        params(slot), what);
    if (r.rows() == 0) {
        co_return std::nullopt;
    }
    Checkpoint c;
    try {
        const auto integer = [&r](int col) { return std::stoll(std::string(r.get(0, col))); };
        const auto lsn = [&](int col) {
            const std::int64_t v = integer(col);
            if (v < 0) {
                throw std::invalid_argument("a negative LSN");
            }
            return schema::Lsn(std::uint64_t(v));
        };
        c.slot_name = std::string(r.get(0, 0));
        c.system_identifier = std::string(r.get(0, 1));
        c.timeline = integer(2);
        c.database = std::string(r.get(0, 3));
        c.epoch = integer(4);
        const auto phase = parse_phase(r.get(0, 5));
        if (!phase) {
            throw std::invalid_argument("unknown phase '" + std::string(r.get(0, 5)) + "'");
        }
        c.phase = *phase;
        c.consistent_lsn = lsn(6);
        c.lsn = lsn(7);
        c.owner = std::string(r.get(0, 8));
        c.lease_until_unix_ms = integer(9);
        c.updated_at_unix_ms = integer(10);
    } catch (const std::exception& e) {
        throw DestinationError(DestinationErrorKind::Corrupt, 0,
                               describe() + ": " + what + ": " + e.what());
    }
    co_return c;
}

io::Task<void> PostgresDestination::insert_checkpoint(Checkpoint c) {
    co_await run_params(
        std::string("INSERT INTO ") + kCheckpointTable +
            " (slot_name, system_identifier, timeline, database, epoch, phase, consistent_lsn, "
            "lsn, owner, lease_until, updated_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        params(c.slot_name, c.system_identifier, std::to_string(c.timeline), c.database,
               std::to_string(c.epoch), std::string(to_string(c.phase)), lsn_text(c.consistent_lsn),
               lsn_text(c.lsn), c.owner, std::to_string(c.lease_until_unix_ms),
               std::to_string(c.updated_at_unix_ms)),
        "inserting the checkpoint of slot " + c.slot_name);
}

io::Task<bool> PostgresDestination::commit(std::vector<TableProgress> progress, Checkpoint expected,
                                           Checkpoint next) {
    if (next.slot_name != expected.slot_name) {
        throw InternalError("checkpoint compare-and-swap from slot " + expected.slot_name +
                            " to slot " + next.slot_name);
    }
    // Lanes that finished adding their table's key are forgotten; once no lane is copying,
    // the others are waited for, so that their tables are recorded copied with this commit.
    const bool copying = std::any_of(lanes_.begin(), lanes_.end(),
                                     [](const auto& lane) { return !lane.second->finishing; });
    co_await reap_lanes(!copying);
    co_await begin();
    // Kept back earlier, now that their lanes are done; older than this commit's own rows.
    std::vector<std::string> written_after_lanes;
    std::vector<TableProgress> rows;
    for (const auto& [target, p] : after_lanes_) {
        if (lanes_.contains(target)) {
            continue;
        }
        rows.push_back(p);
        written_after_lanes.push_back(target);
    }
    for (const auto& p : progress) {
        if (auto lane = lanes_.find(p.target_table); lane != lanes_.end()) {
            if (lane->second->finishing) {
                after_lanes_.insert_or_assign(p.target_table, p);
            }
            continue; // its lane writes it, with the rows it covers
        }
        rows.push_back(p);
    }
    if (!rows.empty()) {
        // Named first: GCC 12 mishandles a conditional's temporaries inside a co_await.
        std::string what = rows.size() == 1 ? "recording the state of " + rows[0].source_table
                                            : "recording the states of the tables";
        std::vector<std::optional<std::string>> values = progress_params(next.slot_name, rows);
        co_await run_params(progress_upsert_sql(), std::move(values), std::move(what));
    }
    io::PgResult swapped = co_await run_params(
        std::string("UPDATE ") + kCheckpointTable +
            " SET system_identifier = $1, timeline = $2, database = $3, epoch = $4, phase = $5, "
            "consistent_lsn = $6, lsn = $7, owner = $8, lease_until = $9, updated_at = $10 "
            "WHERE slot_name = $11 AND epoch = $12 AND owner = $13 AND lsn = $14 RETURNING 1",
        params(next.system_identifier, std::to_string(next.timeline), next.database,
               std::to_string(next.epoch), std::string(to_string(next.phase)),
               lsn_text(next.consistent_lsn), lsn_text(next.lsn), next.owner,
               std::to_string(next.lease_until_unix_ms), std::to_string(next.updated_at_unix_ms),
               expected.slot_name, std::to_string(expected.epoch), expected.owner,
               lsn_text(expected.lsn)),
        "advancing the checkpoint of slot " + expected.slot_name);
    if (swapped.rows() != 1) {
        co_await rollback();
        co_return false;
    }
    // Whatever COMMIT answers, the transaction is over.
    in_transaction_ = false;
    co_await run("COMMIT", "committing");
    committed_ = next;
    for (const auto& target : written_after_lanes) {
        after_lanes_.erase(target);
    }
    if (lanes_.empty() && next.phase == Phase::Streaming) {
        // The copies are done: no connections kept for them while streaming (a table copied
        // later connects again).
        for (io::PgConnection& c : idle_lanes_) {
            c.close();
        }
        idle_lanes_.clear();
    }
    co_return true;
}

io::Task<void> PostgresDestination::rollback() {
    std::exception_ptr error;
    try {
        if (!copying_.empty()) {
            // The rows sent so far go with the transaction.
            try {
                co_await end_copy();
            } catch (const DestinationError&) {
            }
        }
        if (sent_) {
            // Its work goes with the transaction.
            try {
                co_await settle();
            } catch (const DestinationError&) {
            }
        }
        if (in_transaction_) {
            in_transaction_ = false;
            co_await run("ROLLBACK", "rolling back");
        }
    } catch (...) {
        error = std::current_exception();
    }
    // Only now: a lane at its owner check may be waiting for the main transaction, which keeps
    // the checkpoint row locked after a compare-and-swap that found it changed (READ COMMITTED
    // locks the row it re-checks).
    co_await drop_lanes();
    if (error) {
        std::rethrow_exception(error);
    }
}

io::Task<void> PostgresDestination::close() {
    if (conn_.is_open()) {
        try {
            co_await rollback();
        } catch (const DestinationError&) {
        }
    }
    co_await drop_lanes();
    for (io::PgConnection& c : idle_lanes_) {
        c.close();
    }
    idle_lanes_.clear();
    laneless_.clear();
    main_copies_.clear();
    conn_.close();
}

io::Task<void> PostgresDestination::reconnect() {
    co_await close();
    in_transaction_ = false;
    copying_.clear();
    copy_columns_.clear();
    sent_.reset();
    merges_.clear();
    after_lanes_.clear();
    committed_.reset();
    std::optional<io::PgConnection> conn;
    try {
        conn = co_await connect_session(url_, application_name_);
    } catch (const io::PgError& e) {
        throw DestinationError(DestinationErrorKind::CantOpen, 0,
                               std::string("cannot connect to the postgresql destination: ") +
                                   e.what());
    }
    conn_ = std::move(*conn);
    // A server of another version may have taken the address (an upgrade, a failover).
    merge_upserts_ = merge_upserts_ && conn_.server_version() >= 150000;
}

// ---- tables ------------------------------------------------------------------------------

io::Task<void> PostgresDestination::create_tables(std::vector<schema::Table> tables) {
    co_await reap_lanes(true); // their tables' keys first
    co_await begin();
    std::vector<TargetFacts> facts = co_await target_facts(tables);
    std::set<std::string> schemas;
    std::vector<schema::Table> missing;
    for (std::size_t i = 0; i < tables.size(); ++i) {
        check_reserved_columns(tables[i]);
        const std::string schema = target_name(tables[i]).schema;
        if (!facts[i].schema_exists && !schemas.contains(schema)) {
            co_await run("CREATE SCHEMA IF NOT EXISTS " + quote_identifier(schema),
                         "creating schema " + quote_identifier(schema));
            schemas.insert(schema);
        }
        facts[i].schema_exists = true;
        if (facts[i].columns.empty()) {
            missing.push_back(std::move(tables[i]));
        } else {
            co_await ensure_table(tables[i], Retype::Refuse, std::move(facts[i]));
        }
    }
    // Each CREATE TABLE builds its key's empty index, and its TOAST table's, with an fsync each:
    // many tables are created over connections of their own at once, which the copies' lanes
    // take up afterwards (1,000 tables by hand, fsync on: 2.2 s in one session, 1.5 s in four).
    const std::size_t sessions = std::min(max_lanes_, missing.size() / kTablesPerCreateSession);
    if (sessions >= 2) {
        in_transaction_ = false;
        co_await run("COMMIT", "committing the destination tables"); // the schemas, for them
        std::vector<std::vector<schema::Table>> shares(sessions);
        for (std::size_t i = 0; i < missing.size(); ++i) {
            shares[i % sessions].push_back(std::move(missing[i]));
        }
        std::vector<io::Task<void>> creates;
        std::vector<std::vector<schema::Table>> refused(sessions);
        for (std::size_t k = 0; k < sessions; ++k) {
            creates.push_back(create_elsewhere(this, std::move(shares[k]), &refused[k]));
        }
        co_await io::when_all(std::move(creates));
        missing.clear();
        for (auto& share : refused) {
            std::move(share.begin(), share.end(), std::back_inserter(missing));
        }
        co_await begin();
    }
    for (const auto& t : missing) {
        std::vector<Statement> statements = create_table_sql(t);
        for (Statement& st : statements) {
            co_await run(std::move(st.sql), std::move(st.what));
        }
    }
    in_transaction_ = false;
    co_await run("COMMIT", "committing the destination tables");
}

io::Task<std::optional<io::PgConnection>>
PostgresDestination::idle_or_new_connection(std::string* refusal) {
    if (!idle_lanes_.empty()) {
        io::PgConnection conn = std::move(idle_lanes_.back());
        idle_lanes_.pop_back();
        co_return conn;
    }
    try {
        co_return co_await connect_session(url_, application_name_);
    } catch (const io::PgError& e) {
        *refusal = e.what();
    }
    co_return std::nullopt;
}

io::Task<void> PostgresDestination::create_elsewhere(PostgresDestination* self,
                                                     std::vector<schema::Table> tables,
                                                     std::vector<schema::Table>* refused) {
    std::string refusal;
    std::optional<io::PgConnection> conn = co_await self->idle_or_new_connection(&refusal);
    if (!conn) {
        io::log_warn("creating tables through the main destination connection: a "
                     "connection of its own was refused",
                     {{"tables", std::to_string(tables.size())}, {"error", refusal}});
        *refused = std::move(tables);
        co_return;
    }
    std::string what = "starting a transaction to create tables";
    try {
        co_await conn->exec("BEGIN");
        for (const auto& t : tables) {
            std::vector<Statement> statements = self->create_table_sql(t);
            for (Statement& st : statements) {
                what = std::move(st.what);
                co_await conn->exec(st.sql);
            }
        }
        what = "committing the tables created";
        co_await conn->exec("COMMIT");
    } catch (const io::PgError& e) {
        self->fail(e, what); // the connection goes with its failed transaction
    }
    self->idle_lanes_.push_back(std::move(*conn));
}

io::Task<void> PostgresDestination::create_types(std::vector<UserType> types) {
    for (const auto& type : types) {
        const std::string name = quote_identifier(type.schema) + "." + quote_identifier(type.name);
        const std::string what = "preparing type " + name;
        io::PgResult existing =
            co_await run_params(std::string("SELECT ") + kUserTypeDefinitionSql +
                                    " FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
                                    "WHERE n.nspname = $1 AND t.typname = $2",
                                params(type.schema, type.name), what);
        if (existing.rows() == 0) {
            io::PgResult ns = co_await run_params("SELECT 1 FROM pg_namespace WHERE nspname = $1",
                                                  params(type.schema), what);
            if (ns.rows() == 0) {
                co_await run("CREATE SCHEMA IF NOT EXISTS " + quote_identifier(type.schema), what);
            }
            co_await run(type.definition, "creating type " + name);
            continue;
        }
        if (existing.get(0, 0) != type.definition) {
            throw DestinationError(DestinationErrorKind::Schema, 0,
                                   describe() + ": type " + name +
                                       " differs between the source and the destination: the "
                                       "source has `" +
                                       type.definition + "`, the destination `" +
                                       std::string(existing.get(0, 0)) +
                                       "`; make the destination's type match (or drop it)");
        }
    }
}

io::Task<void> PostgresDestination::follow_schema(std::shared_ptr<const schema::Table> table) {
    co_await reap_lanes(true); // their tables' keys first
    co_await begin();
    // The stream lets through only type changes that keep every value (or stops).
    co_await ensure_table(*table, Retype::Cast);
}

void PostgresDestination::check_reserved_columns(const schema::Table& table) const {
    for (const auto& c : table.columns) {
        if (c.name == "_pgtide_lsn" || c.name == "_pgtide_deleted") {
            throw DestinationError(DestinationErrorKind::Schema, 0,
                                   describe() + ": column \"" + c.name + "\" of " +
                                       table.qualified() +
                                       " collides with a column pgtide reserves");
        }
    }
}

std::vector<PostgresDestination::Statement>
PostgresDestination::create_table_sql(const schema::Table& table) const {
    const std::string target = target_sql(table);
    std::string ddl = "CREATE TABLE " + target + " (";
    for (std::size_t i = 0; i < table.columns.size(); ++i) {
        const auto& c = table.columns[i];
        ddl += quote_identifier(c.name) + " " + type_of(table, i);
        if (c.key) {
            ddl += " NOT NULL";
        }
        ddl += ", ";
    }
    std::vector<std::string> keys;
    for (auto k : table.key_columns) {
        keys.push_back(table.columns[k].name);
    }
    ddl += std::string(kLsnColumn) + " bigint NOT NULL, ";
    if (deletes_ == Deletes::Soft) {
        ddl += std::string(kDeletedColumnDdl) + ", ";
    }
    ddl += "PRIMARY KEY (" + join_quoted(keys) + "))";
    std::vector<Statement> out;
    out.push_back({std::move(ddl), "creating table " + target +
                                       " (a type the source's columns use may be missing in the "
                                       "destination: create it there first)"});
    // The source's STORAGE where it is not the type's default (PostgreSQL 15 has no STORAGE in a
    // column definition): how values are kept (compressed or not, in line or not) is part of the
    // table's definition, and a replica keeps what the source chose.
    std::string storage;
    for (const auto& c : table.columns) {
        if (!c.pg_storage.empty()) {
            storage += std::string(storage.empty() ? "" : ", ") + "ALTER COLUMN " +
                       quote_identifier(c.name) + " SET STORAGE " + c.pg_storage;
        }
    }
    if (!storage.empty()) {
        out.push_back({"ALTER TABLE " + target + " " + storage,
                       "setting the storage of the columns of " + target});
    }
    return out;
}

io::Task<std::vector<PostgresDestination::TargetFacts>>
PostgresDestination::target_facts(std::vector<schema::Table> tables) {
    std::vector<std::string> targets;
    std::vector<std::string> schemas;
    for (const auto& t : tables) {
        targets.push_back(target_sql(t));
        schemas.push_back(target_name(t).schema);
    }
    // Rows (table's ordinal, what, ordinal within, name, type): 'c' a column, 'k' a column of
    // the primary key; 's' a schema that exists (ordinal 0).
    const std::string sql =
        "SELECT t.ord, 'c', a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) "
        "FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord) "
        "JOIN pg_attribute a ON a.attrelid = to_regclass(t.name) "
        "WHERE a.attnum > 0 AND NOT a.attisdropped "
        "UNION ALL SELECT t.ord, 'k', k.ord, a.attname, NULL "
        "FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord) "
        "JOIN pg_index i ON i.indrelid = to_regclass(t.name) AND i.indisprimary "
        "CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "UNION ALL SELECT 0, 's', 0, n.nspname, NULL FROM pg_namespace n "
        "WHERE n.nspname = ANY($2::text[]) "
        "ORDER BY 1, 2, 3";
    // Named first: GCC 12 mishandles a conditional's temporaries inside a co_await.
    std::vector<std::optional<std::string>> values =
        params(schema::text_array_literal(targets), schema::text_array_literal(schemas));
    std::string what = tables.size() == 1 ? "reading the definition of " + targets[0]
                                          : "reading the definitions of the destination tables";
    io::PgResult found = co_await run_params(sql, std::move(values), std::move(what));
    std::vector<TargetFacts> out(tables.size());
    std::set<std::string> existing_schemas;
    for (int r = 0; r < found.rows(); ++r) {
        const std::string_view kind = found.get(r, 1);
        std::string name(found.get(r, 3));
        if (kind == "s") {
            existing_schemas.insert(std::move(name));
            continue;
        }
        TargetFacts& f = out.at(std::size_t(std::stoll(std::string(found.get(r, 0)))) - 1);
        if (kind == "c") {
            f.columns.emplace_back(std::move(name), std::string(found.get(r, 4)));
        } else {
            f.key.push_back(std::move(name));
        }
    }
    for (std::size_t i = 0; i < tables.size(); ++i) {
        out[i].schema_exists = existing_schemas.contains(schemas[i]);
    }
    co_return out;
}

io::Task<void> PostgresDestination::ensure_table(const schema::Table& table, Retype retype) {
    std::vector<schema::Table> one{table};
    std::vector<TargetFacts> facts = co_await target_facts(std::move(one));
    co_await ensure_table(table, retype, std::move(facts.at(0)));
}

io::Task<void> PostgresDestination::ensure_table(const schema::Table& table, Retype retype,
                                                 TargetFacts facts) {
    const TargetName name = target_name(table);
    const std::string target = target_sql(table);
    const std::string what = "preparing table " + target + " for " + table.qualified();
    check_reserved_columns(table);
    if (!facts.schema_exists) {
        co_await run("CREATE SCHEMA IF NOT EXISTS " + quote_identifier(name.schema), what);
    }
    if (facts.columns.empty()) {
        std::vector<Statement> statements = create_table_sql(table);
        for (Statement& st : statements) {
            co_await run(std::move(st.sql), std::move(st.what));
        }
        co_return;
    }
    std::unordered_map<std::string, std::string> types(facts.columns.begin(), facts.columns.end());
    if (!types.count("_pgtide_lsn")) {
        throw DestinationError(DestinationErrorKind::Schema, 0,
                               describe() + ": table " + target +
                                   " exists but has no _pgtide_lsn column: it was not created by "
                                   "pgtide; drop it or map " +
                                   table.qualified() + " to another target");
    }
    if (types.count("_pgtide_deleted") && deletes_ == Deletes::Hard) {
        // Its rows marked deleted would come back as live rows, and deleted ones would go.
        throw DestinationError(DestinationErrorKind::Schema, 0,
                               describe() + ": table " + target +
                                   " has a _pgtide_deleted column: it keeps rows deleted on the "
                                   "source (destination.deletes = \"soft\"); set deletes = "
                                   "\"soft\" again, or drop the table to start it anew with "
                                   "hard deletes");
    }
    if (!types.count("_pgtide_deleted") && deletes_ == Deletes::Soft) {
        // A table written with hard deletes holds live rows only.
        co_await run("ALTER TABLE " + target + " ADD COLUMN " + kDeletedColumnDdl,
                     "adding column \"_pgtide_deleted\" to " + target);
    }
    std::string problems;
    for (std::size_t i = 0; i < table.columns.size(); ++i) {
        const auto& c = table.columns[i];
        const auto it = types.find(c.name);
        if (it == types.end()) {
            // The source's missing value (rows older than the column hold it) as the default:
            // the destination's existing rows, and those the stream inserts from before the
            // ALTER without naming the column, get it without a rewrite.
            const std::string fill =
                c.missing_text
                    ? " DEFAULT " + conn_.escape_literal(*c.missing_text) + "::" + type_of(table, i)
                    : std::string();
            const std::string storage =
                c.pg_storage.empty()
                    ? std::string()
                    : ", ALTER COLUMN " + quote_identifier(c.name) + " SET STORAGE " + c.pg_storage;
            co_await run("ALTER TABLE " + target + " ADD COLUMN " + quote_identifier(c.name) + " " +
                             type_of(table, i) + fill + storage,
                         "adding column \"" + c.name + "\" to " + target);
        } else if (it->second != type_of(table, i) && retype != Retype::Refuse) {
            // Named first: GCC 12 mishandles temporaries built inside a co_await expression.
            const std::string column = quote_identifier(c.name);
            const std::string type = type_of(table, i);
            std::string sql = "ALTER TABLE " + target + " ALTER COLUMN " + column + " TYPE " +
                              type + " USING " +
                              (retype == Retype::Cast ? column + "::" + type : "NULL");
            std::string doing = "changing the type of column \"" + c.name + "\" of " + target;
            co_await run(std::move(sql), std::move(doing));
        } else if (it->second != type_of(table, i)) {
            problems += "; column \"" + c.name + "\" is " + it->second +
                        " in the destination but " + type_of(table, i) + " on the source";
        }
    }
    std::vector<std::string> have = std::move(facts.key);
    std::vector<std::string> want;
    for (auto k : table.key_columns) {
        want.push_back(table.columns[k].name);
    }
    if (have.empty() && !want.empty()) {
        // A copy into the table (or one about to start) dropped the key until it is whole
        // (prepare_for_copies).
        io::PgResult copying = co_await run_params(
            std::string("SELECT 1 FROM ") + kTablesTable +
                " WHERE target_table = $1 AND state IN ('init', 'copying') LIMIT 1",
            params(table.target), what);
        if (copying.rows() == 1) {
            have = want;
        }
    }
    if (have != want) {
        problems += "; its primary key is (" + join_quoted(have) + ") but the source's key is (" +
                    join_quoted(want) + ")";
    }
    if (!problems.empty()) {
        throw DestinationError(DestinationErrorKind::Schema, 0,
                               describe() + ": table " + target + " cannot hold " +
                                   table.qualified() + problems +
                                   "; alter or drop the destination table");
    }
}

io::Task<void> PostgresDestination::reset_tables(std::string slot,
                                                 std::vector<schema::Table> tables) {
    co_await reap_lanes(true); // their tables' keys first
    co_await begin();
    co_await remove_tombstones(tables);
    // Read before the TRUNCATE, which changes none of what prepare_for_copies reads in them.
    std::vector<CopyTarget> found = co_await copy_targets_of(tables);
    std::string truncate;
    for (std::size_t i = 0; i < tables.size(); ++i) {
        // Soft deletes: prepare_for_copies marks the rows instead. Not the tables just created:
        // TRUNCATE gives each new files and builds its empty indexes again, each with an fsync
        // (1.4 s for 1,000 tables).
        if (deletes_ == Deletes::Hard && !found[i].empty) {
            truncate += (truncate.empty() ? "TRUNCATE " : ", ") + target_sql(tables[i]);
        }
    }
    if (!truncate.empty()) {
        co_await run(std::move(truncate), "emptying the tables for a new epoch");
    }
    co_await prepare_for_copies(std::move(tables), std::move(found));
    co_await run_params(std::string("DELETE FROM ") + kTablesTable + " WHERE slot_name = $1",
                        params(slot), "removing the table states of slot " + slot);
}

io::Task<void> PostgresDestination::empty_tables(std::vector<schema::Table> tables) {
    co_await reap_lanes(true); // their tables' keys first
    co_await begin();
    co_await remove_tombstones(tables);
    for (const auto& t : tables) {
        if (deletes_ == Deletes::Soft) {
            // Its rows stay: a changed column type converts their values (Retype::Cast), and
            // stops the run, naming the column, where they do not convert.
            co_await ensure_table(t, Retype::Cast); // the source's columns as they are now
        } else {
            co_await run("TRUNCATE " + target_sql(t), "emptying " + t.target + " for its copy");
            co_await ensure_table(t, Retype::Empty); // the source's columns as they are now
        }
    }
    std::vector<CopyTarget> found = co_await copy_targets_of(tables);
    co_await prepare_for_copies(std::move(tables), std::move(found));
}

io::Task<void> PostgresDestination::remove_tombstones(std::vector<schema::Table> tables) {
    std::vector<std::string> targets;
    for (const auto& t : tables) {
        targets.push_back(t.target);
    }
    const std::string sql =
        std::string("DELETE FROM ") + kTombstonesTable + " WHERE target_table = ANY($1::text[])";
    std::vector<std::optional<std::string>> values = params(schema::text_array_literal(targets));
    co_await run_params(sql, std::move(values), "removing the tombstones of the tables to copy");
}

namespace {

/// `ALTER TABLE target` with the steps that are not empty, comma-separated; "" when none is.
std::string alter_table_sql(const std::string& target, const std::string& first,
                            const std::string& second) {
    if (first.empty() && second.empty()) {
        return {};
    }
    return "ALTER TABLE " + target + " " + first + (first.empty() || second.empty() ? "" : ", ") +
           second;
}

} // namespace

io::Task<std::vector<PostgresDestination::CopyTarget>>
PostgresDestination::copy_targets(std::vector<std::string> targets) {
    const std::string sql =
        "SELECT c.oid IS NOT NULL, (SELECT conname FROM pg_catalog.pg_constraint WHERE "
        "conrelid = c.oid AND contype = 'p'), c.relkind = 'r', "
        "coalesce(c.reloptions @> '{autovacuum_enabled=false}', false), "
        "c.relkind = 'r' AND pg_catalog.pg_relation_size(c.oid) = 0 "
        "FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord) "
        "LEFT JOIN pg_catalog.pg_class c ON c.oid = to_regclass(t.name) ORDER BY t.ord";
    // Named before co_await: GCC 12 mishandles a conditional's temporaries inside one.
    std::vector<std::optional<std::string>> values = params(schema::text_array_literal(targets));
    std::string what = targets.size() == 1 ? "reading the primary key of " + targets[0]
                                           : "reading the primary keys of the tables to copy";
    io::PgResult found = co_await run_params(sql, std::move(values), std::move(what));
    std::vector<CopyTarget> out;
    for (int i = 0; i < found.rows(); ++i) {
        if (found.get(i, 0) != "t") {
            // Dropped in the destination while pgtide was running (it made the table).
            throw DestinationError(DestinationErrorKind::Schema, 0,
                                   describe() + ": table " + targets.at(std::size_t(i)) +
                                       " to copy into is missing: it was dropped while pgtide "
                                       "was copying it");
        }
        CopyTarget t;
        if (!found.is_null(i, 1)) {
            t.key = std::string(found.get(i, 1));
        }
        t.plain = found.get(i, 2) == "t";
        t.paused = found.get(i, 3) == "t";
        t.empty = found.get(i, 4) == "t";
        out.push_back(std::move(t));
    }
    co_return out;
}

io::Task<std::vector<PostgresDestination::CopyTarget>>
PostgresDestination::copy_targets_of(std::vector<schema::Table> tables) {
    std::vector<std::string> targets;
    for (const auto& t : tables) {
        targets.push_back(target_sql(t));
    }
    co_return co_await copy_targets(std::move(targets));
}

io::Task<void> PostgresDestination::prepare_for_copies(std::vector<schema::Table> tables,
                                                       std::vector<CopyTarget> found) {
    std::vector<std::string> targets;
    for (const auto& t : tables) {
        targets.push_back(target_sql(t));
    }
    // Every table's ALTER in one round trip, as their tombstones and keys were read: a
    // publication of a thousand small tables saves three thousand round trips.
    std::string alters;
    for (std::size_t i = 0; i < targets.size(); ++i) {
        const std::string& target = targets[i];
        if (deletes_ == Deletes::Soft && !found[i].key) {
            // A copy of it was cut short: its rows were marked when that copy began (in the
            // transaction that dropped the key), and its live rows are the copy's, which the new
            // copy reads again. Marked, they could be a key's second marked row.
            co_await run(std::string("DELETE FROM ") + target + " WHERE " + kDeletedColumn + " = 0",
                         "removing the rows of " + target + " that a copy cut short left");
        } else if (deletes_ == Deletes::Soft) {
            co_await run(std::string("UPDATE ") + target + " SET " + kDeletedColumn +
                             " = 1 WHERE " + kDeletedColumn + " = 0",
                         "marking the rows of " + target + " deleted before its copy");
        }
        const schema::Table& t = tables[i];
        main_copies_.erase(t.target);
        if (deletes_ == Deletes::Hard && t.estimated_rows >= 0 &&
            t.estimated_rows <= kKeepKeyRows) {
            // Loaded faster through its key, and autovacuum does not weigh on it. A key that a
            // copy cut short dropped (or autovacuum it paused) is table_copied's to restore.
            if (found[i].key && !found[i].paused && t.estimated_rows <= kMainConnectionRows) {
                main_copies_.insert(t.target);
            }
            continue;
        }
        const std::string sql = alter_table_sql(
            target,
            found[i].key ? "DROP CONSTRAINT " + quote_identifier(*found[i].key) : std::string(),
            found[i].plain ? "SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)"
                           : "");
        if (!sql.empty()) {
            alters += sql + ";\n";
        }
    }
    if (alters.empty()) {
        co_return;
    }
    std::string what = targets.size() == 1 ? "dropping the primary key of " + targets[0] +
                                                 " and pausing its autovacuum for its copy"
                                           : "dropping the primary keys of the tables to copy and "
                                             "pausing their autovacuum";
    co_await run(std::move(alters), std::move(what));
}

io::Task<void> PostgresDestination::table_copied(std::shared_ptr<const schema::Table> table) {
    const std::string target = target_sql(*table);
    co_await begin();
    if (main_copies_.erase(table->target) > 0) {
        co_return; // its key and autovacuum are as they were (prepare_for_copies)
    }
    std::vector<std::string> one{target};
    const CopyTarget found = (co_await copy_targets(std::move(one))).at(0);
    std::string add_key;
    if (!found.key) {
        std::vector<std::string> keys;
        for (auto k : table->key_columns) {
            keys.push_back(table->columns[k].name);
        }
        add_key = "ADD PRIMARY KEY (" + join_quoted(keys) + ")";
    }
    std::vector<std::string> finish;
    if (!found.key && deletes_ == Deletes::Soft) {
        // Rows kept marked deleted (prepare_for_copies) that the copy found again: the copied row
        // is the newer (the copy's version is above every kept row's).
        std::string same_key;
        for (auto k : table->key_columns) {
            const std::string column = quote_identifier(table->columns[k].name);
            same_key += " AND k." + column + " = c." + column;
        }
        finish.push_back("DELETE FROM " + target + " AS k USING " + target + " AS c WHERE k." +
                         kDeletedColumn + " = 1 AND c." + kDeletedColumn + " = 0" + same_key);
    }
    std::string alter =
        alter_table_sql(target, add_key,
                        found.paused ? "RESET (autovacuum_enabled, toast.autovacuum_enabled)" : "");
    if (!alter.empty()) {
        finish.push_back(std::move(alter));
    }
    if (auto it = lanes_.find(table->target); it != lanes_.end()) {
        // With the lane's last rows, on its connection, while the applier goes on (CopyLane).
        CopyLane* lane = it->second.get();
        co_await lane->sending.join(); // rethrows what its sends threw
        lane->finishing = true;
        lane->sending.spawn(commit_lane(this, lane, std::move(finish)));
        co_return;
    }
    for (std::string& sql : finish) {
        co_await run(std::move(sql), "adding the primary key of " + target +
                                         " and resuming its autovacuum after its copy");
    }
}

io::Task<void> PostgresDestination::request_copies(std::string slot,
                                                   std::vector<std::string> source_tables) {
    co_await reap_lanes(true); // their tables' keys first
    co_await run_params(std::string("UPDATE ") + kTablesTable +
                            " SET state = 'init' WHERE slot_name = $1 AND source_table = "
                            "ANY($2::text[])",
                        params(slot, schema::text_array_literal(source_tables)),
                        "requesting copies of tables of slot " + slot);
}

io::Task<void> PostgresDestination::forget_tables(std::string slot,
                                                  std::vector<std::string> source_tables) {
    co_await reap_lanes(true); // their tables' keys first
    co_await begin();
    for (const auto& name : source_tables) {
        co_await run_params(std::string("DELETE FROM ") + kTablesTable +
                                " WHERE slot_name = $1 AND source_table = $2",
                            params(slot, name), "forgetting the table state of " + name);
    }
}

io::Task<void> PostgresDestination::clear_tombstones(std::vector<std::string> targets) {
    co_await reap_lanes(true); // their tables' keys first
    co_await begin();
    for (const auto& t : targets) {
        co_await run_params(std::string("DELETE FROM ") + kTombstonesTable +
                                " WHERE target_table = $1",
                            params(t), "removing the tombstones of " + t);
    }
}

io::Task<std::int64_t> PostgresDestination::discard_unfinished_chunks(schema::Table table,
                                                                      CopyKey key) {
    // Only ranges the copier reads as chunks (SnapshotCopier::chunked_key, no key reached):
    // a keyset range's rows were committed with the key they reached, so none is past it.
    if (!SnapshotCopier::chunked_key(table)) {
        co_return 0;
    }
    const std::size_t first = table.key_columns.at(0);
    const std::string column = quote_identifier(table.columns[first].name);
    const std::string cast = "::" + type_of(table, first);
    std::vector<std::optional<std::string>> bounds;
    std::string where;
    for (const RangeProgress& r : key.ranges) {
        if (r.done || !r.after.empty()) {
            continue;
        }
        std::string in;
        if (r.lower) {
            bounds.push_back(*r.lower);
            in = column + " >= $" + std::to_string(bounds.size()) + cast;
        }
        if (r.upper) {
            bounds.push_back(*r.upper);
            in += (in.empty() ? "" : " AND ") + column + " < $" + std::to_string(bounds.size()) +
                  cast;
        }
        where += (where.empty() ? "(" : " OR (") + (in.empty() ? "true" : in) + ")";
    }
    if (where.empty()) {
        co_return 0;
    }
    if (deletes_ == Deletes::Soft) {
        where = "(" + where + ") AND " + kDeletedColumn + " = 0"; // the copy's rows, not those kept
    }
    co_await reap_lanes(true); // a lane of the table commits nothing after this
    co_await begin();
    const std::string target = target_sql(table);
    io::PgResult r = co_await run_params("WITH d AS (DELETE FROM " + target + " WHERE " + where +
                                             " RETURNING 1) SELECT count(*) FROM d",
                                         std::move(bounds),
                                         "removing the rows of " + target +
                                             " that its copy, going on, reads again");
    co_return std::stoll(std::string(r.get(0, 0)));
}

// ---- rows --------------------------------------------------------------------------------

io::Task<std::string> PostgresDestination::open_copy(std::shared_ptr<const schema::Table> table) {
    co_await begin();
    const std::string target = target_sql(*table);
    const bool binary = table->copy_binary;
    std::vector<std::string> columns = column_names(*table);
    columns.emplace_back(binary ? "binary" : "text"); // the format is part of the open COPY
    std::string header;
    if (copying_ == target && copy_columns_ == columns) {
        co_return header;
    }
    if (!copying_.empty()) {
        co_await end_copy();
    }
    co_await settle();
    std::string sql = "COPY " + target + " (" + join_quoted(column_names(*table)) + ", " +
                      kLsnColumn + ") FROM STDIN" + (binary ? " (FORMAT binary)" : "");
    try {
        co_await conn_.copy_in_start(std::move(sql));
    } catch (const io::PgError& e) {
        fail(e, "starting to copy rows into " + target);
    }
    copying_ = target;
    copy_columns_ = std::move(columns);
    if (binary) {
        schema::append_binary_copy_header(header);
    }
    co_return header;
}

io::Task<void> PostgresDestination::copy_rows(std::shared_ptr<const schema::Table> table,
                                              std::vector<schema::Row> rows, schema::Lsn version,
                                              std::optional<TableProgress> apart) {
    if (table->copy_binary) {
        throw InternalError("rows of " + table->qualified() +
                            ", copied in binary, were handed over decoded");
    }
    CopyLane* lane = nullptr;
    std::string buffer;
    if (apart && !main_copies_.contains(table->target)) {
        lane = co_await lane_of(*table);
    }
    if (lane == nullptr) {
        buffer = co_await open_copy(table);
    }
    const std::string version_text = lsn_text(version);
    for (const auto& row : rows) {
        for (const auto& value : row) {
            append_copy_value(buffer, value);
            buffer += '\t';
        }
        buffer += version_text;
        buffer += '\n';
        if (lane == nullptr && buffer.size() >= kCopyChunk) {
            co_await send_copy(buffer, false);
        }
    }
    if (lane != nullptr) {
        hand_to_lane(lane, std::move(buffer), std::int64_t(rows.size()), std::move(*apart));
        co_return;
    }
    co_await send_copy(buffer, true);
}

io::Task<PostgresDestination::CopyLane*> PostgresDestination::lane_of(const schema::Table& table) {
    if (laneless_.contains(table.target)) {
        co_return nullptr;
    }
    if (auto it = lanes_.find(table.target); it != lanes_.end() && it->second->finishing) {
        co_await reap_lanes(true); // copied again: after the last copy's key
    }
    if (!lanes_.contains(table.target)) {
        // A lane holds its connection until its key is committed, whatever the main commits
        // do: lanes whose commit is done serve again, and at max_lanes_ the new table waits
        // for those still committing. Without it, a publication of many small tables opened a
        // connection per table until a main commit (up to the destination's max_connections).
        co_await reap_lanes(false);
        if (lanes_.size() >= max_lanes_) {
            co_await reap_lanes(true);
        }
        std::string refusal;
        std::optional<io::PgConnection> conn = co_await idle_or_new_connection(&refusal);
        if (!conn) {
            // A destination at its connection limit (max_connections, or the role's or the
            // database's CONNECTION LIMIT) still takes the copy, through the main connection.
            io::log_warn("copying a table through the main destination connection: a "
                         "connection of its own was refused",
                         {{"table", target_sql(table)}, {"error", refusal}});
            laneless_.insert(table.target);
            co_return nullptr;
        }
        auto lane = std::make_unique<CopyLane>();
        lane->target = target_sql(table);
        lane->binary = table.copy_binary;
        lane->copy_sql = "COPY " + lane->target + " (" + join_quoted(column_names(table)) + ", " +
                         kLsnColumn + ") FROM STDIN" +
                         (table.copy_binary ? " (FORMAT binary)" : "");
        lane->conn = std::move(conn);
        lanes_.emplace(table.target, std::move(lane));
    }
    CopyLane* lane = lanes_.at(table.target).get();
    // The batch before must be on its way first: one batch in flight per lane.
    co_await lane->sending.join();
    co_return lane;
}

void PostgresDestination::hand_to_lane(CopyLane* lane, std::string bytes, std::int64_t rows,
                                       TableProgress progress) {
    lane->progress = std::move(progress);
    lane->uncommitted_rows += rows;
    lane->sending.spawn(send_to_lane(this, lane, std::move(bytes)));
}

io::Task<void> PostgresDestination::copy_tuples(std::shared_ptr<const schema::Table> table,
                                                CopyTuples tuples, schema::Lsn version,
                                                std::optional<TableProgress> apart) {
    if (!table->copy_binary) {
        throw InternalError("rows of " + table->qualified() +
                            ", copied as text, were handed over as binary COPY tuples");
    }
    CopyLane* lane = nullptr;
    std::string header;
    if (apart && !main_copies_.contains(table->target)) {
        lane = co_await lane_of(*table);
    }
    if (lane == nullptr) {
        header = co_await open_copy(table);
    }
    const auto lsn = std::uint64_t(std::int64_t(version.value()));
    std::string be; // the int8 in network byte order
    append_be32(be, std::uint32_t(lsn >> 32));
    append_be32(be, std::uint32_t(lsn));
    for (const std::size_t at : tuples.version_at) {
        if (at + 8 > tuples.bytes.size()) {
            throw InternalError("a binary COPY tuple of " + table->qualified() +
                                " ends before its _pgtide_lsn value");
        }
        std::memcpy(tuples.bytes.data() + at, be.data(), 8);
    }
    if (lane != nullptr) {
        hand_to_lane(lane, std::move(tuples.bytes), std::int64_t(tuples.version_at.size()),
                     std::move(*apart));
        co_return;
    }
    co_await send_copy(header, true);
    co_await send_copy(tuples.bytes, true);
}

io::Task<void> PostgresDestination::send_to_lane(PostgresDestination* self, CopyLane* lane,
                                                 std::string bytes) {
    try {
        if (!lane->open) {
            co_await lane->conn->exec("BEGIN");
            co_await lane->conn->copy_in_start(lane->copy_sql);
            lane->open = true;
            if (lane->binary) {
                std::string header;
                schema::append_binary_copy_header(header);
                co_await lane->conn->put_copy_data(std::move(header));
            }
        }
        co_await lane->conn->put_copy_data(std::move(bytes));
    } catch (const io::PgError& e) {
        self->fail(e, "copying rows into " + lane->target + " (on a connection of its own)");
    }
    if (lane->uncommitted_rows >= self->copy_commit_rows_) {
        co_await commit_lane(self, lane, {});
    }
}

io::Task<void> PostgresDestination::commit_lane(PostgresDestination* self, CopyLane* lane,
                                                std::vector<std::string> finish) {
    if (!lane->open && finish.empty()) {
        co_return;
    }
    if ((lane->open && !lane->progress) || !self->committed_) {
        throw InternalError("rows copied into " + lane->target +
                            " without their progress, or before any checkpoint");
    }
    // A copy: the main connection may commit a newer checkpoint (same slot, epoch and owner)
    // while this lane waits.
    const Checkpoint owner = *self->committed_;
    bool owned = false;
    try {
        if (lane->open) {
            co_await lane->conn->copy_in_end();
        } else {
            co_await lane->conn->exec("BEGIN");
        }
        for (const std::string& sql : finish) {
            co_await lane->conn->exec(sql);
        }
        if (lane->progress) {
            std::vector<TableProgress> rows{*lane->progress};
            co_await lane->conn->exec_params(progress_upsert_sql(),
                                             progress_params(owner.slot_name, rows));
        }
        io::PgResult found = co_await lane->conn->exec_params(
            std::string("SELECT 1 FROM ") + kCheckpointTable +
                " WHERE slot_name = $1 AND epoch = $2 AND owner = $3 FOR SHARE",
            params(owner.slot_name, std::to_string(owner.epoch), owner.owner));
        owned = found.rows() == 1;
        lane->open = false;
        co_await lane->conn->exec(owned ? "COMMIT" : "ROLLBACK");
    } catch (const io::PgError& e) {
        self->fail(e, finish.empty() ? "committing the rows copied into " + lane->target
                                     : "adding the primary key of " + lane->target +
                                           " after its copy (on the copy's own connection)");
    }
    if (!owned) {
        throw DefiniteError(ExitCode::Fenced,
                            "the checkpoint of slot " + owner.slot_name +
                                " was changed by another process while " + lane->target +
                                " was copied; another pgtide took over this destination, "
                                "stopping");
    }
    lane->progress.reset();
    lane->uncommitted_rows = 0;
}

io::Task<void> PostgresDestination::reap_lanes(bool wait) {
    for (auto it = lanes_.begin(); it != lanes_.end();) {
        CopyLane* lane = it->second.get();
        if (!lane->finishing || (!wait && lane->sending.active() != 0)) {
            ++it;
            continue;
        }
        co_await lane->sending.join(); // rethrows what its last commit threw
        if (lane->conn && lane->conn->is_open()) {
            idle_lanes_.push_back(std::move(*lane->conn));
        }
        it = lanes_.erase(it);
    }
}

io::Task<void> PostgresDestination::drop_lanes() {
    // Kept back for lanes that now roll back: their tables are not copied after all.
    after_lanes_.clear();
    for (auto& [target, lane] : lanes_) {
        try {
            co_await lane->sending.join();
        } catch (const std::exception&) {
            // The lane's rows are dropped with its transaction: what failed is reported by
            // whoever waited for it first, or not at all after another failure.
        }
        if (lane->conn) {
            lane->conn->close();
        }
    }
    lanes_.clear();
}

io::Task<void> PostgresDestination::apply_changes(std::vector<Change> changes) {
    co_await reap_lanes(true); // their tables' keys first
    co_await begin();
    // The last change of each key, per target table, in first-seen order of the keys. A
    // truncate, or a table whose columns changed, ends the stretch that can be merged at once.
    struct Group {
        std::shared_ptr<const schema::Table> table;
        std::unordered_map<std::string, std::size_t> by_key;
        std::vector<Change> last;
        /// Soft deletes, by index in `last`: an upsert whose key was deleted after it (the
        /// change carries the delete's version). Its row is written marked deleted, as applying
        /// the changes one by one would leave it.
        std::vector<bool> deleted;
    };
    std::vector<Group> groups;
    std::size_t i = 0;
    while (i < changes.size()) {
        groups.clear();
        for (; i < changes.size(); ++i) {
            Change& c = changes[i];
            if (c.kind == Change::Kind::Truncate || is_move(c)) {
                break;
            }
            Group* g = nullptr;
            bool reshaped = false;
            for (auto& candidate : groups) {
                if (candidate.table == c.table) {
                    g = &candidate;
                } else if (candidate.table->target == c.table->target) {
                    reshaped = true;
                }
            }
            if (reshaped) {
                break;
            }
            if (g == nullptr) {
                groups.emplace_back();
                g = &groups.back();
                g->table = c.table;
            }
            const std::string key = c.kind == Change::Kind::Delete
                                        ? encode_tombstone_key(c.values)
                                        : encode_tombstone_key(c.values, c.table->key_columns);
            const auto found = g->by_key.find(key);
            if (found == g->by_key.end()) {
                g->by_key.emplace(key, g->last.size());
                g->last.push_back(std::move(c));
                g->deleted.push_back(false);
                continue;
            }
            Change& earlier = g->last[found->second];
            if (deletes_ == Deletes::Soft && c.kind == Change::Kind::Delete &&
                earlier.kind == Change::Kind::Upsert) {
                earlier.version = c.version;
                g->deleted[found->second] = true;
                continue;
            }
            g->deleted[found->second] = false;
            if (c.kind == Change::Kind::Upsert && earlier.kind == Change::Kind::Upsert) {
                for (std::size_t v = 0; v < c.values.size() && v < earlier.values.size(); ++v) {
                    if (std::holds_alternative<schema::UnchangedToast>(c.values[v])) {
                        c.values[v] = std::move(earlier.values[v]);
                    }
                }
            }
            earlier = std::move(c);
        }
        for (const auto& g : groups) {
            std::vector<const Change*> upserts;
            std::vector<const Change*> deletes;
            std::vector<const Change*> upserts_deleted;
            std::vector<std::size_t> partial;
            for (std::size_t k = 0; k < g.last.size(); ++k) {
                const Change& c = g.last[k];
                if (c.kind == Change::Kind::Delete) {
                    deletes.push_back(&c);
                } else if (has_unchanged(c.values)) {
                    partial.push_back(k);
                } else {
                    (g.deleted[k] ? upserts_deleted : upserts).push_back(&c);
                }
            }
            if (!upserts.empty() || !deletes.empty() || !upserts_deleted.empty()) {
                co_await merge(upserts, deletes, upserts_deleted);
            }
            for (const std::size_t k : partial) {
                co_await update_partial(g.last[k], g.deleted[k]);
            }
        }
        if (i < changes.size() && changes[i].kind == Change::Kind::Truncate) {
            co_await truncate(changes[i]);
            ++i;
        } else if (i < changes.size() && is_move(changes[i])) {
            // Reads the old key's row: everything before it is applied first.
            co_await move_row(changes[i]);
            ++i;
        }
    }
}

io::Task<void> PostgresDestination::merge(const std::vector<const Change*>& upserts,
                                          const std::vector<const Change*>& deletes,
                                          const std::vector<const Change*>& upserts_deleted) {
    const schema::Table& table = !upserts.empty()   ? *upserts.front()->table
                                 : !deletes.empty() ? *deletes.front()->table
                                                    : *upserts_deleted.front()->table;
    const std::string target = target_sql(table);
    const Merge statements = co_await merge_statements(table);
    std::vector<std::size_t> columns(table.columns.size());
    for (std::size_t c = 0; c < columns.size(); ++c) {
        columns[c] = c;
    }
    if (!upserts.empty()) {
        // Named first: GCC 12 mishandles temporaries built inside a co_await expression.
        std::string what = "merging " + std::to_string(upserts.size()) + " upserts into " + target;
        std::vector<ParamArray> arrays = arrays_of(upserts, columns);
        co_await run_prepared(statements.upsert, std::move(arrays), std::move(what));
    }
    if (!upserts_deleted.empty()) {
        std::string what = "merging " + std::to_string(upserts_deleted.size()) +
                           " rows upserted and deleted into " + target + " (marked deleted)";
        std::vector<ParamArray> arrays = arrays_of(upserts_deleted, columns);
        co_await run_prepared(statements.upsert_deleted, std::move(arrays), std::move(what));
    }
    if (!deletes.empty()) {
        // A delete's values are its key's.
        std::string what = "merging " + std::to_string(deletes.size()) + " deletes into " + target;
        std::vector<ParamArray> arrays = arrays_of(deletes, table.key_columns);
        co_await run_prepared(statements.remove, std::move(arrays), std::move(what));
    }
}

std::vector<PostgresDestination::ParamArray>
PostgresDestination::arrays_of(const std::vector<const Change*>& changes,
                               const std::vector<std::size_t>& columns) {
    const schema::Table& table = *changes.front()->table;
    std::vector<ParamArray> arrays;
    arrays.reserve(columns.size() + 1);
    for (std::size_t c : columns) {
        arrays.emplace_back(ParamArray::element_of(table.columns.at(c).type));
    }
    arrays.emplace_back(ParamArray::Element::Int8);
    for (const Change* change : changes) {
        for (std::size_t v = 0; v < columns.size(); ++v) {
            if (!arrays[v].add(change->values.at(v))) {
                const auto* text = std::get_if<std::string>(&change->values[v]);
                throw DestinationError(
                    DestinationErrorKind::Other, 0,
                    "the source sent '" + (text != nullptr ? *text : std::string("?")) +
                        "' for column \"" + table.columns[columns[v]].name + "\" of " +
                        table.qualified() + ", which is not a value of its type " +
                        table.columns[columns[v]].type_sql);
            }
        }
        arrays.back().add(schema::Value(std::int64_t(change->version.value())));
    }
    return arrays;
}

io::Task<PostgresDestination::Merge>
PostgresDestination::merge_statements(const schema::Table& table) {
    const std::string target = target_sql(table);
    // The column types are part of the shape: the statements cast to them, and their base
    // types choose the parameters' types.
    std::string shape = target;
    for (std::size_t c = 0; c < table.columns.size(); ++c) {
        shape += '\n' + table.columns[c].name + '\t' + type_of(table, c) + '\t' +
                 std::to_string(table.columns[c].type.oid) + '\t' +
                 std::to_string(table.columns[c].type.element_oid);
    }
    const auto found = merges_.find(shape);
    if (found != merges_.end()) {
        co_return found->second;
    }
    // Every column travels as one array parameter, unnested into rows with no staging table to
    // fill, scan and empty: integers and booleans as arrays of their type, every other value as
    // text (the source's output) that the statement casts to its column's type, where the
    // input function reads it back as COPY would.
    const std::string n = std::to_string(merges_.size() + 1);
    Merge merge{"pgtide_upsert_" + n, "pgtide_delete_" + n, ""};
    std::string list;
    std::string select;
    std::string set;
    std::string unnest;
    for (std::size_t c = 0; c < table.columns.size(); ++c) {
        const std::string col = quote_identifier(table.columns[c].name);
        const std::string alias = "_c" + std::to_string(c + 1);
        list += col + ", ";
        select += "s." + alias + "::" + type_of(table, c) + ", ";
        unnest += "pg_catalog.unnest($" + std::to_string(c + 1) +
                  "::" + ParamArray::sql_type(ParamArray::element_of(table.columns[c].type)) +
                  "), ";
        if (!table.columns[c].key) {
            set += col + " = excluded." + col + ", ";
        }
    }
    std::string aliases;
    for (std::size_t c = 0; c < table.columns.size(); ++c) {
        aliases += "_c" + std::to_string(c + 1) + ", ";
    }
    std::vector<std::string> keys;
    for (auto k : table.key_columns) {
        keys.push_back(table.columns[k].name);
    }
    const std::string rows = "ROWS FROM (" + unnest + "pg_catalog.unnest($" +
                             std::to_string(table.columns.size() + 1) +
                             "::pg_catalog.int8[])) AS s(" + aliases + "_v)";
    // `deleted`: the value of _pgtide_deleted the rows get, soft deletes only ("" with hard).
    const auto upsert_sql = [&](const std::string& deleted) {
        const std::string mark =
            deleted.empty() ? std::string() : std::string(kDeletedColumn) + " = " + deleted + ", ";
        const std::string insert_list =
            list + (deleted.empty() ? std::string() : std::string(kDeletedColumn) + ", ");
        const std::string insert_values = select + (deleted.empty() ? "" : deleted + ", ");
        if (!merge_upserts_) {
            return "INSERT INTO " + target + " AS d (" + insert_list + kLsnColumn + ") SELECT " +
                   insert_values + "s._v::bigint FROM " + rows + " ON CONFLICT (" +
                   join_quoted(keys) + ") DO UPDATE SET " + set + mark + kLsnColumn +
                   " = excluded." + kLsnColumn + " WHERE d." + kLsnColumn + " <= excluded." +
                   kLsnColumn;
        }
        // MERGE finds each key once, through the join. INSERT … ON CONFLICT probes the key
        // before every insert and locks every row before it updates it: about a tenth of a
        // stream batch's time on the server. Both are right only for the one writer of the
        // table, which pgtide is: MERGE does not wait for a concurrent insert of its key.
        std::string on;
        std::string matched_set;
        for (std::size_t k = 0; k < table.key_columns.size(); ++k) {
            const std::size_t c = table.key_columns[k];
            on += (k == 0 ? "" : " AND ") + std::string("d.") +
                  quote_identifier(table.columns[c].name) + " = s._c" + std::to_string(c + 1) +
                  "::" + type_of(table, c);
        }
        for (std::size_t c = 0; c < table.columns.size(); ++c) {
            if (!table.columns[c].key) {
                matched_set += quote_identifier(table.columns[c].name) + " = s._c" +
                               std::to_string(c + 1) + "::" + type_of(table, c) + ", ";
            }
        }
        return "MERGE INTO " + target + " AS d USING " + rows + " ON " + on +
               " WHEN MATCHED AND d." + kLsnColumn + " <= s._v::bigint THEN UPDATE SET " +
               matched_set + mark + kLsnColumn + " = s._v::bigint WHEN NOT MATCHED THEN INSERT (" +
               insert_list + kLsnColumn + ") VALUES (" + insert_values + "s._v::bigint)";
    };
    const bool soft = deletes_ == Deletes::Soft;
    std::string upsert = upsert_sql(soft ? "0" : "");
    std::string upsert_deleted = soft ? upsert_sql("1") : std::string();
    if (soft) {
        merge.upsert_deleted = "pgtide_upsert_deleted_" + n;
    }
    std::string key_unnest;
    std::string key_aliases;
    std::string where;
    for (std::size_t k = 0; k < table.key_columns.size(); ++k) {
        const std::size_t c = table.key_columns[k];
        const std::string alias = "_k" + std::to_string(k + 1);
        key_unnest += "pg_catalog.unnest($" + std::to_string(k + 1) +
                      "::" + ParamArray::sql_type(ParamArray::element_of(table.columns[c].type)) +
                      "), ";
        key_aliases += alias + ", ";
        where += "d." + quote_identifier(table.columns[c].name) + " = s." + alias +
                 "::" + type_of(table, c) + " AND ";
    }
    const std::string change = deletes_ == Deletes::Soft
                                   ? "UPDATE " + target + " AS d SET " + kDeletedColumn + " = 1, " +
                                         kLsnColumn + " = s._v::bigint FROM"
                                   : "DELETE FROM " + target + " AS d USING";
    std::string remove = change + " ROWS FROM (" + key_unnest + "pg_catalog.unnest($" +
                         std::to_string(table.key_columns.size() + 1) +
                         "::pg_catalog.int8[])) AS s(" + key_aliases + "_v) WHERE " + where + "d." +
                         kLsnColumn + " <= s._v::bigint";
    if (!copying_.empty()) {
        co_await end_copy(); // rows of a table copied beside the stream
    }
    co_await settle();
    try {
        co_await conn_.prepare(merge.upsert, std::move(upsert));
        co_await conn_.prepare(merge.remove, std::move(remove));
        if (soft) {
            co_await conn_.prepare(merge.upsert_deleted, std::move(upsert_deleted));
        }
    } catch (const io::PgError& e) {
        fail(e, "preparing the merge statements of " + target);
    }
    merges_.emplace(std::move(shape), merge);
    co_return merge;
}

io::Task<void> PostgresDestination::run_prepared(std::string name, std::vector<ParamArray> arrays,
                                                 std::string what) {
    if (!copying_.empty()) {
        co_await end_copy();
    }
    std::vector<std::string> params;
    params.reserve(arrays.size());
    for (auto& a : arrays) {
        params.push_back(std::move(a).finish());
    }
    co_await settle();
    try {
        co_await conn_.send_prepared_binary(std::move(name), std::move(params));
    } catch (const io::PgError& e) {
        fail(e, what);
    }
    sent_ = std::move(what);
}

io::Task<void> PostgresDestination::update_partial(const Change& change, bool deleted) {
    const schema::Table& table = *change.table;
    const std::string target = target_sql(table);
    std::vector<std::optional<std::string>> values;
    std::string sql = "UPDATE " + target + " SET ";
    for (std::size_t c = 0; c < table.columns.size(); ++c) {
        const auto& v = change.values.at(c);
        if (table.columns[c].key || std::holds_alternative<schema::UnchangedToast>(v)) {
            continue;
        }
        values.push_back(param_of(v));
        sql +=
            quote_identifier(table.columns[c].name) + " = $" + std::to_string(values.size()) + ", ";
    }
    if (deletes_ == Deletes::Soft) {
        sql += std::string(kDeletedColumn) + (deleted ? " = 1, " : " = 0, ");
    }
    values.push_back(lsn_text(change.version));
    const std::string version = "$" + std::to_string(values.size());
    sql += std::string(kLsnColumn) + " = " + version + "::bigint WHERE " + kLsnColumn +
           " <= " + version + "::bigint";
    for (auto k : table.key_columns) {
        values.push_back(param_of(change.values.at(k)));
        sql += " AND " + quote_identifier(table.columns[k].name) + " = $" +
               std::to_string(values.size());
    }
    co_await run_params(std::move(sql), std::move(values),
                        "updating a row of " + target + " (unchanged TOAST columns kept)");
}

io::Task<void> PostgresDestination::move_row(const Change& change) {
    const schema::Table& table = *change.table;
    const std::string target = target_sql(table);
    std::vector<std::optional<std::string>> values;
    std::string list;
    std::string select;
    std::string set;
    for (std::size_t c = 0; c < table.columns.size(); ++c) {
        const std::string col = quote_identifier(table.columns[c].name);
        list += col + ", ";
        const auto& v = change.values.at(c);
        if (std::holds_alternative<schema::UnchangedToast>(v)) {
            select += "o." + col + ", ";
        } else {
            values.push_back(param_of(v));
            select += "$" + std::to_string(values.size()) + "::" + type_of(table, c) + ", ";
        }
        if (!table.columns[c].key) {
            set += col + " = excluded." + col + ", ";
        }
    }
    if (deletes_ == Deletes::Soft) {
        set += std::string(kDeletedColumn) + " = 0, ";
    }
    values.push_back(lsn_text(change.version));
    const std::string version = "$" + std::to_string(values.size()) + "::bigint";
    std::vector<std::string> keys;
    std::string where;
    for (std::size_t k = 0; k < table.key_columns.size(); ++k) {
        const std::size_t c = table.key_columns[k];
        keys.push_back(table.columns[c].name);
        values.push_back(param_of(change.moved_from.at(k)));
        where += std::string(where.empty() ? " WHERE " : " AND ") + "o." +
                 quote_identifier(table.columns[c].name) + " = $" + std::to_string(values.size());
    }
    std::string sql = "INSERT INTO " + target + " AS d (" + list + kLsnColumn + ") SELECT " +
                      select + version + " FROM " + target + " AS o" + where + " ON CONFLICT (" +
                      join_quoted(keys) + ") DO UPDATE SET " + set + kLsnColumn + " = excluded." +
                      kLsnColumn + " WHERE d." + kLsnColumn + " <= excluded." + kLsnColumn;
    co_await run_params(std::move(sql), std::move(values),
                        "moving a row of " + target +
                            " to a new key (unchanged TOAST columns "
                            "kept)");
}

io::Task<void> PostgresDestination::truncate(const Change& change) {
    const std::string target = target_sql(*change.table);
    const std::string rows = deletes_ == Deletes::Soft
                                 ? "UPDATE " + target + " SET " + kDeletedColumn + " = 1, " +
                                       kLsnColumn + " = $1::bigint"
                                 : "DELETE FROM " + target;
    co_await run_params(rows + " WHERE " + kLsnColumn + " <= $1::bigint",
                        params(lsn_text(change.version)), "truncating " + target);
}

} // namespace pgtide::replicate
