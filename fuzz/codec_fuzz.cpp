// libFuzzer target: decode_binary and decode_text for every type of fuzz::codec_types().
//
// Whatever the bytes, a decoder returns a Value of the type's storage class (or TEXT 'NaN' for a
// float) or throws DecodeError at an offset inside the input; nothing else. For the scalars with
// a text canonical form, decode_text of that form gives the same value back.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <variant>

#include "fuzz/fuzz_support.hpp"
#include "schema/codec.hpp"
#include "schema/pg_types.hpp"

namespace pgtide::fuzz {
namespace {

void check_storage_class(const schema::TypeRef& t, const schema::Value& v) {
    switch (schema::storage_class(t)) {
    case schema::StorageClass::Integer:
        require(std::holds_alternative<std::int64_t>(v), "an Integer type decoded to no int64");
        break;
    case schema::StorageClass::Real:
        require(std::holds_alternative<double>(v) ||
                    (std::holds_alternative<std::string>(v) && std::get<std::string>(v) == "NaN"),
                "a Real type decoded to neither a double nor 'NaN'");
        break;
    case schema::StorageClass::Text:
        require(std::holds_alternative<std::string>(v), "a Text type decoded to no string");
        break;
    case schema::StorageClass::Blob:
        require(std::holds_alternative<schema::Blob>(v), "a Blob type decoded to no Blob");
        break;
    }
}

// Scalars whose canonical value is, or prints as, text that the text decoder reads back to the
// same value: the same value reaches the destination whether it came as binary or as text.
bool text_fixed_point(const schema::TypeRef& t) {
    namespace oid = schema::oid;
    if (t.element_oid != 0 || schema::builtin_array_element(t.oid) != 0) {
        return false;
    }
    switch (t.oid) {
    case oid::kInt2:
    case oid::kInt4:
    case oid::kInt8:
    case oid::kOid:
    case oid::kNumeric:
    case oid::kUuid:
    case oid::kDate:
    case oid::kTime:
    case oid::kTimetz:
    case oid::kTimestamp:
    case oid::kTimestamptz:
    case oid::kInterval:
        return true;
    default:
        return false;
    }
}

void check_text_fixed_point(const schema::TypeRef& t, const schema::Value& v) {
    if (!text_fixed_point(t)) {
        return;
    }
    const std::string text = std::holds_alternative<std::int64_t>(v)
                                 ? std::to_string(std::get<std::int64_t>(v))
                                 : std::get<std::string>(v);
    schema::Value again;
    try {
        again = schema::decode_text(t, text);
    } catch (const schema::DecodeError& e) {
        std::fprintf(stderr, "canonical text \"%s\" does not decode: %s\n", text.c_str(), e.what());
        require(false, "decode_text rejects a canonical value");
    }
    if (again != v) {
        std::fprintf(stderr, "canonical text \"%s\" decodes to another value\n", text.c_str());
        require(false, "decode_text of a canonical value changes it");
    }
}

} // namespace
} // namespace pgtide::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace pgtide;
    if (size < 3) {
        return 0;
    }
    const bool binary = (data[0] & fuzz::kCodecBinary) != 0;
    const auto& types = fuzz::codec_types();
    const schema::TypeRef& type = types[fuzz::load_u16(data + 1) % types.size()];
    // libFuzzer's buffer ends where the value does: a read past it is a heap overflow.
    const std::string_view value(reinterpret_cast<const char*>(data) + 3, size - 3);
    try {
        const schema::Value v =
            binary ? schema::decode_binary(type, value) : schema::decode_text(type, value);
        fuzz::check_storage_class(type, v);
        fuzz::check_text_fixed_point(type, v);
        (void)schema::value_bytes(v);
    } catch (const schema::DecodeError& e) {
        fuzz::require(e.offset() <= value.size(), "DecodeError offset past the value");
    }
    return 0;
}
