// SnapshotCopier: copies every published table under the slot's exported snapshot.
//
// Each reader connection imports the snapshot (BEGIN REPEATABLE READ; SET TRANSACTION
// SNAPSHOT) before its first query, so every reader sees the source exactly as of the slot's
// consistent LSN, and nothing committed after it: those changes arrive through the stream,
// which starts at that LSN. The replication connection that exported the snapshot must stay
// idle until every reader has imported it (any command there ends the snapshot), which the
// coordinator guarantees by not touching it until run() returns.
//
// Work is planned before any row is read, on the first reader's connection (inside the same
// snapshot): a table estimated to hold more than split_rows rows (pg_class.reltuples/relpages
// scaled to the table's current size, as the planner does) is split into half-open ranges of
// its first key column, cut at percentiles of a TABLESAMPLE of that column:
//     key < b1,  b1 <= key < b2,  ...,  bk <= key
// The cuts come from the server in the column's own order and collation, so whatever their
// values the ranges are disjoint and cover every (non-null) key: each row is copied exactly
// once. The boundaries only decide balance, never correctness. Composite keys are cut on their
// first column alone; rows sharing a first-column value stay in one range.
//
// Up to parallel_tables readers then take work items (a whole table, or one range of a split
// table) in order: every table's first item, then every split table's second, and so on, so
// that tables are copied at once; the ranges of one table are copied at once by several
// readers under the one exported snapshot. A range is read in keyset order, one binary COPY per
// page of page_rows rows; the next page continues after the last key read, with literals built from
// server-produced values. With read_chunks, a range whose first key column is an integer is
// read instead as chunks of about chunk_rows rows, each one unordered COPY of a half-open
// interval of that column (cut at percentiles of a sample of the range, as ranges are), with no
// ORDER BY or LIMIT, so the planner picks the scan (an index scan where the heap is in key
// order, a bitmap scan where it is not): a keyset page cost the source's backend more CPU
// (bench/RESULTS.md, 2026-12-06 and -07). A chunk has no resume point inside it: its batches
// carry no key reached, and the one after a chunk's end moves the range's lower bound to the
// next chunk's start (CopyRows::chunks_done_below). A copy that goes on from there reads again
// the rows of a chunk it was cut short in, which the destination discards first
// (Destination::discard_unfinished_chunks). Rows go to the applier in batches bounded by batch_rows
// and batch_bytes through a bounded channel: a slow destination stalls the readers, never grows
// memory (at most channel capacity + one batch per reader are decoded and not yet applied).
// The applier sees CopyRows of a table from any of its ranges, and one CopyComplete with the
// table's total, sent by whichever range finishes last, after every batch of every range.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/channel.hpp"
#include "io/task.hpp"
#include "replicate/apply_work.hpp"
#include "replicate/source_catalog.hpp"

namespace pgtide::replicate {

struct SnapshotOptions {
    int parallel_tables = 4; ///< reader connections: tables, or ranges of one table, at once
    std::int64_t page_rows = 2048;
    std::int64_t batch_rows = 512;
    std::uint64_t batch_bytes = 4u << 20;
    std::uint64_t max_row_bytes = 64u << 20;
    /// A table estimated to hold more rows than this is copied as key ranges by several readers
    /// at once (`snapshot.split_rows`); 0 never splits. Splitting needs parallel_tables >= 2.
    std::int64_t split_rows = 1000000;
    /// Ranges of tables whose first key column is an integer are read as unordered chunks of
    /// about chunk_rows rows (set for PostgreSQL destinations) instead of keyset pages.
    bool read_chunks = false;
    std::int64_t chunk_rows = 65536;
    std::string application_name = "pgtide";
    const bool* stop_requested = nullptr; ///< checked between pages; stops with StopRequested
};

/// What a copy has done so far (tests, logs). Plain counters, updated on the loop thread.
struct SnapshotStats {
    std::int64_t rows_read = 0;      ///< rows decoded into batches (handed over, or about to be)
    std::int64_t tables_split = 0;   ///< tables copied as several key ranges
    std::int64_t ranges_planned = 0; ///< key ranges of those tables
    std::int64_t ranges_copied = 0;  ///< of those, finished
    std::int64_t chunks_read = 0;    ///< unordered chunks read (read_chunks)
    int max_ranges_in_flight = 0;    ///< most ranges of one table being copied at the same moment
};

/// Half-open bounds on a table's first key column, `lower <= key < upper`, each an SQL literal
/// cast to the column's type; an absent bound is open.
struct KeyRange {
    std::optional<std::string> lower;
    std::optional<std::string> upper;
};

/// The copy was stopped on request (SIGINT/SIGTERM) before it finished.
class StopRequested : public std::runtime_error {
public:
    StopRequested() : std::runtime_error("stopped on request during the snapshot") {}
};

class SnapshotCopier {
public:
    SnapshotCopier(std::string dsn, std::string snapshot_name,
                   const std::vector<SourceTable>& tables, SnapshotOptions options);

    /// Table `table` (an index into the tables) goes on from where an earlier copy got
    /// (`copy_key`): only the rows after each unfinished range's last copied key are read, and
    /// the ranges that are done are not. The caller has checked that the table's shape is
    /// `key.shape` (copy_shape) and that the destination holds what `key` says. Before run().
    void resume(std::size_t table, CopyKey key);

    /// Copies every table, sending one CopyPlanned per table first, then CopyRows and exactly
    /// one CopyComplete per table (after all of its rows) to `out`. Suspends; call once. Throws
    /// io::PgError (source), DefiniteError (a row over max_row_bytes), StopRequested.
    io::Task<void> run(io::Channel<ApplyWork>& out);

    /// What a copy_key must have been recorded with for a copy of `table` to go on from it:
    /// its columns and their types, its key, its row filter and how values are carried.
    static std::string copy_shape(const SourceTable& table);

    /// Counters of the copy so far; valid during and after run().
    const SnapshotStats& stats() const noexcept { return stats_; }

    /// The SQL of one page of `range`, after the key `after` (empty: from the range's start):
    /// exposed for tests.
    static std::string page_query(const SourceTable& table, const std::vector<std::string>& after,
                                  std::int64_t limit, const KeyRange& range = {});

    /// How many ranges a table of `estimated_rows` is cut into: 1 (not split) unless
    /// split_rows > 0, readers >= 2 and estimated_rows > split_rows; then at least `readers`,
    /// about split_rows rows each, at most kMaxRanges.
    static int range_count(std::int64_t estimated_rows, std::int64_t split_rows, int readers);
    static constexpr int kMaxRanges = 256;

    /// The SQL of one unordered chunk: every row of `table` inside `range`, in no order.
    static std::string chunk_query(const SourceTable& table, const KeyRange& range);
    /// Whether a range of `table` is read as chunks with read_chunks: its first key column is
    /// an integer (int2, int4, int8, oid or a domain over one), whose order is the same in any
    /// database, so that a destination can find a chunk's rows again by its bounds.
    static bool chunked_key(const schema::Table& table);
    static constexpr int kMaxChunks = 4096; ///< per range

private:
    /// One reader's unit of work: a whole table, or range `part` (1-based) of a split table.
    struct Work {
        std::size_t table = 0;
        KeyRange range;
        int part = 1;                   ///< 1-based: the range's place in the table's plan
        std::vector<std::string> after; ///< literals: go on after this key (a resumed range)
    };
    /// A table's progress across its ranges.
    struct TableCopy {
        int ranges = 1;
        int ranges_left = 1;
        int in_flight = 0;
        std::int64_t rows = 0;
        std::int64_t estimated_rows = 0;
        bool started = false;
    };

    io::Task<io::PgConnection> open_reader();
    io::Task<void> plan(io::PgConnection& conn);
    io::Task<std::vector<std::int64_t>> estimate_rows(io::PgConnection& conn);
    io::Task<std::vector<std::string>> cut_points(io::PgConnection& conn, std::size_t index,
                                                  int pieces, std::int64_t sample_rows,
                                                  KeyRange within = {});
    static io::Task<void> reader(SnapshotCopier* self, io::Channel<ApplyWork>* out,
                                 io::PgConnection conn);
    /// Copies one range into out; false when out was closed (the applier stopped) and the
    /// copy was abandoned.
    io::Task<bool> copy_range(io::PgConnection& conn, Work work, io::Channel<ApplyWork>& out);
    void check_stop() const;

    std::string dsn_;
    std::string snapshot_name_;
    const std::vector<SourceTable>& tables_;
    SnapshotOptions options_;
    std::vector<Work> work_;
    std::size_t next_work_ = 0;
    std::vector<TableCopy> copies_;
    std::vector<CopyKey> plans_;            ///< by table: its ranges, sent as CopyPlanned
    std::map<std::size_t, CopyKey> resume_; ///< by table: where an earlier copy got
    SnapshotStats stats_;
};

} // namespace pgtide::replicate
