// BinaryCopyParser: rows out of a `COPY ... TO STDOUT (FORMAT binary)` byte stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "schema/decode_error.hpp"

namespace pgtide::schema {

/// Incremental parser of PostgreSQL's binary COPY format (header, rows, trailer). Feed it the
/// CopyData payloads in order, split anywhere; take rows with next(). It keeps only the bytes
/// of the row being assembled, so memory is bounded by the largest row plus one chunk.
class BinaryCopyParser {
public:
    enum class Status {
        RowReady, ///< `fields` holds the next row
        NeedMore, ///< no whole row buffered: feed() more bytes
        End,      ///< the trailer was read; the stream is complete
    };

    /// Appends the next bytes of the stream (copied). Invalidates views from next().
    void feed(std::string_view bytes);

    /// Parses the next row into `fields` (one entry per column, nullopt for NULL; the views
    /// stay valid until the next feed() or next()). Throws DecodeError, naming the stream byte
    /// offset, on a bad signature, unknown critical flags, a field count that differs from the
    /// first row's, a negative or oversized length, or bytes after the trailer.
    Status next(std::vector<std::optional<std::string_view>>& fields);

    /// Call when the server says the COPY is over: throws DecodeError unless the trailer was
    /// read and nothing followed it (a truncated stream).
    void finish() const;

    /// Number of fields per row, once the first row was read.
    std::optional<std::size_t> field_count() const { return field_count_; }

    /// Rows returned so far.
    std::uint64_t rows() const { return rows_; }

    /// Bytes currently buffered (unconsumed), for memory accounting.
    std::size_t buffered() const { return buffer_.size() - pos_; }

private:
    enum class State { Header, Extension, Rows, Ended };

    bool read_header();
    std::size_t available() const { return buffer_.size() - pos_; }
    std::size_t offset_of(std::size_t buffer_index) const { return base_ + buffer_index; }

    std::string buffer_;
    std::size_t pos_ = 0;  ///< first unconsumed byte in buffer_
    std::size_t base_ = 0; ///< stream offset of buffer_[0]
    State state_ = State::Header;
    std::uint32_t extension_left_ = 0;
    std::optional<std::size_t> field_count_;
    std::uint64_t rows_ = 0;

    // Progress through a partly buffered row, relative to pos_, so a large row fed in small
    // chunks is not rescanned from its start.
    struct Field {
        std::size_t start;
        std::int32_t length; ///< -1 for NULL
    };
    std::vector<Field> row_fields_;
    std::size_t row_scan_ = 0; ///< bytes of the current row scanned (relative to pos_)
};

/// Writing the format (the destination side of a copy): appends the header of a stream with no
/// flags and no header extension. The trailer is optional: CopyDone ends the data.
void append_binary_copy_header(std::string& out);

/// Appends `v` in network byte order, as binary COPY (and binary arrays) write field counts'
/// halves, lengths and 4-byte values.
void append_be32(std::string& out, std::uint32_t v);

} // namespace pgtide::schema
