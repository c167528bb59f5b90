// PgOutputDecoder against pgoutput messages captured from PostgreSQL 15 and hand-built ones.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "replicate/pgoutput.hpp"
#include "tests/support/hex_fixture.hpp"

namespace pgtide::replicate {
namespace {

using namespace pgoutput;
using schema::Lsn;

// Builds messages the way proto.c writes them.
class Writer {
public:
    Writer& byte(int b) {
        bytes_.push_back(static_cast<char>(b));
        return *this;
    }
    Writer& i16(std::int16_t v) { return be(static_cast<std::uint16_t>(v), 2); }
    Writer& i32(std::int64_t v) { return be(static_cast<std::uint32_t>(v), 4); }
    Writer& i64(std::uint64_t v) { return be(v, 8); }
    Writer& str(std::string_view s) {
        bytes_.append(s);
        bytes_.push_back('\0');
        return *this;
    }
    Writer& raw(std::string_view s) {
        bytes_.append(s);
        return *this;
    }
    Writer& text_column(std::string_view s) { return byte('t').i32(std::int64_t(s.size())).raw(s); }
    const std::string& bytes() const { return bytes_; }

private:
    Writer& be(std::uint64_t v, int n) {
        for (int shift = (n - 1) * 8; shift >= 0; shift -= 8) {
            bytes_.push_back(static_cast<char>((v >> shift) & 0xff));
        }
        return *this;
    }
    std::string bytes_;
};

using pgtide::testing::load_pgoutput_fixture;

// "t:1|n|u": each column's kind, and its data for text columns (hex for binary).
std::string render(const TupleData& tuple) {
    std::string out;
    for (const auto& column : tuple.columns) {
        out += out.empty() ? "" : "|";
        out += static_cast<char>(column.kind);
        if (column.kind == TupleColumn::Kind::Text) {
            out += ":";
            out += column.data;
        } else if (column.kind == TupleColumn::Kind::Binary) {
            out += ":";
            for (const char c : column.data) {
                static constexpr char kHex[] = "0123456789abcdef";
                out += kHex[(static_cast<unsigned char>(c) >> 4) & 0xf];
                out += kHex[static_cast<unsigned char>(c) & 0xf];
            }
        } else {
            EXPECT_TRUE(column.data.empty());
        }
    }
    return out;
}

// "id:23:-1:key,v:25:-1"
std::string render(const std::vector<RelationColumn>& columns) {
    std::string out;
    for (const auto& c : columns) {
        out += out.empty() ? "" : ",";
        out += c.name + ":" + std::to_string(c.type_oid) + ":" + std::to_string(c.typmod);
        out += c.key ? ":key" : "";
    }
    return out;
}

template <typename T> const T& as(const PgOutputMessage& message) {
    EXPECT_TRUE(std::holds_alternative<T>(message)) << "variant index " << message.index();
    static const T empty{};
    const T* value = std::get_if<T>(&message);
    return value != nullptr ? *value : empty;
}

std::vector<PgOutputMessage> decode_all(PgOutputDecoder& decoder,
                                        const std::vector<std::string>& messages) {
    std::vector<PgOutputMessage> out;
    for (const auto& bytes : messages) {
        out.push_back(decoder.decode(bytes));
    }
    return out;
}

void expect_begin(const PgOutputMessage& m, std::uint64_t final_lsn, std::int64_t time,
                  std::uint32_t xid) {
    const auto& begin = as<Begin>(m);
    EXPECT_EQ(begin.final_lsn, Lsn{final_lsn});
    EXPECT_EQ(begin.commit_time, time);
    EXPECT_EQ(begin.xid, xid);
}

void expect_commit(const PgOutputMessage& m, std::uint64_t commit_lsn, std::uint64_t end_lsn,
                   std::int64_t time) {
    const auto& commit = as<Commit>(m);
    EXPECT_EQ(commit.flags, 0);
    EXPECT_EQ(commit.commit_lsn, Lsn{commit_lsn});
    EXPECT_EQ(commit.end_lsn, Lsn{end_lsn});
    EXPECT_EQ(commit.commit_time, time);
}

constexpr std::uint32_t kT1 = 16389;   // t1 (id int PRIMARY KEY, v text, big text)
constexpr std::uint32_t kT2 = 16396;   // t2 (id int, note text), REPLICA IDENTITY FULL
constexpr std::uint32_t kOdd = 16401;  // "Odd Name" (k bigint PRIMARY KEY, m mood, n numeric)
constexpr std::uint32_t kMood = 16385; // ENUM mood
const char* const kT1Columns = "id:23:-1:key,v:25:-1,big:25:-1";
const char* const kT2Columns = "id:23:-1:key,note:25:-1:key";

void expect_relation(const PgOutputMessage& m, std::optional<std::uint32_t> xid,
                     std::uint32_t oid) {
    const auto& rel = as<Relation>(m);
    EXPECT_EQ(rel.xid, xid);
    EXPECT_EQ(rel.oid, oid);
    EXPECT_EQ(rel.schema, "public");
    if (oid == kT1) {
        EXPECT_EQ(rel.name, "t1");
        EXPECT_EQ(rel.replica_identity, 'd');
        EXPECT_EQ(render(rel.columns), kT1Columns);
    } else {
        EXPECT_EQ(oid, kT2);
        EXPECT_EQ(rel.name, "t2");
        EXPECT_EQ(rel.replica_identity, 'f');
        EXPECT_EQ(render(rel.columns), kT2Columns);
    }
}

void expect_insert(const PgOutputMessage& m, std::optional<std::uint32_t> xid, std::uint32_t oid,
                   const std::string& tuple) {
    const auto& insert = as<Insert>(m);
    EXPECT_EQ(insert.xid, xid);
    EXPECT_EQ(insert.relation_oid, oid);
    EXPECT_EQ(render(insert.new_tuple), tuple);
}

void expect_stream_start(const PgOutputMessage& m, std::uint32_t xid, bool first) {
    const auto& start = as<StreamStart>(m);
    EXPECT_EQ(start.xid, xid);
    EXPECT_EQ(start.first_segment, first);
}

// --- Captured: proto_version 1 ----------------------------------------------------------------

TEST(PgOutputCaptured, Proto1EveryChangeKind) {
    const auto bytes = load_pgoutput_fixture("proto1_changes.hex");
    ASSERT_EQ(bytes.size(), 36u);
    PgOutputDecoder decoder(1);
    const auto m = decode_all(decoder, bytes);
    EXPECT_FALSE(decoder.in_stream_block());

    // INSERT INTO t1 VALUES (1, 'a', NULL), (2, NULL, repeat('x', 3000))
    expect_begin(m[0], 0x15335B0, 0x000304804fe04caf, 731);
    expect_relation(m[1], std::nullopt, kT1);
    expect_insert(m[2], std::nullopt, kT1, "t:1|t:a|n");
    expect_insert(m[3], std::nullopt, kT1, "t:2|n|t:" + std::string(3000, 'x'));
    expect_commit(m[4], 0x15335B0, 0x15335E0, 0x000304804fe04caf);

    // UPDATE t1 SET id = 10 WHERE id = 1: the key changed, so a 'K' tuple with only the key.
    expect_begin(m[5], 0x1533678, 0x000304804fe0543a, 732);
    {
        const auto& update = as<Update>(m[6]);
        EXPECT_EQ(update.xid, std::nullopt);
        EXPECT_EQ(update.relation_oid, kT1);
        EXPECT_EQ(update.old_kind, 'K');
        ASSERT_TRUE(update.old_tuple.has_value());
        EXPECT_EQ(render(*update.old_tuple), "t:1|n|n");
        EXPECT_EQ(render(update.new_tuple), "t:10|t:a|n");
    }
    expect_commit(m[7], 0x1533678, 0x15336A8, 0x000304804fe0543a);

    // UPDATE t1 SET v = 'b' WHERE id = 2: no old tuple, the TOASTed column is 'u'.
    expect_begin(m[8], 0x1533740, 0x000304804fe05677, 733);
    {
        const auto& update = as<Update>(m[9]);
        EXPECT_EQ(update.relation_oid, kT1);
        EXPECT_EQ(update.old_kind, std::nullopt);
        EXPECT_FALSE(update.old_tuple.has_value());
        EXPECT_EQ(render(update.new_tuple), "t:2|t:b|u");
    }
    expect_commit(m[10], 0x1533740, 0x1533770, 0x000304804fe05677);

    // DELETE FROM t1 WHERE id = 10
    expect_begin(m[11], 0x15337B0, 0x000304804fe057f5, 734);
    {
        const auto& del = as<Delete>(m[12]);
        EXPECT_EQ(del.xid, std::nullopt);
        EXPECT_EQ(del.relation_oid, kT1);
        EXPECT_EQ(del.old_kind, 'K');
        EXPECT_EQ(render(del.old_tuple), "t:10|n|n");
    }
    expect_commit(m[13], 0x15337B0, 0x15337E0, 0x000304804fe057f5);

    // t2 is REPLICA IDENTITY FULL: insert, then 'O' tuples for update and delete.
    expect_begin(m[14], 0x1533820, 0x000304804fe059a2, 735);
    expect_relation(m[15], std::nullopt, kT2);
    expect_insert(m[16], std::nullopt, kT2, "t:1|t:x");
    expect_commit(m[17], 0x1533820, 0x1533850, 0x000304804fe059a2);
    expect_begin(m[18], 0x15338A8, 0x000304804fe05b16, 736);
    {
        const auto& update = as<Update>(m[19]);
        EXPECT_EQ(update.relation_oid, kT2);
        EXPECT_EQ(update.old_kind, 'O');
        ASSERT_TRUE(update.old_tuple.has_value());
        EXPECT_EQ(render(*update.old_tuple), "t:1|t:x");
        EXPECT_EQ(render(update.new_tuple), "t:1|t:y");
    }
    expect_commit(m[20], 0x15338A8, 0x15338D8, 0x000304804fe05b16);
    expect_begin(m[21], 0x1533920, 0x000304804fe05c6e, 737);
    {
        const auto& del = as<Delete>(m[22]);
        EXPECT_EQ(del.relation_oid, kT2);
        EXPECT_EQ(del.old_kind, 'O');
        EXPECT_EQ(render(del.old_tuple), "t:1|t:y");
    }
    expect_commit(m[23], 0x1533920, 0x1533950, 0x000304804fe05c6e);

    // TRUNCATE t1, t2 RESTART IDENTITY CASCADE
    expect_begin(m[24], 0x1534D10, 0x000304804fe0685b, 738);
    expect_relation(m[25], std::nullopt, kT1);
    expect_relation(m[26], std::nullopt, kT2);
    {
        const auto& truncate = as<Truncate>(m[27]);
        EXPECT_EQ(truncate.xid, std::nullopt);
        EXPECT_EQ(truncate.options, 3);
        EXPECT_TRUE(truncate.cascade());
        EXPECT_TRUE(truncate.restart_identity());
        EXPECT_EQ(truncate.relation_oids, (std::vector<std::uint32_t>{kT1, kT2}));
    }
    expect_commit(m[28], 0x1534D10, 0x1534F50, 0x000304804fe0685b);

    // A user-defined type, a quoted name, extreme and typmod'ed values, a transactional message.
    expect_begin(m[29], 0x1535080, 0x000304804fe07515, 739);
    {
        const auto& type = as<Type>(m[30]);
        EXPECT_EQ(type.xid, std::nullopt);
        EXPECT_EQ(type.oid, kMood);
        EXPECT_EQ(type.schema, "public");
        EXPECT_EQ(type.name, "mood");
    }
    {
        const auto& rel = as<Relation>(m[31]);
        EXPECT_EQ(rel.oid, kOdd);
        EXPECT_EQ(rel.schema, "public");
        EXPECT_EQ(rel.name, "Odd Name");
        EXPECT_EQ(rel.replica_identity, 'd');
        EXPECT_EQ(render(rel.columns), "k:20:-1:key,m:16385:-1,n:1700:655366");
    }
    expect_insert(m[32], std::nullopt, kOdd, "t:-9223372036854775808|t:happy|t:12.50");
    {
        const auto& message = as<Message>(m[33]);
        EXPECT_EQ(message.xid, std::nullopt);
        EXPECT_TRUE(message.transactional);
        EXPECT_EQ(message.lsn, Lsn{0x1535080});
        EXPECT_EQ(message.prefix, "pfx");
        EXPECT_EQ(message.content, "in tx");
        EXPECT_EQ(message.content.data(), bytes[33].data() + bytes[33].size() - 5);
    }
    expect_commit(m[34], 0x1535080, 0x15350B0, 0x000304804fe07515);

    // pg_logical_emit_message(false, 'pgtide', '\x00ff01'): outside any transaction.
    const auto& message = as<Message>(m[35]);
    EXPECT_FALSE(message.transactional);
    EXPECT_EQ(message.lsn, Lsn{0x15350F0});
    EXPECT_EQ(message.prefix, "pgtide");
    EXPECT_EQ(message.content, std::string_view("\x00\xff\x01", 3));
}

// --- Captured: proto_version 2, streaming ------------------------------------------------------

// Changes inside a stream block carry an xid; outside they do not.
void expect_xid_follows_block(const PgOutputMessage& m, bool in_block) {
    std::visit(
        [&](const auto& message) {
            if constexpr (requires { message.xid.has_value(); }) {
                EXPECT_EQ(message.xid.has_value(), in_block);
            }
        },
        m);
}

// The streamed transactions common to the proto 2 and proto 3 captures (messages 0-51).
void expect_streamed_transactions(const std::vector<PgOutputMessage>& m) {
    // 2001 inserts in one committed transaction, streamed in five chunks.
    expect_stream_start(m[0], 740, true);
    expect_relation(m[1], 740, kT1);
    expect_insert(m[2], 740, kT1, "t:100|t:v|n");
    EXPECT_TRUE(std::holds_alternative<StreamStop>(m[3]));
    for (const int i : {4, 7, 10, 13}) {
        expect_stream_start(m[i], 740, false);
        EXPECT_EQ(as<Insert>(m[i + 1]).xid, 740u);
        EXPECT_TRUE(std::holds_alternative<StreamStop>(m[i + 2]));
    }
    expect_insert(m[5], 740, kT1, "t:590|t:v|n");
    {
        const auto& commit = as<StreamCommit>(m[16]);
        EXPECT_EQ(commit.xid, 740u);
        EXPECT_EQ(commit.flags, 0);
        EXPECT_EQ(commit.commit_lsn, Lsn{0x1574C50});
        EXPECT_EQ(commit.end_lsn, Lsn{0x1574C80});
        EXPECT_EQ(commit.commit_time, 0x000304805043d8c1);
    }

    // The same, rolled back: the whole transaction is aborted (subxid == xid).
    expect_stream_start(m[17], 741, true);
    expect_relation(m[18], 741, kT1);
    expect_insert(m[19], 741, kT1, "t:3000|t:w|n");
    {
        const auto& abort = as<StreamAbort>(m[30]);
        EXPECT_EQ(abort.xid, 741u);
        EXPECT_EQ(abort.subxid, 741u);
        EXPECT_EQ(abort.abort_lsn, std::nullopt);
        EXPECT_EQ(abort.abort_time, std::nullopt);
    }

    // ROLLBACK TO SAVEPOINT of a big subtransaction: only subxid 743 is aborted.
    expect_stream_start(m[31], 742, true);
    expect_relation(m[32], 742, kT2);
    expect_insert(m[33], 742, kT2, "t:7|t:kept");
    expect_relation(m[34], 743, kT1);
    expect_insert(m[35], 743, kT1, "t:6000|t:s|n");
    {
        const auto& abort = as<StreamAbort>(m[46]);
        EXPECT_EQ(abort.xid, 742u);
        EXPECT_EQ(abort.subxid, 743u);
    }
    expect_stream_start(m[47], 742, false);
    expect_relation(m[48], 744, kT2);
    expect_insert(m[49], 744, kT2, "t:8|t:kept too");
    EXPECT_TRUE(std::holds_alternative<StreamStop>(m[50]));
    {
        const auto& commit = as<StreamCommit>(m[51]);
        EXPECT_EQ(commit.xid, 742u);
        EXPECT_EQ(commit.commit_lsn, Lsn{0x15F4510});
        EXPECT_EQ(commit.end_lsn, Lsn{0x15F4548});
        EXPECT_EQ(commit.commit_time, 0x00030480504401cb);
    }
}

TEST(PgOutputCaptured, Proto2StreamingCommitAbortAndSubtransactionAbort) {
    const auto bytes = load_pgoutput_fixture("proto2_streaming.hex");
    ASSERT_EQ(bytes.size(), 72u);
    PgOutputDecoder decoder(2);
    std::vector<PgOutputMessage> m;
    for (const auto& b : bytes) {
        const bool was_in_block = decoder.in_stream_block();
        m.push_back(decoder.decode(b));
        expect_xid_follows_block(m.back(), was_in_block);
        if (std::holds_alternative<StreamStart>(m.back())) {
            EXPECT_EQ(decoder.stream_xid(), std::get<StreamStart>(m.back()).xid);
        }
    }
    EXPECT_FALSE(decoder.in_stream_block());
    expect_streamed_transactions(m);

    // Without two_phase, a prepared transaction arrives as B...C at COMMIT PREPARED, and a
    // rolled-back prepared transaction not at all.
    expect_begin(m[52], 0x15F4690, 0x0003048050440915, 745);
    expect_insert(m[53], std::nullopt, kT2, "t:20|t:prepared");
    expect_commit(m[54], 0x15F4690, 0x15F46D0, 0x0003048050440915);
    expect_stream_start(m[55], 747, true);
    expect_relation(m[56], 747, kT1);
    expect_insert(m[57], 747, kT1, "t:9000|t:p|n");
    const auto& commit = as<StreamCommit>(m[71]);
    EXPECT_EQ(commit.xid, 747u);
    EXPECT_EQ(commit.commit_lsn, Lsn{0x16343B0});
    EXPECT_EQ(commit.end_lsn, Lsn{0x16343F0});
    EXPECT_EQ(commit.commit_time, 0x0003048050442265);
}

// --- Captured: proto_version 3, two_phase ------------------------------------------------------

TEST(PgOutputCaptured, Proto3TwoPhase) {
    const auto bytes = load_pgoutput_fixture("proto3_two_phase.hex");
    ASSERT_EQ(bytes.size(), 78u);
    PgOutputDecoder decoder(3);
    const auto m = decode_all(decoder, bytes);
    expect_streamed_transactions(m);

    // PREPARE TRANSACTION 'gid-commit'; COMMIT PREPARED 'gid-commit'
    {
        const auto& begin = as<BeginPrepare>(m[52]);
        EXPECT_EQ(begin.prepare_lsn, Lsn{0x15F4590});
        EXPECT_EQ(begin.end_lsn, Lsn{0x15F4690});
        EXPECT_EQ(begin.prepare_time, 0x0003048050440700);
        EXPECT_EQ(begin.xid, 745u);
        EXPECT_EQ(begin.gid, "gid-commit");
    }
    expect_insert(m[53], std::nullopt, kT2, "t:20|t:prepared");
    {
        const auto& prepare = as<Prepare>(m[54]);
        EXPECT_EQ(prepare.flags, 0);
        EXPECT_EQ(prepare.prepare_lsn, Lsn{0x15F4590});
        EXPECT_EQ(prepare.end_lsn, Lsn{0x15F4690});
        EXPECT_EQ(prepare.prepare_time, 0x0003048050440700);
        EXPECT_EQ(prepare.xid, 745u);
        EXPECT_EQ(prepare.gid, "gid-commit");
    }
    {
        const auto& commit = as<CommitPrepared>(m[55]);
        EXPECT_EQ(commit.flags, 0);
        EXPECT_EQ(commit.commit_lsn, Lsn{0x15F4690});
        EXPECT_EQ(commit.end_lsn, Lsn{0x15F46D0});
        EXPECT_EQ(commit.commit_time, 0x0003048050440915);
        EXPECT_EQ(commit.xid, 745u);
        EXPECT_EQ(commit.gid, "gid-commit");
    }

    // PREPARE TRANSACTION 'gid-rollback'; ROLLBACK PREPARED 'gid-rollback'
    EXPECT_EQ(as<BeginPrepare>(m[56]).gid, "gid-rollback");
    expect_insert(m[57], std::nullopt, kT2, "t:21|t:rolled back");
    EXPECT_EQ(as<Prepare>(m[58]).xid, 746u);
    {
        const auto& rollback = as<RollbackPrepared>(m[59]);
        EXPECT_EQ(rollback.flags, 0);
        EXPECT_EQ(rollback.prepare_end_lsn, Lsn{0x15F4818});
        EXPECT_EQ(rollback.rollback_end_lsn, Lsn{0x15F4858});
        EXPECT_EQ(rollback.prepare_time, 0x0003048050440bc2);
        EXPECT_EQ(rollback.rollback_time, 0x0003048050440d65);
        EXPECT_EQ(rollback.xid, 746u);
        EXPECT_EQ(rollback.gid, "gid-rollback");
    }

    // A big prepared transaction: streamed, then Stream Prepare, then Commit Prepared.
    expect_stream_start(m[60], 747, true);
    {
        const auto& prepare = as<StreamPrepare>(m[76]);
        EXPECT_EQ(prepare.flags, 0);
        EXPECT_EQ(prepare.prepare_lsn, Lsn{0x16342B0});
        EXPECT_EQ(prepare.end_lsn, Lsn{0x16343B0});
        EXPECT_EQ(prepare.prepare_time, 0x0003048050441df8);
        EXPECT_EQ(prepare.xid, 747u);
        EXPECT_EQ(prepare.gid, "gid-stream");
    }
    const auto& commit = as<CommitPrepared>(m[77]);
    EXPECT_EQ(commit.commit_lsn, Lsn{0x16343B0});
    EXPECT_EQ(commit.end_lsn, Lsn{0x16343F0});
    EXPECT_EQ(commit.xid, 747u);
    EXPECT_EQ(commit.gid, "gid-stream");
}

// --- Every truncation of every captured message ------------------------------------------------

struct FixtureCase {
    const char* file;
    int proto_version;
};

TEST(PgOutputCaptured, EveryTruncationAndTrailingByteThrows) {
    for (const FixtureCase fixture :
         {FixtureCase{"proto1_changes.hex", 1}, FixtureCase{"proto2_streaming.hex", 2},
          FixtureCase{"proto3_two_phase.hex", 3}}) {
        PgOutputDecoder decoder(fixture.proto_version);
        for (const auto& message : load_pgoutput_fixture(fixture.file)) {
            for (std::size_t n = 0; n < message.size(); ++n) {
                // An exact-size heap copy, so a sanitizer sees any read past the end.
                const std::vector<char> prefix(message.begin(), message.begin() + long(n));
                PgOutputDecoder probe = decoder;
                EXPECT_THROW(probe.decode(std::string_view(prefix.data(), n)), ProtocolError)
                    << fixture.file << " message type " << message[0] << " prefix " << n;
                EXPECT_EQ(probe.stream_xid(), decoder.stream_xid());
            }
            PgOutputDecoder probe = decoder;
            EXPECT_THROW(probe.decode(message + '\0'), ProtocolError) << fixture.file;
            decoder.decode(message);
        }
    }
}

// --- Hand-built messages -----------------------------------------------------------------------

PgOutputDecoder decoder_in_block(int proto_version, std::uint32_t xid) {
    PgOutputDecoder decoder(proto_version);
    decoder.decode(Writer().byte('S').i32(xid).byte(1).bytes());
    return decoder;
}

ProtocolError decode_error(PgOutputDecoder& decoder, const std::string& bytes) {
    try {
        decoder.decode(bytes);
    } catch (const ProtocolError& e) {
        return e;
    }
    ADD_FAILURE() << "no ProtocolError";
    return ProtocolError("none", '?', 0, "");
}

TEST(PgOutputDecoder, OriginMessage) {
    PgOutputDecoder decoder(1);
    const auto m = decoder.decode(Writer().byte('O').i64(0x16'B374D848).str("node_a").bytes());
    EXPECT_EQ(as<Origin>(m).origin_lsn, Lsn{0x16'B374D848});
    EXPECT_EQ(as<Origin>(m).name, "node_a");
}

TEST(PgOutputDecoder, EmptyNamespaceMeansPgCatalog) {
    PgOutputDecoder decoder(1);
    const auto type = decoder.decode(Writer().byte('Y').i32(16500).str("").str("citext").bytes());
    EXPECT_EQ(as<Type>(type).schema, "pg_catalog");
    const auto rel = decoder.decode(
        Writer().byte('R').i32(2615).str("").str("pg_namespace").byte('n').i16(0).bytes());
    EXPECT_EQ(as<Relation>(rel).schema, "pg_catalog");
    EXPECT_EQ(as<Relation>(rel).replica_identity, 'n');
    EXPECT_TRUE(as<Relation>(rel).columns.empty());
}

TEST(PgOutputDecoder, BinaryColumnsAndEmptyValues) {
    PgOutputDecoder decoder(2);
    const std::string bytes = Writer()
                                  .byte('I')
                                  .i32(kT1)
                                  .byte('N')
                                  .i16(3)
                                  .byte('b')
                                  .i32(4)
                                  .raw(std::string("\x00\x00\x00\x2a", 4))
                                  .byte('t')
                                  .i32(0)
                                  .byte('b')
                                  .i32(0)
                                  .bytes();
    const auto m = decoder.decode(bytes); // the views point into `bytes`
    EXPECT_EQ(render(as<Insert>(m).new_tuple), "b:0000002a|t:|b:");
}

TEST(PgOutputDecoder, ChangesInsideAStreamBlockCarryTheirXid) {
    PgOutputDecoder decoder = decoder_in_block(2, 900);
    EXPECT_TRUE(decoder.in_stream_block());
    EXPECT_EQ(
        as<Type>(decoder.decode(Writer().byte('Y').i32(901).i32(16500).str("s").str("t").bytes()))
            .xid,
        901u);
    const std::string update_bytes = Writer()
                                         .byte('U')
                                         .i32(902)
                                         .i32(kT1)
                                         .byte('O')
                                         .i16(1)
                                         .text_column("old")
                                         .byte('N')
                                         .i16(1)
                                         .text_column("new")
                                         .bytes();
    const auto update = decoder.decode(update_bytes);
    EXPECT_EQ(as<Update>(update).xid, 902u);
    EXPECT_EQ(as<Update>(update).old_kind, 'O');
    EXPECT_EQ(render(*as<Update>(update).old_tuple), "t:old");
    EXPECT_EQ(render(as<Update>(update).new_tuple), "t:new");
    const std::string del_bytes =
        Writer().byte('D').i32(903).i32(kT1).byte('K').i16(1).byte('n').bytes();
    const auto del = decoder.decode(del_bytes);
    EXPECT_EQ(as<Delete>(del).xid, 903u);
    EXPECT_EQ(render(as<Delete>(del).old_tuple), "n");
    const auto truncate =
        decoder.decode(Writer().byte('T').i32(904).i32(1).byte(0).i32(kT2).bytes());
    EXPECT_EQ(as<Truncate>(truncate).xid, 904u);
    EXPECT_FALSE(as<Truncate>(truncate).cascade());
    EXPECT_FALSE(as<Truncate>(truncate).restart_identity());
    EXPECT_EQ(as<Truncate>(truncate).relation_oids, std::vector<std::uint32_t>{kT2});
    const auto message =
        decoder.decode(Writer().byte('M').i32(905).byte(1).i64(0x42).str("p").i32(0).bytes());
    EXPECT_EQ(as<Message>(message).xid, 905u);
    EXPECT_TRUE(as<Message>(message).content.empty());
    const auto origin = decoder.decode(Writer().byte('O').i64(0).str("o").bytes());
    EXPECT_EQ(as<Origin>(origin).name, "o");
    decoder.decode("E");
    EXPECT_FALSE(decoder.in_stream_block());
    EXPECT_EQ(decoder.stream_xid(), std::nullopt);
}

TEST(PgOutputDecoder, EnterStreamBlockReadsSpooledMessagesBack) {
    // How a spooled streamed transaction is decoded at its commit: no Stream Start comes.
    PgOutputDecoder decoder(2);
    decoder.enter_stream_block(900);
    EXPECT_TRUE(decoder.in_stream_block());
    EXPECT_EQ(decoder.stream_xid(), 900u);
    const std::string insert_bytes =
        Writer().byte('I').i32(901).i32(kT1).byte('N').i16(1).text_column("v").bytes();
    const auto insert = decoder.decode(insert_bytes);
    EXPECT_EQ(as<Insert>(insert).xid, 901u);
    EXPECT_EQ(render(as<Insert>(insert).new_tuple), "t:v");
    EXPECT_THROW(decoder.enter_stream_block(902), std::logic_error);
    EXPECT_EQ(decoder.stream_xid(), 900u);
    PgOutputDecoder v1(1);
    EXPECT_THROW(v1.enter_stream_block(900), std::logic_error);
    EXPECT_FALSE(v1.in_stream_block());
}

TEST(PgOutputDecoder, ParallelStreamAbortCarriesLsnAndTime) {
    PgOutputDecoder decoder(4, /*streaming_parallel=*/true);
    const auto m = decoder.decode(
        Writer().byte('A').i32(10).i32(11).i64(0x16'B374D848).i64(0x000304805043d8c1).bytes());
    const auto& abort = as<StreamAbort>(m);
    EXPECT_EQ(abort.xid, 10u);
    EXPECT_EQ(abort.subxid, 11u);
    EXPECT_EQ(abort.abort_lsn, Lsn{0x16'B374D848});
    EXPECT_EQ(abort.abort_time, 0x000304805043d8c1);
    EXPECT_THROW(decoder.decode(Writer().byte('A').i32(10).i32(11).bytes()), ProtocolError);

    PgOutputDecoder not_parallel(4);
    EXPECT_THROW(
        not_parallel.decode(
            Writer().byte('A').i32(10).i32(11).i64(0x16'B374D848).i64(0x000304805043d8c1).bytes()),
        ProtocolError);
}

TEST(PgOutputDecoder, RejectsImpossibleConfigurations) {
    EXPECT_THROW(PgOutputDecoder(0), std::invalid_argument);
    EXPECT_THROW(PgOutputDecoder(5), std::invalid_argument);
    EXPECT_THROW(PgOutputDecoder(3, true), std::invalid_argument);
    EXPECT_EQ(PgOutputDecoder(4, true).proto_version(), 4);
}

TEST(PgOutputDecoder, UnknownMessageTypeNamesTypeAndOffset) {
    PgOutputDecoder decoder(4);
    const auto e = decode_error(decoder, "Zabc");
    EXPECT_EQ(e.message_type(), 'Z');
    EXPECT_EQ(e.offset(), 0u);
    EXPECT_STREQ(e.what(), "pgoutput unknown message ('Z') at byte 0: unknown message type");
    EXPECT_EQ(decode_error(decoder, "").offset(), 0u);
}

TEST(PgOutputDecoder, UnknownTupleKindNamesItsByte) {
    PgOutputDecoder decoder(1);
    const auto e = decode_error(
        decoder, Writer().byte('I').i32(kT1).byte('N').i16(2).byte('n').byte('x').bytes());
    EXPECT_EQ(e.message_type(), 'I');
    EXPECT_EQ(e.offset(), 9u);
    EXPECT_STREQ(e.what(),
                 "pgoutput Insert message ('I') at byte 9: unknown kind 'x' of tuple column 2");
}

TEST(PgOutputDecoder, TruncationNamesTheField) {
    PgOutputDecoder decoder(1);
    const auto e = decode_error(decoder, Writer().byte('B').i64(1).i32(0).bytes());
    EXPECT_EQ(e.offset(), 9u);
    EXPECT_STREQ(e.what(),
                 "pgoutput Begin message ('B') at byte 9: truncated: commit time needs 8 bytes, "
                 "4 left");
}

TEST(PgOutputDecoder, WrongTupleTags) {
    PgOutputDecoder decoder(1);
    EXPECT_EQ(decode_error(decoder, Writer().byte('I').i32(1).byte('K').i16(0).bytes()).offset(),
              5u);
    EXPECT_EQ(decode_error(decoder, Writer().byte('D').i32(1).byte('N').i16(0).bytes()).offset(),
              5u);
    // The old tuple must be followed by 'N'.
    EXPECT_EQ(
        decode_error(decoder, Writer().byte('U').i32(1).byte('K').i16(0).byte('K').i16(0).bytes())
            .offset(),
        8u);
}

TEST(PgOutputDecoder, HostileCountsAndLengthsAreRejectedBeforeAllocating) {
    PgOutputDecoder decoder(1);
    // Negative and oversized column counts, negative and oversized lengths.
    EXPECT_THROW(decoder.decode(Writer().byte('I').i32(1).byte('N').i16(-1).bytes()),
                 ProtocolError);
    EXPECT_THROW(decoder.decode(Writer().byte('I').i32(1).byte('N').i16(32767).bytes()),
                 ProtocolError);
    EXPECT_THROW(
        decoder.decode(Writer().byte('I').i32(1).byte('N').i16(1).byte('t').i32(-1).bytes()),
        ProtocolError);
    EXPECT_THROW(
        decoder.decode(
            Writer().byte('I').i32(1).byte('N').i16(1).byte('t').i32(0x7fffffff).raw("x").bytes()),
        ProtocolError);
    EXPECT_THROW(
        decoder.decode(Writer().byte('R').i32(1).str("s").str("t").byte('d').i16(-5).bytes()),
        ProtocolError);
    EXPECT_THROW(
        decoder.decode(Writer().byte('R').i32(1).str("s").str("t").byte('d').i16(100).bytes()),
        ProtocolError);
    EXPECT_THROW(decoder.decode(Writer().byte('T').i32(-1).byte(0).bytes()), ProtocolError);
    EXPECT_THROW(decoder.decode(Writer().byte('T').i32(0x40000000).byte(0).i32(1).bytes()),
                 ProtocolError);
    EXPECT_THROW(decoder.decode(Writer().byte('M').byte(0).i64(1).str("p").i32(-1).bytes()),
                 ProtocolError);
    EXPECT_THROW(decoder.decode(Writer().byte('M').byte(0).i64(1).str("p").i32(2).raw("x").bytes()),
                 ProtocolError);
    // A string without its NUL.
    EXPECT_THROW(decoder.decode(Writer().byte('O').i64(1).raw("name").bytes()), ProtocolError);
}

TEST(PgOutputDecoder, UnknownReplicaIdentityThrows) {
    PgOutputDecoder decoder(1);
    EXPECT_EQ(
        decode_error(decoder, Writer().byte('R').i32(1).str("s").str("t").byte('z').i16(0).bytes())
            .offset(),
        9u);
}

TEST(PgOutputDecoder, StreamBlockRules) {
    PgOutputDecoder decoder = decoder_in_block(2, 900);
    // Nested Start: rejected, the open block stays.
    auto e = decode_error(decoder, Writer().byte('S').i32(901).byte(1).bytes());
    EXPECT_EQ(e.message_type(), 'S');
    EXPECT_EQ(e.offset(), 0u);
    EXPECT_EQ(decoder.stream_xid(), 900u);
    // Transaction boundaries never come inside a block.
    EXPECT_THROW(decoder.decode(Writer().byte('B').i64(1).i64(2).i32(3).bytes()), ProtocolError);
    EXPECT_THROW(decoder.decode(Writer().byte('c').i32(900).byte(0).i64(1).i64(2).i64(3).bytes()),
                 ProtocolError);
    EXPECT_THROW(decoder.decode(Writer().byte('A').i32(900).i32(900).bytes()), ProtocolError);
    decoder.decode("E");
    // Stop without Start.
    e = decode_error(decoder, "E");
    EXPECT_EQ(e.message_type(), 'E');
    EXPECT_EQ(e.offset(), 0u);
    // A truncated Start does not open a block.
    EXPECT_THROW(decoder.decode(Writer().byte('S').i32(902).bytes()), ProtocolError);
    EXPECT_FALSE(decoder.in_stream_block());
    EXPECT_THROW(decoder.decode(Writer().byte('S').i32(902).byte(2).bytes()), ProtocolError);
    EXPECT_FALSE(decoder.in_stream_block());
}

TEST(PgOutputDecoder, MessagesOutsideTheNegotiatedVersionThrow) {
    PgOutputDecoder v1(1);
    for (const char type : {'S', 'E', 'c', 'A', 'b', 'P', 'K', 'r', 'p'}) {
        EXPECT_THROW(v1.decode(std::string(1, type)), ProtocolError) << type;
    }
    PgOutputDecoder v2(2);
    const auto e =
        decode_error(v2, Writer().byte('P').byte(0).i64(1).i64(2).i64(3).i32(4).str("g").bytes());
    EXPECT_EQ(e.message_type(), 'P');
    EXPECT_STREQ(
        e.what(),
        "pgoutput Prepare message ('P') at byte 0: not part of protocol version 2 (needs 3)");
}

} // namespace
} // namespace pgtide::replicate
