// libFuzzer target: BinaryCopyParser over a COPY stream fed whole and fed in small chunks.
//
// Whatever the bytes, the parser returns rows or throws DecodeError at a stream offset it has
// seen, and how the stream is split never changes the rows or the error.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "schema/binary_copy.hpp"

namespace pgtide::fuzz {
namespace {

using schema::BinaryCopyParser;

struct Outcome {
    std::vector<std::vector<std::optional<std::string>>> rows;
    std::optional<std::size_t> error_at; ///< offset of the DecodeError, if one was thrown
    bool finished = false;               ///< finish() accepted the stream

    bool operator==(const Outcome&) const = default;
};

// Takes every row buffered so far.
void drain(BinaryCopyParser& parser, Outcome& out) {
    std::vector<std::optional<std::string_view>> fields;
    for (;;) {
        const BinaryCopyParser::Status status = parser.next(fields);
        if (status != BinaryCopyParser::Status::RowReady) {
            return;
        }
        require(parser.field_count() && fields.size() == *parser.field_count(),
                "a row with a field count other than field_count()");
        auto& row = out.rows.emplace_back();
        for (const auto& f : fields) {
            row.push_back(f ? std::optional<std::string>(*f) : std::nullopt);
        }
    }
}

// Feeds `stream` in pieces of 1..chunk bytes (all at once when chunk is 0).
Outcome parse(std::string_view stream, std::size_t chunk) {
    BinaryCopyParser parser;
    Outcome out;
    try {
        std::size_t pos = 0;
        std::size_t piece = 1;
        do {
            const std::size_t n = chunk == 0 ? stream.size() : std::min(piece, stream.size() - pos);
            parser.feed(stream.substr(pos, n));
            pos += n;
            piece = chunk == 0 ? piece : piece % chunk + 1;
            drain(parser, out);
        } while (pos < stream.size());
        parser.finish();
        out.finished = true;
    } catch (const schema::DecodeError& e) {
        require(e.offset() <= stream.size(), "DecodeError offset past the stream");
        out.error_at = e.offset();
    }
    require(parser.rows() == out.rows.size(), "rows() differs from the rows returned");
    return out;
}

} // namespace
} // namespace pgtide::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace pgtide::fuzz;
    if (size < 1) {
        return 0;
    }
    const std::size_t chunk = data[0] % 32;
    const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
    const Outcome whole = parse(stream, 0);
    if (chunk != 0) {
        require(parse(stream, chunk) == whole, "splitting the stream changed the outcome");
    }
    return 0;
}
