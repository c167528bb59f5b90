// PostgresDestination: a PostgreSQL database kept in step with the source (DESIGN §5 "PostgreSQL
// destination"), through async PgConnections on the loop: one for everything but the copies
// of tables, which go through a connection per table (CopyLane).
//
// Values. Tables handed to it have `source_text` set: every value is the source's own text
// output (DateStyle ISO, TimeZone UTC, IntervalStyle iso_8601, shortest exact floats, hex
// bytea), which the destination's input functions read back into the same types. Nothing is
// reformatted on the way, so no type needs a codec of pgtide's and no value can drift.
//
// Enum, domain and composite types the columns use are created first when missing (from their
// source definitions, dependencies first); one that exists with another definition stops it.
//
// Tables keep the source's schema and name (a `[[tables]] target` may name another, as
// "schema.name" or "name"), its column types as format_type prints them, NOT NULL on the key
// columns, the key as PRIMARY KEY, plus `_pgtide_lsn bigint NOT NULL`; a column whose STORAGE
// the source set (TableColumn::pg_storage) gets it when the table or the column is created. The
// metadata tables live in the schema `public`.
//
// Versions (DESIGN §5), set-based:
//  * Snapshot rows are COPYed straight into the target table, without its primary key (added
//    back when the copy is whole, before any stream change of the table; a table recorded as
//    copying may lack it): an epoch starts by emptying its
//    tables in the same transaction as its checkpoint, the readers read each key once per
//    epoch, and no stream change is applied before the copy completes, so every key arrives
//    into an empty slot and "replace iff C > v" never has a row to compare with.
//  * Stream changes are reduced to the last change per key (an update with unchanged TOAST
//    columns takes them from an earlier change of the same key in the batch) and merged with
//    one prepared `MERGE … USING unnest(…) … WHEN MATCHED AND _pgtide_lsn <= the change's
//    version THEN UPDATE … WHEN NOT MATCHED THEN INSERT` (before PostgreSQL 15: `INSERT …
//    SELECT … FROM unnest(…) ON CONFLICT … DO UPDATE … WHERE _pgtide_lsn <=
//    excluded._pgtide_lsn`) and one prepared `DELETE … USING unnest(…) WHERE _pgtide_lsn <= the
//    change's version`, each sent without waiting for its answer (settle reads it). Each column
//    travels as one binary array parameter: integers, floats, booleans and uuids as arrays of
//    their type, other values as text[] of the source's text, cast to the column's type in the
//    statement. An update whose TOAST columns stay unknown becomes an UPDATE of the known columns
//    (none when the row is absent: the rules' skip). A truncate at L deletes the rows at or below
//    L, at its place in the batch. An update that changed the key and left TOAST columns unchanged
//    becomes an INSERT … SELECT from the old key's row, after what came before it in the batch.
//  * Tombstones are not recorded: stream changes never meet a copy that is still running (the
//    applier's stream starts after the snapshot), which is the only case they exist for.
//  * Soft deletes (Deletes::Soft): deletes and truncates are UPDATEs that mark rows
//    `_pgtide_deleted = 1` at their version; upserts set it to 0; an upsert and then a delete
//    of one key in a batch is written marked deleted (Merge::upsert_deleted). Emptying a table
//    for its copy marks its rows instead (prepare_for_copies); table_copied removes the marked rows
//    whose key the copy brought again before it adds the key back.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/async_scope.hpp"
#include "io/pg_connection.hpp"
#include "replicate/destination.hpp"
#include "replicate/source_catalog.hpp"

namespace pgtide::replicate {

class PostgresDestination final : public Destination {
public:
    /// Connects (the session settings of every pgtide connection, `application_name`) and
    /// creates the metadata tables when missing. Suspends. Throws DestinationError naming the
    /// server and database.
    /// A table copied through a connection of its own (CopyLane) commits every
    /// `copy_commit_rows` rows; at most `max_lanes` such connections are open at once (the
    /// coordinator's: twice snapshot.parallel_tables, so that tables copy while others' keys
    /// are built). `deletes`: what a stream delete does (destination.hpp).
    static io::Task<std::unique_ptr<PostgresDestination>>
    open(std::string url, std::string application_name, std::int64_t copy_commit_rows,
         Deletes deletes = Deletes::Hard, std::size_t max_lanes = 8);

    std::string describe() const override { return "postgresql destination (" + target_ + ")"; }
    io::Task<std::optional<Checkpoint>> load_checkpoint(std::string slot) override;
    io::Task<void> insert_checkpoint(Checkpoint c) override;
    io::Task<void> create_tables(std::vector<schema::Table> tables) override;
    /// Empty: the tables declare the source's types, and ensure_table refuses a mismatch.
    io::Task<std::map<std::string, std::vector<schema::TableColumn>>>
    recorded_column_types() override {
        co_return std::map<std::string, std::vector<schema::TableColumn>>();
    }
    io::Task<std::vector<TableProgress>> table_states(std::string slot) override;
    io::Task<void> follow_schema(std::shared_ptr<const schema::Table> table) override;
    /// Sends the rows as COPY text; with `apart`, through the table's CopyLane, without waiting
    /// for them to be sent.
    io::Task<void> copy_rows(std::shared_ptr<const schema::Table> table,
                             std::vector<schema::Row> rows, schema::Lsn version,
                             std::optional<TableProgress> apart) override;
    /// Sends the tuples as they are, each with `version` written into its _pgtide_lsn field.
    /// With `apart`, through the table's CopyLane, without waiting for them to be sent.
    io::Task<void> copy_tuples(std::shared_ptr<const schema::Table> table, CopyTuples tuples,
                               schema::Lsn version, std::optional<TableProgress> apart) override;
    io::Task<void> apply_changes(std::vector<Change> changes) override;
    io::Task<void> reset_tables(std::string slot, std::vector<schema::Table> tables) override;
    io::Task<void> empty_tables(std::vector<schema::Table> tables) override;
    /// Adds the primary key that emptying the table for its copy dropped: in the last
    /// transaction of the table's CopyLane, without waiting for it, when the table has one;
    /// else on the main connection.
    io::Task<void> table_copied(std::shared_ptr<const schema::Table> table) override;
    io::Task<void> request_copies(std::string slot,
                                  std::vector<std::string> source_tables) override;
    io::Task<void> forget_tables(std::string slot, std::vector<std::string> source_tables) override;
    io::Task<void> clear_tombstones(std::vector<std::string> targets) override;
    io::Task<std::int64_t> discard_unfinished_chunks(schema::Table table, CopyKey key) override;
    io::Task<bool> commit(std::vector<TableProgress> progress, Checkpoint expected,
                          Checkpoint next) override;
    io::Task<void> rollback() override;
    io::Task<void> close() override;
    /// After its connection was lost: a new session in place of the old one. What the old one
    /// had not committed is gone with it (the open transaction, the copy lanes), and so are its
    /// prepared statements. Throws DestinationError (CantOpen) while the server cannot be
    /// reached. Suspends.
    io::Task<void> reconnect();

    /// Creates each of `types` (in order: dependencies first) that the destination lacks, and
    /// refuses (DestinationError, kind Schema) one that exists with another definition.
    /// No transaction may be open. Suspends.
    io::Task<void> create_types(std::vector<UserType> types);

    /// Merges upserts with INSERT … ON CONFLICT, as on a server older than PostgreSQL 15 (which
    /// has no MERGE). For tests of that path; before the first stream batch.
    void use_on_conflict_upserts();

    /// The destination table of `table`: the source's schema and name, or the target the
    /// configuration gives it (`name`, or `schema.name`).
    struct TargetName {
        std::string schema;
        std::string name;
    };
    static TargetName target_name(const schema::Table& table);

    /// The destination table of `table`, quoted: "schema"."name".
    static std::string target_sql(const schema::Table& table);

    /// pgtide's own tables in the destination, all in schema public, unquoted.
    static const std::vector<std::string>& metadata_tables();

private:
    /// The prepared merge statements of one target table, for one shape of its columns.
    struct Merge {
        std::string upsert; ///< statement name: MERGE (INSERT … ON CONFLICT before 15)
        std::string remove; ///< statement name: versioned DELETE … USING (soft: UPDATE … FROM)
        /// Soft deletes: the upsert whose rows are written marked deleted (rows inserted or
        /// updated, then deleted, within one batch); "" with hard deletes.
        std::string upsert_deleted;
    };
    /// One column's values of a batch as a binary array parameter (array_recv's input): of the
    /// column's own type when it is an integer, float, boolean or uuid, whose binary form pgtide
    /// writes from the source's text, so that the server reads them without parsing or casting
    /// text; else `text[]` of the source's text, which the statement casts to the column's type.
    class ParamArray {
    public:
        enum class Element { Text, Int2, Int4, Int8, Float4, Float8, Bool, Uuid };
        /// The element a column of `type` travels as.
        static Element element_of(const schema::TypeRef& type);
        /// "pg_catalog.int8[]" and so on: the parameter's type in the statement.
        static const char* sql_type(Element element);

        explicit ParamArray(Element element = Element::Text) : element_(element) {}
        /// Appends a value: NULL, an integer, or source text (of the element type). False when
        /// the text is not a value of the element type (the array is then unchanged).
        bool add(const schema::Value& value);
        std::string finish() &&;

    private:
        /// The PostgreSQL type of an element, and the array's name in a statement.
        struct ElementType {
            std::uint32_t oid;
            const char* array_sql;
        };
        static ElementType element_type(Element element);

        Element element_;
        std::string elements_;
        std::uint32_t count_ = 0;
        bool has_null_ = false;
    };

    /// A connection of its own that copies one table (copy_rows or copy_tuples with `apart`), in
    /// its own transactions: one destination backend bounds a copy (it parses, writes the heap
    /// and the WAL), so tables copied at once each get one, and the applier does not wait for
    /// them.
    ///  * Its rows commit together with the table's progress row, which only the lane writes
    ///    while it exists (commit() leaves it out): rows and the progress covering them never
    ///    commit apart. It commits every copy_commit_rows rows, and when the copy is whole.
    ///  * Only while this process owns the checkpoint: before COMMIT it takes a share lock on
    ///    the checkpoint row with our slot, epoch and owner token. A takeover's UPDATE waits for
    ///    that commit; after a takeover the row is not found, the lane rolls back and stops
    ///    with exit code 4.
    ///  * Its last transaction, started by table_copied(), also adds the table's primary key
    ///    (and turns its autovacuum back on): the key is built on the lane's connection while
    ///    the applier goes on with the other tables' rows, instead of holding up the main
    ///    connection, and with it every other table, for as long as the index takes. The lane
    ///    is then `finishing`; commit() keeps the table's later progress rows (a table whose key
    ///    is not committed must not be recorded copied) until the lane is done, and waits for
    ///    finishing lanes once no lane is copying any more.
    ///  * The main connection never waits on a lane's locks: the lane's table was emptied by a
    ///    committed transaction, the main connection only ever waits for a finishing lane
    ///    outside its checkpoint update (reap_lanes), and a lane holds its share lock only
    ///    between its owner check and its COMMIT.
    struct CopyLane {
        std::string target;                    ///< the table, quoted
        std::string copy_sql;                  ///< its COPY … FROM STDIN
        bool binary = false;                   ///< the COPY is binary (Table::copy_binary)
        std::optional<io::PgConnection> conn;  ///< connected when the lane is made
        bool open = false;                     ///< its transaction and COPY are open
        std::optional<TableProgress> progress; ///< covers the rows sent since its last commit
        std::int64_t uncommitted_rows = 0;
        bool finishing = false; ///< its copy is whole: its last commit adds the key (sending)
        io::AsyncScope sending; ///< the batch on its way, or the last commit: at most one
    };

    PostgresDestination(io::PgConnection conn, std::string target, std::string url,
                        std::string application_name, std::int64_t copy_commit_rows,
                        Deletes deletes, std::size_t max_lanes);

    io::Task<io::PgResult> run(std::string sql, std::string what);
    io::Task<io::PgResult>
    run_params(std::string sql, std::vector<std::optional<std::string>> params, std::string what);
    [[noreturn]] void fail(const std::exception& e, const std::string& what) const;
    io::Task<void> begin();
    io::Task<void> end_copy();
    /// Reads the answer to the merge statement run_prepared sent, if any (its error is thrown
    /// here, described by what it did). Every other use of the connection comes after it.
    io::Task<void> settle();
    /// Begins the transaction if needed and opens the COPY of `table`'s rows in its format
    /// (binary when copy_binary), ending a COPY of another table or format left open. Returns
    /// what to send before the rows: the binary header when it opened a binary COPY, else "".
    io::Task<std::string> open_copy(std::shared_ptr<const schema::Table> table);
    /// What ensure_table does with a column whose type differs from the source's.
    enum class Retype {
        Refuse, ///< an existing table pgtide did not fill this way: explain and stop
        Cast,   ///< the stream followed a change that keeps every value: ALTER … USING c::type
        Empty,  ///< the table is empty, a copy follows: ALTER … USING NULL
    };
    /// What the destination holds of a table's target, as ensure_table needs it.
    struct TargetFacts {
        bool schema_exists = false;
        /// Its columns (name, format_type) in their order; none when the table does not exist.
        std::vector<std::pair<std::string, std::string>> columns;
        std::vector<std::string> key; ///< its primary key's columns, in key order
    };
    /// A connection of the destination's besides the main one: an idle lane's, else a new
    /// session; nullopt, with the server's refusal in `*refusal`, when it cannot connect.
    io::Task<std::optional<io::PgConnection>> idle_or_new_connection(std::string* refusal);
    /// Creates `tables` (create_table_sql) in one transaction on a connection of their own,
    /// which then waits among the idle lanes; `*refused` takes them when no connection is had.
    static io::Task<void> create_elsewhere(PostgresDestination* self,
                                           std::vector<schema::Table> tables,
                                           std::vector<schema::Table>* refused);
    /// Throws DestinationError (Schema) when a column of `table` has a name pgtide reserves.
    void check_reserved_columns(const schema::Table& table) const;
    /// A statement, and what it does for an error that names it.
    struct Statement {
        std::string sql;
        std::string what;
    };
    /// CREATE TABLE for `table` (the source's column types, NOT NULL keys, PRIMARY KEY, the
    /// hidden columns), then the ALTER that gives columns the source's STORAGE, if any.
    std::vector<Statement> create_table_sql(const schema::Table& table) const;
    /// The TargetFacts of each of `tables`, in their order, read in one round trip (a
    /// publication of a thousand tables was three thousand, twice per run).
    io::Task<std::vector<TargetFacts>> target_facts(std::vector<schema::Table> tables);
    /// Creates the target table, or adds the columns it lacks and deals with changed types as
    /// `retype` says. `facts`: the table's target_facts, read just before.
    io::Task<void> ensure_table(const schema::Table& table, Retype retype, TargetFacts facts);
    /// ensure_table after reading the table's facts alone.
    io::Task<void> ensure_table(const schema::Table& table, Retype retype);
    /// Removes the tombstones of `tables` (their copy starts afresh).
    io::Task<void> remove_tombstones(std::vector<schema::Table> tables);
    /// What prepare_for_copies and table_copied change about a copy's target table.
    struct CopyTarget {
        std::optional<std::string> key; ///< the name of its primary key, when it has one
        /// A plain table, which takes storage parameters (a partitioned one does not: its
        /// partitions are vacuumed on their own).
        bool plain = false;
        /// Its autovacuum is paused (autovacuum_enabled = false), as prepare_for_copies leaves
        /// a table whose key it drops.
        bool paused = false;
        /// A plain table whose heap has no page, so no row: nothing to empty.
        bool empty = false;
    };
    /// The CopyTarget of each of `targets` (quoted names), in their order; throws
    /// DestinationError (Schema) naming one that is missing.
    io::Task<std::vector<CopyTarget>> copy_targets(std::vector<std::string> targets);
    /// copy_targets of the targets of `tables`.
    io::Task<std::vector<CopyTarget>> copy_targets_of(std::vector<schema::Table> tables);
    /// Readies the targets of `tables`, emptied for a copy, for loading (their ALTERs in one
    /// round trip): drops the primary key of each one not estimated small (kKeepKeyRows; the
    /// index is built once the copy is whole, in table_copied, from sorted keys, instead of row
    /// by row: more than half of a big copy's time on the destination) and turns its autovacuum
    /// off until then (a vacuum of a table being loaded is wasted work, and one still running
    /// when the copy ends holds up ADD PRIMARY KEY until PostgreSQL cancels it, a second
    /// later). Soft deletes: every key is dropped; the target is not emptied; first
    /// its live rows are marked deleted, versions kept (destination.hpp's Deletes::Soft), and the
    /// copy's rows come in beside them (table_copied removes those the copy found again before it
    /// adds the key). A table without its key (a copy of it cut short) instead loses its live rows,
    /// that copy's.
    /// `found`: their copy_targets_of, read in the same transaction.
    io::Task<void> prepare_for_copies(std::vector<schema::Table> tables,
                                      std::vector<CopyTarget> found);
    /// `upserts_deleted`: soft deletes' upserts whose rows are written marked deleted.
    io::Task<void> merge(const std::vector<const Change*>& upserts,
                         const std::vector<const Change*>& deletes,
                         const std::vector<const Change*>& upserts_deleted);
    /// The merge statements of `table`'s target for its current columns, prepared on first use.
    io::Task<Merge> merge_statements(const schema::Table& table);
    /// The merge parameters of `changes`: one array per value position (the values of each
    /// change at `columns`, the table's column indexes, in order), then one of their versions.
    static std::vector<ParamArray> arrays_of(const std::vector<const Change*>& changes,
                                             const std::vector<std::size_t>& columns);
    /// Sends the prepared statement `name` with `arrays`, without waiting for its answer: the
    /// server runs it while the next batch is readied (settle reads it).
    io::Task<void> run_prepared(std::string name, std::vector<ParamArray> arrays, std::string what);
    /// `deleted`: soft deletes, the row is marked deleted too (it was deleted in the batch).
    io::Task<void> update_partial(const Change& change, bool deleted);
    io::Task<void> truncate(const Change& change);
    io::Task<void> move_row(const Change& change);
    io::Task<void> send_copy(std::string& buffer, bool last);
    /// The lane of `table`, made on first use, once the batch it has on its way is sent; null
    /// when the destination refused the lane a connection (its rows then go through the main
    /// connection, in the main transaction).
    io::Task<CopyLane*> lane_of(const schema::Table& table);
    /// Starts sending `bytes` (`rows` rows, covered by `progress` once in) through `lane`.
    void hand_to_lane(CopyLane* lane, std::string bytes, std::int64_t rows, TableProgress progress);
    /// Sends `bytes` through `lane`: begins and opens its COPY first when needed;
    /// commits once the lane holds copy_commit_rows rows.
    static io::Task<void> send_to_lane(PostgresDestination* self, CopyLane* lane,
                                       std::string bytes);
    /// Ends the lane's COPY, runs `finish` (the statements that end its table's copy: the
    /// ALTER TABLE that adds its key; may be empty) and commits its rows with its progress if
    /// the checkpoint row still has the slot, epoch and owner last committed; else rolls back
    /// and throws DefiniteError(Fenced). With `finish`, a transaction is begun when none is
    /// open. Nothing of the lane may be on its way.
    static io::Task<void> commit_lane(PostgresDestination* self, CopyLane* lane,
                                      std::vector<std::string> finish);
    /// Forgets the finishing lanes whose last commit is done (their connections go idle),
    /// first waiting for every finishing lane when `wait`; rethrows what such a commit threw.
    io::Task<void> reap_lanes(bool wait);
    /// Waits for the lanes' sends and closes their connections: their transactions roll back.
    io::Task<void> drop_lanes();

    io::PgConnection conn_;
    std::string target_; ///< host, port, database and user: for messages
    bool in_transaction_ = false;
    std::string copying_;                   ///< target table of the COPY left open; "" when none
    std::vector<std::string> copy_columns_; ///< its column list
    std::optional<std::string> sent_;       ///< what the statement sent and not settled does
    std::map<std::string, Merge> merges_;   ///< by target table and its columns' names and types
    std::string url_;                       ///< for the lanes' connections
    std::string application_name_;
    std::map<std::string, std::unique_ptr<CopyLane>> lanes_; ///< by Table::target
    std::int64_t copy_commit_rows_;
    std::size_t max_lanes_; ///< lanes (copying or committing) open at once, see lane_of
    Deletes deletes_;
    bool merge_upserts_; ///< upserts are merged with MERGE (PostgreSQL 15+), else ON CONFLICT
    std::vector<io::PgConnection> idle_lanes_; ///< connections of lanes whose copy is whole
    /// Progress rows commit() kept back, by Table::target, until the table's finishing lane is
    /// done: they record the table copied, which its primary key must be committed before.
    std::map<std::string, TableProgress> after_lanes_;
    /// Tables copied through the main connection because a connection of their own was refused.
    std::set<std::string> laneless_;
    /// Small tables whose copy keeps their primary key and autovacuum as they are, by
    /// Table::target (prepare_for_copies, kMainConnectionRows): their rows go through the main
    /// connection and its transaction, in which many such tables commit at once (a lane commits
    /// each table on its own: a commit and its WAL flush per table), and table_copied has
    /// nothing to do for them.
    std::set<std::string> main_copies_;
    /// The checkpoint as last committed: the owner a lane checks before it commits.
    std::optional<Checkpoint> committed_;
};

} // namespace pgtide::replicate
