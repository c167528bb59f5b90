// Binary COPY stream parsing (PostgreSQL's copyfromparse.c, read side of copyto.c).
#include "schema/binary_copy.hpp"

#include <cstring>

namespace pgtide::schema {

namespace {

constexpr std::string_view kSignature{"PGCOPY\n\377\r\n\0", 11};
constexpr std::size_t kHeaderBytes = 11 + 4 + 4;
constexpr std::uint32_t kFlagOids = 1u << 16;
constexpr std::uint32_t kCriticalFlags = 0xffffu;
constexpr std::int32_t kMaxFieldBytes = 0x3fffffff; // PostgreSQL's MaxAllocSize - 1
constexpr std::size_t kShrinkAbove = std::size_t{1} << 20;

std::uint32_t read_u32(const char* p) {
    const auto* u = reinterpret_cast<const unsigned char*>(p);
    return (std::uint32_t(u[0]) << 24) | (std::uint32_t(u[1]) << 16) | (std::uint32_t(u[2]) << 8) |
           std::uint32_t(u[3]);
}

std::int16_t read_i16(const char* p) {
    const auto* u = reinterpret_cast<const unsigned char*>(p);
    return std::int16_t((std::uint16_t(u[0]) << 8) | std::uint16_t(u[1]));
}

DecodeError copy_error(std::size_t offset, std::string_view detail) {
    return DecodeError("binary COPY stream", offset, detail);
}

} // namespace

void BinaryCopyParser::feed(std::string_view bytes) {
    if (pos_ > 0) {
        buffer_.erase(0, pos_);
        base_ += pos_;
        pos_ = 0;
        if (buffer_.capacity() > kShrinkAbove &&
            buffer_.size() + bytes.size() < buffer_.capacity() / 4) {
            buffer_.shrink_to_fit();
        }
    }
    buffer_.append(bytes);
}

bool BinaryCopyParser::read_header() {
    // Check the signature as far as it is buffered, so garbage fails at once.
    const std::size_t have = std::min(available(), kSignature.size());
    for (std::size_t i = 0; i < have; ++i) {
        if (buffer_[pos_ + i] != kSignature[i]) {
            throw copy_error(offset_of(pos_ + i), "not a binary COPY signature");
        }
    }
    if (available() < kHeaderBytes) {
        return false;
    }
    const std::uint32_t flags = read_u32(buffer_.data() + pos_ + 11);
    if ((flags & kCriticalFlags) != 0) {
        throw copy_error(offset_of(pos_ + 11), "unknown critical flags in header");
    }
    if ((flags & kFlagOids) != 0) {
        throw copy_error(offset_of(pos_ + 11), "rows with OIDs are not supported");
    }
    const std::uint32_t extension = read_u32(buffer_.data() + pos_ + 15);
    if (extension > std::uint32_t(kMaxFieldBytes)) {
        throw copy_error(offset_of(pos_ + 15), "bad header extension length");
    }
    pos_ += kHeaderBytes;
    extension_left_ = extension;
    state_ = State::Extension;
    return true;
}

BinaryCopyParser::Status
BinaryCopyParser::next(std::vector<std::optional<std::string_view>>& fields) {
    fields.clear();
    if (state_ == State::Header && !read_header()) {
        return Status::NeedMore;
    }
    if (state_ == State::Extension) {
        const std::size_t skip = std::min<std::size_t>(extension_left_, available());
        pos_ += skip;
        extension_left_ -= std::uint32_t(skip);
        if (extension_left_ > 0) {
            return Status::NeedMore;
        }
        state_ = State::Rows;
    }
    if (state_ == State::Ended) {
        if (available() > 0) {
            throw copy_error(offset_of(pos_), "data after the trailer");
        }
        return Status::End;
    }

    // Rows: Int16 field count (-1: trailer), then per field Int32 length (-1: NULL) + bytes.
    if (row_scan_ == 0) {
        if (available() < 2) {
            return Status::NeedMore;
        }
        const std::int16_t count = read_i16(buffer_.data() + pos_);
        if (count == -1) {
            pos_ += 2;
            state_ = State::Ended;
            if (available() > 0) {
                throw copy_error(offset_of(pos_), "data after the trailer");
            }
            return Status::End;
        }
        if (count < 0) {
            throw copy_error(offset_of(pos_), "negative field count " + std::to_string(count));
        }
        if (field_count_ && *field_count_ != std::size_t(count)) {
            throw copy_error(offset_of(pos_), "row has " + std::to_string(count) +
                                                  " fields, earlier rows " +
                                                  std::to_string(*field_count_));
        }
        field_count_ = std::size_t(count);
        row_fields_.clear();
        row_fields_.reserve(std::size_t(count));
        row_scan_ = 2;
    }
    while (row_fields_.size() < *field_count_) {
        if (available() < row_scan_ + 4) {
            return Status::NeedMore;
        }
        const auto length = std::int32_t(read_u32(buffer_.data() + pos_ + row_scan_));
        if (length < -1 || length > kMaxFieldBytes) {
            throw copy_error(offset_of(pos_ + row_scan_),
                             "bad field length " + std::to_string(length));
        }
        const std::size_t data = length < 0 ? 0 : std::size_t(length);
        if (available() < row_scan_ + 4 + data) {
            return Status::NeedMore;
        }
        row_fields_.push_back(Field{row_scan_ + 4, length});
        row_scan_ += 4 + data;
    }

    fields.reserve(row_fields_.size());
    for (const Field& f : row_fields_) {
        if (f.length < 0) {
            fields.emplace_back(std::nullopt);
        } else {
            fields.emplace_back(
                std::string_view(buffer_.data() + pos_ + f.start, std::size_t(f.length)));
        }
    }
    pos_ += row_scan_;
    row_scan_ = 0;
    ++rows_;
    return Status::RowReady;
}

void BinaryCopyParser::finish() const {
    if (state_ != State::Ended) {
        throw copy_error(offset_of(buffer_.size()), "stream ended before the trailer");
    }
    if (available() > 0) {
        throw copy_error(offset_of(pos_), "data after the trailer");
    }
}

void append_binary_copy_header(std::string& out) {
    out += kSignature;
    append_be32(out, 0); // flags
    append_be32(out, 0); // header extension length
}

void append_be32(std::string& out, std::uint32_t v) {
    const char bytes[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
    out.append(bytes, 4);
}

} // namespace pgtide::schema
