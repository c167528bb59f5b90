// What the fuzz targets and their seed maker share: input layouts, the codec's type table, hex.
//
// Input layouts (the first bytes choose how the rest is read):
//   pgoutput     [mode] then messages, each [u16 BE length][bytes]; mode bits 0-1: proto_version
//                - 1, bit 2: streaming 'parallel' (proto 4 only), bit 3: wrap each message as
//                walsender CopyData (XLogData or keepalive) parsed before decoding
//   binary_copy  [chunk] then the COPY stream, fed in chunks of 1..chunk bytes (0: whole)
//   codec        [mode][type index u16 BE] then the value; mode bit 0: binary (else text)
//   config       [mode] then text; mode % 5: 0 TOML file, 1 size, 2 duration, 3 DSN, 4 table
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "schema/codec.hpp"
#include "schema/pg_types.hpp"
#include "schema/table.hpp"

namespace pgtide::fuzz {

inline constexpr std::uint8_t kPgoutputParallel = 4;
inline constexpr std::uint8_t kPgoutputWalsender = 8;
inline constexpr std::uint8_t kCodecBinary = 1;

enum class ConfigMode : std::uint8_t { Toml, Size, Duration, Dsn, TableName, Count };

/// The types the codec target picks from: every type OID schema/pg_types.hpp names, every
/// built-in array type it knows, and user types (an enum, an array of it, an
/// array of a domain over int4: domains resolve to their base type). Fixed order: the seed corpus
/// refers to entries by index.
inline const std::vector<schema::TypeRef>& codec_types() {
    static const std::vector<schema::TypeRef> types = [] {
        namespace oid = schema::oid;
        std::vector<schema::TypeRef> out;
        for (const std::uint32_t t :
             {oid::kBool,        oid::kBytea,      oid::kChar,   oid::kName,    oid::kInt8,
              oid::kInt2,        oid::kInt2Vector, oid::kInt4,   oid::kText,    oid::kOid,
              oid::kXid,         oid::kOidVector,  oid::kJson,   oid::kXml,     oid::kPoint,
              oid::kLseg,        oid::kBox,        oid::kLine,   oid::kCidr,    oid::kFloat4,
              oid::kFloat8,      oid::kUnknown,    oid::kMoney,  oid::kMacaddr, oid::kInet,
              oid::kBpchar,      oid::kVarchar,    oid::kDate,   oid::kTime,    oid::kTimestamp,
              oid::kTimestamptz, oid::kInterval,   oid::kTimetz, oid::kBit,     oid::kVarbit,
              oid::kNumeric,     oid::kRecord,     oid::kUuid,   oid::kPgLsn,   oid::kTsvector,
              oid::kJsonb,       oid::kJsonpath}) {
            out.push_back(schema::TypeRef{t, 0});
        }
        for (std::uint32_t t = 0; t < oid::kFirstNormalObjectId; ++t) {
            if (const std::uint32_t element = schema::builtin_array_element(t)) {
                out.push_back(schema::TypeRef{t, element});
            }
        }
        constexpr std::uint32_t kEnum = oid::kFirstNormalObjectId;
        out.push_back(schema::TypeRef{kEnum, 0});
        out.push_back(schema::TypeRef{kEnum + 1, kEnum});
        out.push_back(schema::TypeRef{kEnum + 39, oid::kInt4}); // an array of a domain over int4
        return out;
    }();
    return types;
}

/// The index in codec_types() of `t`, or of an entry that decodes like it: an array of the same
/// element, or for another scalar the enum (a type without a mapping). Throws
/// std::out_of_range for an array of an element the table has no array of.
inline std::size_t codec_type_index(const schema::TypeRef& t) {
    const auto& types = codec_types();
    const schema::TypeRef like = t.element_oid == 0 && schema::builtin_array_element(t.oid) == 0
                                     ? schema::TypeRef{schema::oid::kFirstNormalObjectId, 0}
                                     : t;
    for (const schema::TypeRef& candidate : {t, like}) {
        for (std::size_t i = 0; i < types.size(); ++i) {
            if (types[i] == candidate) {
                return i;
            }
        }
    }
    for (std::size_t i = 0; i < types.size(); ++i) {
        if (t.element_oid != 0 && types[i].element_oid == t.element_oid) {
            return i;
        }
    }
    throw std::out_of_range("no codec fuzz type for OID " + std::to_string(t.oid));
}

/// Big-endian u16 at `p`.
inline std::uint16_t load_u16(const std::uint8_t* p) {
    return static_cast<std::uint16_t>((p[0] << 8) | p[1]);
}

/// Hex digits (either case) to bytes; throws std::invalid_argument on anything else.
inline std::string unhex(std::string_view hex) {
    const auto nibble = [](char c) -> int {
        const int v = pgtide::schema::hex_value(c);
        if (v < 0) {
            throw std::invalid_argument("bad hex digit");
        }
        return v;
    };
    if (hex.size() % 2 != 0) {
        throw std::invalid_argument("odd number of hex digits");
    }
    std::string out;
    out.reserve(hex.size() / 2);
    for (std::size_t i = 0; i < hex.size(); i += 2) {
        out += static_cast<char>(nibble(hex[i]) * 16 + nibble(hex[i + 1]));
    }
    return out;
}

/// Aborts (a crash libFuzzer reports, with the input) when `ok` is false.
inline void require(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
        std::abort();
    }
}

} // namespace pgtide::fuzz
