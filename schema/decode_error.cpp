// DecodeError message.
#include "schema/decode_error.hpp"

namespace pgtide::schema {

namespace {

std::string describe(std::string_view what, std::size_t offset, std::string_view detail) {
    std::string message = "invalid ";
    message += what;
    message += " at byte ";
    message += std::to_string(offset);
    message += ": ";
    message += detail;
    return message;
}

} // namespace

DecodeError::DecodeError(std::string_view what, std::size_t offset, std::string_view detail)
    : std::runtime_error(describe(what, offset, detail)), offset_(offset) {}

} // namespace pgtide::schema
