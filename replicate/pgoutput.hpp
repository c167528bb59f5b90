// PgOutputDecoder: the messages of PostgreSQL's pgoutput plugin (protocol versions 1-4).
//
// Layouts follow src/backend/replication/logical/proto.c. Integers are big-endian, "String" is
// NUL-terminated, times are µs since 2000-01-01 UTC (pg_clock_to_unix_us converts).
//
// Lifetime: every std::string_view in a decoded message (tuple column data, Message content)
// points into the payload passed to decode(); keep that buffer alive while the message is used.
// Everything else is owned.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "replicate/walsender_messages.hpp"
#include "schema/lsn.hpp"

namespace pgtide::replicate {

namespace pgoutput {

using schema::Lsn;

/// One column of a TupleData. `data` is empty for Null and Unchanged.
struct TupleColumn {
    enum class Kind : char {
        Null = 'n',      ///< SQL NULL
        Unchanged = 'u', ///< unchanged TOASTed value: keep what the destination has
        Text = 't',      ///< the type's text output
        Binary = 'b',    ///< the type's binary send format (binary 'true')
    };
    Kind kind;
    std::string_view data;
};

/// The columns of a row, as many as the latest Relation message of its relation lists.
struct TupleData {
    std::vector<TupleColumn> columns;
};

/// 'B': a transaction starts; its changes follow, then Commit.
struct Begin {
    Lsn final_lsn; ///< LSN of the commit record (= Commit::commit_lsn)
    std::int64_t commit_time;
    std::uint32_t xid;
};

/// 'C': the transaction opened by the last Begin committed.
struct Commit {
    std::uint8_t flags; ///< 0 in every release so far
    Lsn commit_lsn;     ///< start of the commit record
    Lsn end_lsn;        ///< end of the commit record: the position to confirm once durable
    std::int64_t commit_time;
};

/// 'O': the transaction came from another node through a replication origin.
struct Origin {
    Lsn origin_lsn; ///< commit LSN on the origin node
    std::string name;
};

/// One published column of a Relation.
struct RelationColumn {
    bool key; ///< part of the replica identity (every column under REPLICA IDENTITY FULL)
    std::string name;
    std::uint32_t type_oid;
    std::int32_t typmod; ///< -1 when none
};

/// 'R': the shape of a relation; authoritative for its OID until the next Relation.
struct Relation {
    std::optional<std::uint32_t> xid; ///< set inside a stream block
    std::uint32_t oid;
    std::string schema; ///< "" on the wire is reported as "pg_catalog"
    std::string name;
    char replica_identity; ///< 'd' default, 'n' nothing, 'f' full, 'i' index
    std::vector<RelationColumn> columns;
};

/// 'Y': a non-built-in type (OID >= 10000) used by a following Relation.
struct Type {
    std::optional<std::uint32_t> xid; ///< set inside a stream block
    std::uint32_t oid;
    std::string schema; ///< "" on the wire is reported as "pg_catalog"
    std::string name;
};

/// 'I'
struct Insert {
    std::optional<std::uint32_t> xid; ///< set inside a stream block
    std::uint32_t relation_oid;
    TupleData new_tuple;
};

/// 'U'. The old tuple is present ('K' key columns only, 'O' whole row) when the replica
/// identity is FULL, or a key column changed or is stored out of line.
struct Update {
    std::optional<std::uint32_t> xid; ///< set inside a stream block
    std::uint32_t relation_oid;
    std::optional<char> old_kind; ///< 'K' or 'O'; nullopt exactly when old_tuple is
    std::optional<TupleData> old_tuple;
    TupleData new_tuple;
};

/// 'D'
struct Delete {
    std::optional<std::uint32_t> xid; ///< set inside a stream block
    std::uint32_t relation_oid;
    char old_kind; ///< 'K' (key columns only, others Null) or 'O' (whole row)
    TupleData old_tuple;
};

/// 'T': one TRUNCATE statement over one or more relations.
struct Truncate {
    static constexpr std::uint8_t kCascade = 1;
    static constexpr std::uint8_t kRestartIdentity = 2;

    std::optional<std::uint32_t> xid; ///< set inside a stream block
    std::uint8_t options;
    std::vector<std::uint32_t> relation_oids;

    bool cascade() const { return (options & kCascade) != 0; }
    bool restart_identity() const { return (options & kRestartIdentity) != 0; }
};

/// 'M': pg_logical_emit_message (with messages 'true').
struct Message {
    std::optional<std::uint32_t> xid; ///< set inside a stream block
    bool transactional;
    Lsn lsn; ///< of the message record
    std::string prefix;
    std::string_view content; ///< arbitrary bytes; points into the decoded payload
};

/// 'S': the following messages, up to StreamStop, belong to in-progress transaction `xid`.
struct StreamStart {
    std::uint32_t xid; ///< top-level transaction
    bool first_segment;
};

/// 'E': the stream block opened by the last StreamStart ends.
struct StreamStop {};

/// 'c': the streamed transaction committed.
struct StreamCommit {
    std::uint32_t xid;
    std::uint8_t flags; ///< 0 in every release so far
    Lsn commit_lsn;
    Lsn end_lsn;
    std::int64_t commit_time;
};

/// 'A': discard the streamed changes of `subxid` (the whole transaction when subxid == xid).
struct StreamAbort {
    std::uint32_t xid;
    std::uint32_t subxid;
    std::optional<Lsn> abort_lsn;           ///< only with streaming 'parallel' (proto 4)
    std::optional<std::int64_t> abort_time; ///< only with streaming 'parallel' (proto 4)
};

/// 'b': a transaction to be prepared starts (two_phase).
struct BeginPrepare {
    Lsn prepare_lsn;
    Lsn end_lsn;
    std::int64_t prepare_time;
    std::uint32_t xid;
    std::string gid;
};

/// 'P': the transaction opened by BeginPrepare was prepared.
struct Prepare {
    std::uint8_t flags;
    Lsn prepare_lsn;
    Lsn end_lsn;
    std::int64_t prepare_time;
    std::uint32_t xid;
    std::string gid;
};

/// 'K': COMMIT PREPARED.
struct CommitPrepared {
    std::uint8_t flags;
    Lsn commit_lsn;
    Lsn end_lsn;
    std::int64_t commit_time;
    std::uint32_t xid;
    std::string gid;
};

/// 'r': ROLLBACK PREPARED.
struct RollbackPrepared {
    std::uint8_t flags;
    Lsn prepare_end_lsn;
    Lsn rollback_end_lsn;
    std::int64_t prepare_time;
    std::int64_t rollback_time;
    std::uint32_t xid;
    std::string gid;
};

/// 'p': a streamed transaction was prepared. Same fields as Prepare.
struct StreamPrepare {
    std::uint8_t flags;
    Lsn prepare_lsn;
    Lsn end_lsn;
    std::int64_t prepare_time;
    std::uint32_t xid;
    std::string gid;
};

} // namespace pgoutput

using PgOutputMessage =
    std::variant<pgoutput::Begin, pgoutput::Commit, pgoutput::Origin, pgoutput::Relation,
                 pgoutput::Type, pgoutput::Insert, pgoutput::Update, pgoutput::Delete,
                 pgoutput::Truncate, pgoutput::Message, pgoutput::StreamStart, pgoutput::StreamStop,
                 pgoutput::StreamCommit, pgoutput::StreamAbort, pgoutput::BeginPrepare,
                 pgoutput::Prepare, pgoutput::CommitPrepared, pgoutput::RollbackPrepared,
                 pgoutput::StreamPrepare>;

/// Decodes the pgoutput messages of one replication session, in order. Stateful: it tracks
/// whether it is inside a Stream Start...Stop block, which decides whether R/Y/I/U/D/T/M carry
/// an xid. Use one decoder per START_REPLICATION; after a reconnect, make a new one.
class PgOutputDecoder {
public:
    /// `proto_version` is the one sent in START_REPLICATION (1-4); `streaming_parallel` is true
    /// when streaming 'parallel' was requested (needs 4), which adds abort_lsn/abort_time to
    /// Stream Abort. Throws std::invalid_argument for other combinations.
    explicit PgOutputDecoder(int proto_version, bool streaming_parallel = false);

    /// Decodes one whole message (an XLogData payload). Views in the result point into
    /// `payload`. Throws ProtocolError, naming the message type and byte offset, on a
    /// truncated message, trailing bytes, an unknown message type or tuple kind, a message
    /// the negotiated protocol version does not have, a nested Stream Start, a Stream Stop
    /// without Start, or a transaction-ending message inside a stream block. A message that
    /// throws leaves the decoder's state unchanged.
    PgOutputMessage decode(std::string_view payload);

    /// Decodes what follows as the inside of a stream block of top-level transaction `xid`, as
    /// if its Stream Start had just been decoded: how the messages of a spooled streamed
    /// transaction are read back. Throws std::logic_error inside a block.
    void enter_stream_block(std::uint32_t xid);

    /// True between a Stream Start and its Stream Stop.
    bool in_stream_block() const { return stream_xid_.has_value(); }
    /// The top-level xid of the open stream block, if any.
    std::optional<std::uint32_t> stream_xid() const { return stream_xid_; }

    int proto_version() const { return proto_version_; }

private:
    int proto_version_;
    bool streaming_parallel_;
    std::optional<std::uint32_t> stream_xid_;
};

} // namespace pgtide::replicate
