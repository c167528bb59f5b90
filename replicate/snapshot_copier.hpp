// SnapshotCopier: copies every published table under the slot's exported snapshot.
//
// Each reader connection imports the snapshot (BEGIN REPEATABLE READ; SET TRANSACTION
// SNAPSHOT) before its first query, so every reader sees the source exactly as of the slot's
// consistent LSN, and nothing committed after it: those changes arrive through the stream,
// which starts at that LSN. The replication connection that exported the snapshot must stay
// idle until every reader has imported it (any command there ends the snapshot), which the
// coordinator guarantees by not touching it until run() returns.
//
// A table is read in keyset order, one binary COPY per page of page_rows rows; the next page
// continues after the last key read, with literals built from server-produced values. Rows go
// to the applier in batches bounded by batch_rows and batch_bytes through a bounded channel:
// a slow destination stalls the readers, never grows memory.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/channel.hpp"
#include "io/task.hpp"
#include "replicate/apply_work.hpp"
#include "replicate/source_catalog.hpp"

namespace pgtide::replicate {

struct SnapshotOptions {
    int parallel_tables = 4;
    std::int64_t page_rows = 2048;
    std::int64_t batch_rows = 512;
    std::uint64_t batch_bytes = 4u << 20;
    std::uint64_t max_row_bytes = 64u << 20;
    std::string application_name = "pgtide";
    const bool* stop_requested = nullptr; ///< checked between pages; stops with StopRequested
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

    /// Copies every table, sending CopyRows and one CopyComplete per table to `out`. Suspends.
    /// Throws io::PgError (source), DefiniteError (a row over max_row_bytes).
    io::Task<void> run(io::Channel<ApplyWork>& out);

    /// The SQL of one page: exposed for tests.
    static std::string page_query(const SourceTable& table, const std::vector<std::string>& after,
                                  std::int64_t limit);

private:
    static io::Task<void> reader(SnapshotCopier* self, io::Channel<ApplyWork>* out);
    io::Task<void> copy_table(io::PgConnection& conn, std::size_t index,
                              io::Channel<ApplyWork>& out);

    std::string dsn_;
    std::string snapshot_name_;
    const std::vector<SourceTable>& tables_;
    SnapshotOptions options_;
    std::size_t next_table_ = 0;
};

} // namespace pgtide::replicate
