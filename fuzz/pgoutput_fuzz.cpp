// libFuzzer target: a replication session's messages through PgOutputDecoder (and, in walsender
// mode, parse_walsender_message first), tuple columns on through the value codecs.
//
// Whatever the bytes, the decoder returns a message or throws ProtocolError naming a byte inside
// the message, and a message that throws leaves the decoder's stream state as it was.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>
#include <variant>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "replicate/pgoutput.hpp"
#include "replicate/walsender_messages.hpp"
#include "schema/codec.hpp"
#include "schema/pg_types.hpp"

namespace pgtide::fuzz {
namespace {

using replicate::PgOutputDecoder;
using replicate::PgOutputMessage;
using replicate::ProtocolError;
namespace pgoutput = replicate::pgoutput;

// Reads every byte a view covers, and checks that it lies inside the payload.
std::uint64_t touch(std::string_view payload, std::string_view view) {
    require(view.empty() || (view.data() >= payload.data() &&
                             view.data() + view.size() <= payload.data() + payload.size()),
            "a decoded view points outside the payload");
    std::uint64_t sum = 0;
    for (const char c : view) {
        sum += static_cast<unsigned char>(c);
    }
    return sum;
}

class Session {
public:
    Session(int proto_version, bool parallel) : decoder_(proto_version, parallel) {}

    void message(std::string_view payload) {
        const bool was_in_stream = decoder_.in_stream_block();
        const auto was_xid = decoder_.stream_xid();
        PgOutputMessage message;
        try {
            message = decoder_.decode(payload);
        } catch (const ProtocolError& e) {
            require(e.offset() <= payload.size(), "ProtocolError offset past the message");
            require(decoder_.in_stream_block() == was_in_stream && decoder_.stream_xid() == was_xid,
                    "a message that threw changed the decoder's state");
            return;
        }
        std::visit([&](const auto& m) { use(payload, m); }, message);
    }

private:
    template <class M> void use(std::string_view, const M&) {}

    void use(std::string_view, const pgoutput::Begin& begin) {
        sink_ += static_cast<std::uint64_t>(replicate::pg_clock_to_unix_us(begin.commit_time));
    }

    void use(std::string_view, const pgoutput::Relation& relation) {
        std::vector<schema::TypeRef> types;
        for (const auto& column : relation.columns) {
            types.push_back(
                schema::TypeRef{column.type_oid, schema::builtin_array_element(column.type_oid)});
        }
        relations_[relation.oid] = std::move(types);
    }

    void use(std::string_view payload, const pgoutput::Insert& insert) {
        tuple(payload, insert.relation_oid, insert.new_tuple);
    }

    void use(std::string_view payload, const pgoutput::Update& update) {
        if (update.old_tuple) {
            tuple(payload, update.relation_oid, *update.old_tuple);
        }
        tuple(payload, update.relation_oid, update.new_tuple);
    }

    void use(std::string_view payload, const pgoutput::Delete& del) {
        tuple(payload, del.relation_oid, del.old_tuple);
    }

    void use(std::string_view payload, const pgoutput::Message& message) {
        sink_ += touch(payload, message.content);
    }

    // Decodes each column as the stream does, with the types of the relation's last Relation.
    void tuple(std::string_view payload, std::uint32_t relation_oid,
               const pgoutput::TupleData& tuple) {
        const auto it = relations_.find(relation_oid);
        for (std::size_t i = 0; i < tuple.columns.size(); ++i) {
            const pgoutput::TupleColumn& column = tuple.columns[i];
            sink_ += touch(payload, column.data);
            if (it == relations_.end() || i >= it->second.size()) {
                continue;
            }
            try {
                if (column.kind == pgoutput::TupleColumn::Kind::Text) {
                    (void)schema::decode_text(it->second[i], column.data);
                } else if (column.kind == pgoutput::TupleColumn::Kind::Binary) {
                    (void)schema::decode_binary(it->second[i], column.data);
                }
            } catch (const schema::DecodeError&) {
            }
        }
    }

    PgOutputDecoder decoder_;
    std::map<std::uint32_t, std::vector<schema::TypeRef>> relations_;
    std::uint64_t sink_ = 0;
};

} // namespace
} // namespace pgtide::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace pgtide;
    if (size < 1) {
        return 0;
    }
    const std::uint8_t mode = data[0];
    const int proto_version = (mode & 3) + 1;
    const bool parallel = proto_version == 4 && (mode & fuzz::kPgoutputParallel) != 0;
    const bool walsender = (mode & fuzz::kPgoutputWalsender) != 0;
    fuzz::Session session(proto_version, parallel);

    std::size_t pos = 1;
    while (pos < size) {
        std::size_t length = size - pos;
        if (length >= 2) {
            length = std::min<std::size_t>(fuzz::load_u16(data + pos), length - 2);
            pos += 2;
        } else {
            pos += length;
            length = 0;
        }
        // A copy of exactly the message's bytes, so a read past its end is a heap overflow.
        const std::vector<char> bytes(data + pos, data + pos + length);
        pos += length;
        const std::string_view message(bytes.data(), bytes.size());
        if (!walsender) {
            session.message(message);
            continue;
        }
        try {
            const auto parsed = replicate::parse_walsender_message(message);
            if (const auto* xlog = std::get_if<replicate::XLogData>(&parsed)) {
                (void)replicate::pg_clock_to_unix_us(xlog->send_time);
                session.message(xlog->payload);
            } else {
                (void)replicate::pg_clock_to_unix_us(
                    std::get<replicate::PrimaryKeepalive>(parsed).send_time);
            }
        } catch (const replicate::ProtocolError& e) {
            fuzz::require(e.offset() <= message.size(), "ProtocolError offset past the message");
        }
    }
    return 0;
}
