// PgOutputDecoder: the messages of PostgreSQL's pgoutput plugin (protocol versions 1-4).
#include "replicate/pgoutput.hpp"

#include <cstdio>
#include <stdexcept>
#include <utility>

namespace pgtide::replicate {

using namespace pgoutput;

namespace {

constexpr int kStreamingProtoVersion = 2;
constexpr int kTwoPhaseProtoVersion = 3;
constexpr int kParallelProtoVersion = 4;
constexpr int kMaxProtoVersion = 4;

std::string_view message_name(char type) {
    switch (type) {
    case 'B':
        return "pgoutput Begin";
    case 'C':
        return "pgoutput Commit";
    case 'O':
        return "pgoutput Origin";
    case 'R':
        return "pgoutput Relation";
    case 'Y':
        return "pgoutput Type";
    case 'I':
        return "pgoutput Insert";
    case 'U':
        return "pgoutput Update";
    case 'D':
        return "pgoutput Delete";
    case 'T':
        return "pgoutput Truncate";
    case 'M':
        return "pgoutput Message";
    case 'S':
        return "pgoutput Stream Start";
    case 'E':
        return "pgoutput Stream Stop";
    case 'c':
        return "pgoutput Stream Commit";
    case 'A':
        return "pgoutput Stream Abort";
    case 'b':
        return "pgoutput Begin Prepare";
    case 'P':
        return "pgoutput Prepare";
    case 'K':
        return "pgoutput Commit Prepared";
    case 'r':
        return "pgoutput Rollback Prepared";
    case 'p':
        return "pgoutput Stream Prepare";
    default:
        return "pgoutput unknown";
    }
}

// The protocol version that introduced a message type.
int min_proto_version(char type) {
    switch (type) {
    case 'S':
    case 'E':
    case 'c':
    case 'A':
        return kStreamingProtoVersion;
    case 'b':
    case 'P':
    case 'K':
    case 'r':
    case 'p':
        return kTwoPhaseProtoVersion;
    default:
        return 1;
    }
}

// Messages that end or begin a whole transaction; pgoutput never sends them inside a block.
bool outside_stream_only(char type) {
    switch (type) {
    case 'B':
    case 'C':
    case 'c':
    case 'A':
    case 'b':
    case 'P':
    case 'K':
    case 'r':
    case 'p':
        return true;
    default:
        return false;
    }
}

std::string describe_byte(unsigned char byte) {
    char buf[16];
    if (byte >= 0x20 && byte < 0x7f) {
        std::snprintf(buf, sizeof buf, "'%c'", static_cast<char>(byte));
    } else {
        std::snprintf(buf, sizeof buf, "0x%02x", static_cast<unsigned>(byte));
    }
    return buf;
}

// Bounds-checked big-endian reads over one message; every failure is a ProtocolError that names
// the message and the offset of the field being read. Starts after the type byte.
class Reader {
public:
    explicit Reader(std::string_view data) : data_(data) {}

    char type() const { return data_[0]; }
    std::size_t offset() const { return pos_; }
    std::size_t remaining() const { return data_.size() - pos_; }

    [[noreturn]] void fail_at(std::size_t offset, std::string_view detail) const {
        throw ProtocolError(message_name(type()), type(), offset, detail);
    }

    std::uint8_t u8(std::string_view field) { return static_cast<std::uint8_t>(take(1, field)[0]); }
    std::int16_t i16(std::string_view field) {
        return static_cast<std::int16_t>(load(take(2, field)));
    }
    std::uint32_t u32(std::string_view field) {
        return static_cast<std::uint32_t>(load(take(4, field)));
    }
    std::int32_t i32(std::string_view field) {
        return static_cast<std::int32_t>(load(take(4, field)));
    }
    std::int64_t i64(std::string_view field) {
        return static_cast<std::int64_t>(load(take(8, field)));
    }
    Lsn lsn(std::string_view field) { return Lsn{load(take(8, field))}; }

    std::string_view bytes(std::size_t n, std::string_view field) { return take(n, field); }

    // A NUL-terminated string; the NUL must be inside the message.
    std::string_view cstring(std::string_view field) {
        const std::size_t nul = data_.find('\0', pos_);
        if (nul == std::string_view::npos) {
            fail_at(pos_, "truncated: " + std::string(field) + " is not NUL-terminated");
        }
        std::string_view text = data_.substr(pos_, nul - pos_);
        pos_ = nul + 1;
        return text;
    }

    void expect_end() const {
        if (pos_ != data_.size()) {
            fail_at(pos_, std::to_string(remaining()) + " trailing bytes");
        }
    }

private:
    std::string_view take(std::size_t n, std::string_view field) {
        if (n > remaining()) {
            fail_at(pos_, "truncated: " + std::string(field) + " needs " + std::to_string(n) +
                              " bytes, " + std::to_string(remaining()) + " left");
        }
        std::string_view out = data_.substr(pos_, n);
        pos_ += n;
        return out;
    }

    static std::uint64_t load(std::string_view bytes) {
        std::uint64_t value = 0;
        for (const char c : bytes) {
            value = (value << 8) | static_cast<unsigned char>(c);
        }
        return value;
    }

    std::string_view data_;
    std::size_t pos_ = 1;
};

std::optional<std::uint32_t> read_stream_xid(Reader& in, bool in_stream) {
    if (!in_stream) {
        return std::nullopt;
    }
    return in.u32("xid");
}

std::string read_namespace(Reader& in) {
    std::string_view nspname = in.cstring("namespace");
    return nspname.empty() ? std::string("pg_catalog") : std::string(nspname);
}

// Reads a count that announces `count` items of at least `min_item_size` bytes each, and
// rejects it before anything is allocated for it.
std::size_t check_count(Reader& in, std::size_t at, std::int64_t count, std::size_t min_item_size,
                        std::string_view what) {
    if (count < 0) {
        in.fail_at(at, "negative " + std::string(what) + " " + std::to_string(count));
    }
    if (static_cast<std::uint64_t>(count) * min_item_size > in.remaining()) {
        in.fail_at(at, "truncated: " + std::string(what) + " " + std::to_string(count) +
                           " does not fit in the " + std::to_string(in.remaining()) +
                           " bytes left");
    }
    return static_cast<std::size_t>(count);
}

TupleData read_tuple(Reader& in) {
    const std::size_t at = in.offset();
    const std::size_t ncols = check_count(in, at, in.i16("tuple column count"), 1, "column count");
    TupleData tuple;
    tuple.columns.reserve(ncols);
    for (std::size_t i = 0; i < ncols; ++i) {
        const std::size_t kind_at = in.offset();
        const auto kind = in.u8("column kind");
        switch (kind) {
        case 'n':
        case 'u':
            tuple.columns.push_back({static_cast<TupleColumn::Kind>(kind), {}});
            break;
        case 't':
        case 'b': {
            const std::size_t length_at = in.offset();
            const std::int32_t length = in.i32("column length");
            if (length < 0) {
                in.fail_at(length_at, "negative length " + std::to_string(length) + " of column " +
                                          std::to_string(i + 1));
            }
            if (static_cast<std::size_t>(length) > in.remaining()) {
                in.fail_at(length_at, "truncated: column " + std::to_string(i + 1) + " needs " +
                                          std::to_string(length) + " bytes, " +
                                          std::to_string(in.remaining()) + " left");
            }
            tuple.columns.push_back({static_cast<TupleColumn::Kind>(kind),
                                     in.bytes(static_cast<std::size_t>(length), "column data")});
            break;
        }
        default:
            in.fail_at(kind_at, "unknown kind " + describe_byte(kind) + " of tuple column " +
                                    std::to_string(i + 1));
        }
    }
    return tuple;
}

// The 'N'/'K'/'O' byte that introduces a tuple.
char read_tuple_tag(Reader& in, std::string_view allowed) {
    const std::size_t at = in.offset();
    const auto tag = static_cast<char>(in.u8("tuple tag"));
    if (allowed.find(tag) == std::string_view::npos) {
        std::string expected;
        for (const char c : allowed) {
            expected += expected.empty() ? "" : " or ";
            expected += describe_byte(static_cast<unsigned char>(c));
        }
        in.fail_at(at, "expected tuple tag " + expected + ", got " +
                           describe_byte(static_cast<unsigned char>(tag)));
    }
    return tag;
}

Begin read_begin(Reader& in) {
    return Begin{
        .final_lsn = in.lsn("final_lsn"),
        .commit_time = in.i64("commit time"),
        .xid = in.u32("xid"),
    };
}

Commit read_commit(Reader& in) {
    return Commit{
        .flags = in.u8("flags"),
        .commit_lsn = in.lsn("commit_lsn"),
        .end_lsn = in.lsn("end_lsn"),
        .commit_time = in.i64("commit time"),
    };
}

Origin read_origin(Reader& in) {
    return Origin{
        .origin_lsn = in.lsn("origin commit LSN"),
        .name = std::string(in.cstring("origin name")),
    };
}

Relation read_relation(Reader& in, bool in_stream) {
    Relation rel;
    rel.xid = read_stream_xid(in, in_stream);
    rel.oid = in.u32("relation OID");
    rel.schema = read_namespace(in);
    rel.name = std::string(in.cstring("relation name"));
    const std::size_t identity_at = in.offset();
    rel.replica_identity = static_cast<char>(in.u8("replica identity"));
    if (std::string_view("dnfi").find(rel.replica_identity) == std::string_view::npos) {
        in.fail_at(identity_at,
                   "unknown replica identity " +
                       describe_byte(static_cast<unsigned char>(rel.replica_identity)));
    }
    const std::size_t count_at = in.offset();
    // Each column takes at least flags, an empty name's NUL, type OID and typmod.
    const std::size_t ncols = check_count(in, count_at, in.i16("column count"), 10, "column count");
    rel.columns.reserve(ncols);
    for (std::size_t i = 0; i < ncols; ++i) {
        RelationColumn column;
        column.key = (in.u8("column flags") & 1) != 0;
        column.name = std::string(in.cstring("column name"));
        column.type_oid = in.u32("column type OID");
        column.typmod = in.i32("column typmod");
        rel.columns.push_back(std::move(column));
    }
    return rel;
}

Type read_type(Reader& in, bool in_stream) {
    Type type;
    type.xid = read_stream_xid(in, in_stream);
    type.oid = in.u32("type OID");
    type.schema = read_namespace(in);
    type.name = std::string(in.cstring("type name"));
    return type;
}

Insert read_insert(Reader& in, bool in_stream) {
    Insert insert;
    insert.xid = read_stream_xid(in, in_stream);
    insert.relation_oid = in.u32("relation OID");
    read_tuple_tag(in, "N");
    insert.new_tuple = read_tuple(in);
    return insert;
}

Update read_update(Reader& in, bool in_stream) {
    Update update;
    update.xid = read_stream_xid(in, in_stream);
    update.relation_oid = in.u32("relation OID");
    const char tag = read_tuple_tag(in, "KON");
    if (tag != 'N') {
        update.old_kind = tag;
        update.old_tuple = read_tuple(in);
        read_tuple_tag(in, "N");
    }
    update.new_tuple = read_tuple(in);
    return update;
}

Delete read_delete(Reader& in, bool in_stream) {
    Delete del;
    del.xid = read_stream_xid(in, in_stream);
    del.relation_oid = in.u32("relation OID");
    del.old_kind = read_tuple_tag(in, "KO");
    del.old_tuple = read_tuple(in);
    return del;
}

Truncate read_truncate(Reader& in, bool in_stream) {
    Truncate truncate;
    truncate.xid = read_stream_xid(in, in_stream);
    const std::size_t count_at = in.offset();
    const std::int32_t nrels = in.i32("relation count");
    truncate.options = in.u8("options");
    const std::size_t n = check_count(in, count_at, nrels, 4, "relation count");
    truncate.relation_oids.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        truncate.relation_oids.push_back(in.u32("relation OID"));
    }
    return truncate;
}

Message read_message(Reader& in, bool in_stream) {
    Message message;
    message.xid = read_stream_xid(in, in_stream);
    message.transactional = (in.u8("flags") & 1) != 0;
    message.lsn = in.lsn("message LSN");
    message.prefix = std::string(in.cstring("prefix"));
    const std::size_t length_at = in.offset();
    const std::int32_t length = in.i32("content length");
    const std::size_t n = check_count(in, length_at, length, 1, "content length");
    message.content = in.bytes(n, "content");
    return message;
}

StreamStart read_stream_start(Reader& in) {
    StreamStart start;
    start.xid = in.u32("xid");
    const std::size_t at = in.offset();
    const auto first = in.u8("first_segment");
    if (first > 1) {
        in.fail_at(at, "first_segment must be 0 or 1, got " + std::to_string(first));
    }
    start.first_segment = first == 1;
    return start;
}

StreamStop read_stream_stop(Reader&) {
    return StreamStop{};
}

StreamCommit read_stream_commit(Reader& in) {
    return StreamCommit{
        .xid = in.u32("xid"),
        .flags = in.u8("flags"),
        .commit_lsn = in.lsn("commit_lsn"),
        .end_lsn = in.lsn("end_lsn"),
        .commit_time = in.i64("commit time"),
    };
}

StreamAbort read_stream_abort(Reader& in, bool with_abort_info) {
    StreamAbort abort;
    abort.xid = in.u32("xid");
    abort.subxid = in.u32("subxid");
    if (with_abort_info) {
        abort.abort_lsn = in.lsn("abort_lsn");
        abort.abort_time = in.i64("abort time");
    }
    return abort;
}

BeginPrepare read_begin_prepare(Reader& in) {
    return BeginPrepare{
        .prepare_lsn = in.lsn("prepare_lsn"),
        .end_lsn = in.lsn("end_lsn"),
        .prepare_time = in.i64("prepare time"),
        .xid = in.u32("xid"),
        .gid = std::string(in.cstring("gid")),
    };
}

Prepare read_prepare(Reader& in) {
    return Prepare{
        .flags = in.u8("flags"),
        .prepare_lsn = in.lsn("prepare_lsn"),
        .end_lsn = in.lsn("end_lsn"),
        .prepare_time = in.i64("prepare time"),
        .xid = in.u32("xid"),
        .gid = std::string(in.cstring("gid")),
    };
}

CommitPrepared read_commit_prepared(Reader& in) {
    return CommitPrepared{
        .flags = in.u8("flags"),
        .commit_lsn = in.lsn("commit_lsn"),
        .end_lsn = in.lsn("end_lsn"),
        .commit_time = in.i64("commit time"),
        .xid = in.u32("xid"),
        .gid = std::string(in.cstring("gid")),
    };
}

RollbackPrepared read_rollback_prepared(Reader& in) {
    return RollbackPrepared{
        .flags = in.u8("flags"),
        .prepare_end_lsn = in.lsn("prepare end_lsn"),
        .rollback_end_lsn = in.lsn("rollback end_lsn"),
        .prepare_time = in.i64("prepare time"),
        .rollback_time = in.i64("rollback time"),
        .xid = in.u32("xid"),
        .gid = std::string(in.cstring("gid")),
    };
}

StreamPrepare read_stream_prepare(Reader& in) {
    return StreamPrepare{
        .flags = in.u8("flags"),
        .prepare_lsn = in.lsn("prepare_lsn"),
        .end_lsn = in.lsn("end_lsn"),
        .prepare_time = in.i64("prepare time"),
        .xid = in.u32("xid"),
        .gid = std::string(in.cstring("gid")),
    };
}

} // namespace

PgOutputDecoder::PgOutputDecoder(int proto_version, bool streaming_parallel)
    : proto_version_(proto_version), streaming_parallel_(streaming_parallel) {
    if (proto_version < 1 || proto_version > kMaxProtoVersion) {
        throw std::invalid_argument("pgoutput proto_version " + std::to_string(proto_version) +
                                    " is not one of 1-4");
    }
    if (streaming_parallel && proto_version < kParallelProtoVersion) {
        throw std::invalid_argument("pgoutput streaming 'parallel' needs proto_version 4, got " +
                                    std::to_string(proto_version));
    }
}

void PgOutputDecoder::enter_stream_block(std::uint32_t xid) {
    if (proto_version_ < kStreamingProtoVersion) {
        throw std::logic_error("pgoutput proto_version " + std::to_string(proto_version_) +
                               " has no stream blocks");
    }
    if (stream_xid_) {
        throw std::logic_error("the stream block of xid " + std::to_string(*stream_xid_) +
                               " is already open");
    }
    stream_xid_ = xid;
}

PgOutputMessage PgOutputDecoder::decode(std::string_view payload) {
    if (payload.empty()) {
        throw ProtocolError("pgoutput", '\0', 0, "empty message");
    }
    Reader in(payload);
    const char type = in.type();
    if (min_proto_version(type) > proto_version_) {
        in.fail_at(0, "not part of protocol version " + std::to_string(proto_version_) +
                          " (needs " + std::to_string(min_proto_version(type)) + ")");
    }
    const bool in_stream = in_stream_block();
    if (in_stream && outside_stream_only(type)) {
        in.fail_at(0, "inside the stream block of xid " + std::to_string(*stream_xid_));
    }

    PgOutputMessage message;
    switch (type) {
    case 'B':
        message = read_begin(in);
        break;
    case 'C':
        message = read_commit(in);
        break;
    case 'O':
        message = read_origin(in);
        break;
    case 'R':
        message = read_relation(in, in_stream);
        break;
    case 'Y':
        message = read_type(in, in_stream);
        break;
    case 'I':
        message = read_insert(in, in_stream);
        break;
    case 'U':
        message = read_update(in, in_stream);
        break;
    case 'D':
        message = read_delete(in, in_stream);
        break;
    case 'T':
        message = read_truncate(in, in_stream);
        break;
    case 'M':
        message = read_message(in, in_stream);
        break;
    case 'S':
        if (in_stream) {
            in.fail_at(0, "nested Stream Start: the block of xid " + std::to_string(*stream_xid_) +
                              " is still open");
        }
        message = read_stream_start(in);
        break;
    case 'E':
        if (!in_stream) {
            in.fail_at(0, "Stream Stop without Stream Start");
        }
        message = read_stream_stop(in);
        break;
    case 'c':
        message = read_stream_commit(in);
        break;
    case 'A':
        message = read_stream_abort(in, streaming_parallel_);
        break;
    case 'b':
        message = read_begin_prepare(in);
        break;
    case 'P':
        message = read_prepare(in);
        break;
    case 'K':
        message = read_commit_prepared(in);
        break;
    case 'r':
        message = read_rollback_prepared(in);
        break;
    case 'p':
        message = read_stream_prepare(in);
        break;
    default:
        in.fail_at(0, "unknown message type");
    }
    in.expect_end();

    if (const auto* start = std::get_if<StreamStart>(&message)) {
        stream_xid_ = start->xid;
    } else if (std::holds_alternative<StreamStop>(message)) {
        stream_xid_.reset();
    }
    return message;
}

} // namespace pgtide::replicate
