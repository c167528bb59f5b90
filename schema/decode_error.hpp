// DecodeError: a value or stream from PostgreSQL that does not follow its wire format.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pgtide::schema {

/// Malformed input to a decoder: names what was being decoded and the byte offset of the
/// fault (within the value or the COPY stream). The caller adds the column or table.
class DecodeError : public std::runtime_error {
public:
    /// Message: "invalid <what> at byte <offset>: <detail>".
    DecodeError(std::string_view what, std::size_t offset, std::string_view detail);

    std::size_t offset() const { return offset_; }

private:
    std::size_t offset_;
};

} // namespace pgtide::schema
