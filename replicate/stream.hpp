// Stream: reads the pgoutput stream and turns it into ApplyWork for the applier.
//
// The reader never writes the destination. It skips every transaction whose commit LSN is
// below the checkpoint it started from (the destination already has it: commit records are
// ordered, so such a transaction ended at or before the checkpoint), answers keepalives with
// the durable checkpoint, and reports idle positions only when no transaction is open, since
// only then has everything before a keepalive's WAL end been received.
//
// Streamed transactions (a Spool in the options, streaming 'on'): the changes and Relation
// messages of a stream block go to the transaction's spool file undecoded. Stream Commit reads
// them back and decodes them then, Relation messages included, so that each change meets the
// relation map in force when it was sent, whatever committed in between; the transaction then
// travels to the applier exactly as a non-streamed one with that commit would (version
// commit_lsn, checkpoint end_lsn, skipped when its commit LSN is below the start), and its
// file is deleted. Stream Abort deletes or truncates the file. Open streamed transactions are
// no transaction of the reader: idle positions and stops may fall between their blocks, since
// the server resends every transaction that had not ended when streaming restarts.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/channel.hpp"
#include "io/pg_connection.hpp"
#include "io/task.hpp"
#include "replicate/apply_work.hpp"
#include "replicate/pgoutput.hpp"
#include "replicate/replication_connection.hpp"
#include "replicate/source_catalog.hpp"

namespace pgtide::replicate {

struct Metrics;
class Spool;

/// Tables copied while the stream runs (DESIGN §4 "Copy ranges"), shared by the main stream and
/// the catch-up stream that reads the copy's temporary slot from the copy's consistent LSN once
/// every row is copied. Until the hand-off the main stream skips every change of `tables` and the
/// catch-up applies them; the catch-up hands off at a position `handoff` past every transaction
/// the main stream has begun (`main_begun`, the commit LSN of the last), having applied every
/// transaction of `tables` committed below it; the main stream applies those committed at or
/// after it. Both run on one loop, so the test and the hand-off happen with nothing in between.
struct ConcurrentCopy {
    std::set<std::string> tables; ///< by source name
    schema::Lsn main_begun;
    std::optional<schema::Lsn> handoff;
};

/// Takes a table that joined the publications while the main stream runs, without ending the
/// stream (DESIGN §4 "Copy ranges"; the coordinator implements it).
class TableJoiner {
public:
    virtual ~TableJoiner() = default;
    /// `name` (schema.table), which the stream does not hold, was described by the stream or
    /// listed by the publications. Returns its table, created in the destination and being
    /// copied beside the stream (its name is in the stream's ConcurrentCopy), or nullptr when it
    /// is not published or cannot be copied so now: the stream then goes on as it would without
    /// a joiner. Suspends.
    virtual io::Task<std::shared_ptr<const schema::Table>> join(std::string name) = 0;
};

struct StreamOptions {
    std::int64_t batch_rows = 1000;
    std::chrono::milliseconds status_interval{10000};
    std::chrono::milliseconds tick{250};
    /// Silence from the source this long means a dead connection (a network that drops packets
    /// without a reset); at half of it pgtide asks the walsender for a reply.
    std::chrono::milliseconds receive_timeout{30000};
    /// A batch is handed over once no message arrived for this long (or when it is full).
    std::chrono::milliseconds batch_linger{2};
    std::optional<schema::Lsn> stop_at; ///< --once: stop once everything before it is applied
    Metrics* metrics = nullptr;         ///< records the source's WAL end, if set
    /// Where streamed in-progress transactions wait for their end; set exactly when
    /// START_REPLICATION asked for streaming. Emptied when the stream starts.
    Spool* spool = nullptr;
    /// Tables copied alone while the epoch streamed (DESIGN §4 "Copy ranges"), by source name:
    /// the consistent LSN of their copy's snapshot. Their changes committed below it are in the
    /// copy already and are skipped.
    std::map<std::string, schema::Lsn> copied_at;
    /// Tables no longer published whose changes may still be on their way (they left the
    /// publications, or were renamed, after the checkpoint): skipped.
    std::set<std::string> left;
    /// Every publication_poll_interval, between transactions, the publications' table list is
    /// read: a table they gained ends the stream with PublicationChanged. Zero: never.
    std::vector<std::string> publications;
    std::chrono::milliseconds publication_poll_interval{0};
    /// A copy running beside this stream, if any; `catch_up` says which side this stream is:
    /// false, the main stream (skips the copied tables until the hand-off); true, the catch-up
    /// (applies only them, skips relations it does not hold, ends at the hand-off). The catch-up
    /// sends into the applier's own channel one value at a time, each once the applier is done
    /// with the one before (Channel::send_and_wait): its last batch is applied before the
    /// hand-off lets the main stream queue the same tables' later changes, and the main stream's
    /// batches wait behind one of its batches at most. Its batches carry no position
    /// (ChangeBatch::catch_up), and it sends no SourceIdle, Tick or Finish.
    ConcurrentCopy* concurrent = nullptr;
    bool catch_up = false;
    /// The main stream: asked first about a table it meets that it does not hold.
    TableJoiner* joiner = nullptr;
};

class Stream {
public:
    /// `catalog_conn` resolves types of columns the stream introduces; `tables` are the tables
    /// the destination holds (by source name). `durable` reads the durable checkpoint LSN.
    Stream(ReplicationConnection& replication, io::PgConnection& catalog_conn,
           SourceCatalog& catalog, std::vector<std::shared_ptr<const schema::Table>> tables,
           schema::Lsn start, const schema::Lsn* durable, const bool* stop_requested,
           StreamOptions options);

    /// Reads until the --once target, a stop request (at a transaction boundary), or an error.
    /// Sends Finish last. Suspends. Throws TransientError when the server ends the stream,
    /// io::PgError, ProtocolError, DefiniteError (a change the mapping cannot follow).
    io::Task<void> run(io::Channel<ApplyWork>& out);

    bool reached_target() const { return reached_target_; }

private:
    io::Task<void> on_message(std::string_view payload, io::Channel<ApplyWork>& out);
    io::Task<void> on_relation(pgoutput::Relation rel);
    /// on_relation, then the schema change it caused (if any) to the applier.
    io::Task<void> follow_relation(pgoutput::Relation rel, io::Channel<ApplyWork>& out);
    io::Task<void> on_stream_start(pgoutput::StreamStart start);
    io::Task<void> on_stream_abort(pgoutput::StreamAbort abort);
    /// Replays the spooled transaction as one source transaction, then deletes its file.
    io::Task<void> on_stream_commit(pgoutput::StreamCommit commit, io::Channel<ApplyWork>& out);
    void install_relation(const pgoutput::Relation& rel, const std::vector<schema::TypeRef>& types,
                          const std::vector<std::string>& type_sql,
                          const std::map<std::string, std::string>& missing,
                          const std::map<std::string, std::string>& storage);
    /// Appends the changes of an Insert/Update/Delete/Truncate to the batch; false for any
    /// other message.
    bool collect_change(const PgOutputMessage& msg);
    schema::Row decode_tuple(const schema::Table& table, const pgoutput::TupleData& tuple) const;
    schema::Row key_of(const schema::Table& table, const schema::Row& row) const;
    /// Whether to skip a change of `table`: it left the publications (nullptr), or the current
    /// transaction committed before the copy of the table was read.
    bool in_copy(const schema::Table* table) const;
    /// The table of a change; nullptr for a table in options.left (skip the change).
    std::shared_ptr<const schema::Table> table_for(std::uint32_t relation_oid) const;
    io::Task<void> flush_batch(io::Channel<ApplyWork>& out);
    /// Queues `work` for the applier; the catch-up waits until the applier is done with it.
    io::Task<void> hand_over(io::Channel<ApplyWork>& out, ApplyWork work);
    /// The main stream begins the transaction committed at version_.
    void note_begun();
    /// The catch-up stream has applied every transaction committed below `position`: hands off
    /// and ends when the main stream has begun none at or after it.
    io::Task<void> maybe_hand_off(schema::Lsn position, io::Channel<ApplyWork>& out);
    io::Task<void> send_status(bool reply);
    /// Throws PublicationChanged when the publications list a table the stream does not hold
    /// (and the joiner does not take), CopyRequested for one they left and listed again since
    /// the last look.
    io::Task<void> poll_publications();
    /// Whether the joiner took table `name`, which the stream then holds.
    io::Task<bool> try_join(std::string name);

    ReplicationConnection& replication_;
    io::PgConnection& catalog_conn_;
    SourceCatalog& catalog_;
    std::map<std::string, std::shared_ptr<const schema::Table>> by_name_;
    /// By name: the publication membership last seen (schema::Table::publication_membership).
    std::map<std::string, std::string> memberships_;
    /// By name: the column numbers last seen (schema::Table::source_columns).
    std::map<std::string, std::string> column_numbers_;
    std::map<std::uint32_t, std::shared_ptr<const schema::Table>> by_oid_;
    schema::Lsn start_;
    const schema::Lsn* durable_;
    const bool* stop_requested_;
    StreamOptions options_;
    std::unique_ptr<PgOutputDecoder> decoder_;

    bool in_transaction_ = false;
    bool skipping_ = false;
    schema::Lsn version_;
    std::vector<Change> batch_;
    std::optional<SourceCommit> batch_commit_; ///< set while the batch ends at a commit
    /// The last batch handed over ended inside a source transaction: the applier cannot commit
    /// until a batch ends at a commit, so the next commit hands the batch over at once.
    bool handed_inside_transaction_ = false;
    std::int64_t batch_transactions_ = 0;
    schema::Lsn received_;
    schema::Lsn last_idle_;
    bool done_ = false;
    bool reached_target_ = false;
    std::chrono::steady_clock::time_point last_status_;
    std::chrono::steady_clock::time_point last_poll_;
    std::chrono::steady_clock::time_point last_received_;
    bool pinged_ = false; ///< a reply was requested since the last message
    std::chrono::steady_clock::time_point pinged_at_;
    std::shared_ptr<const schema::Table> pending_schema_change_;
    /// Relations the stream described that the destination does not hold (by OID: name).
    std::map<std::uint32_t, std::string> unpublished_;
};

/// Prefix of the non-transactional logical message `pgtide run --once` emits after reading its
/// target LSN, so that the stream reaches a position past the target even when idle.
inline constexpr const char* kOnceMarkerPrefix = "pgtide.once";
/// Prefix of the heartbeat messages (stream.heartbeat_interval) that keep the slot moving while
/// the published tables are idle and other tables are busy.
inline constexpr const char* kHeartbeatPrefix = "pgtide.heartbeat";

} // namespace pgtide::replicate
