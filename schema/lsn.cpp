// Lsn text form.
#include "schema/lsn.hpp"

#include <charconv>
#include <cstdio>

namespace pgtide::schema {

std::string Lsn::str() const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%X/%X", unsigned(value_ >> 32), unsigned(value_ & 0xffffffffu));
    return buf;
}

std::optional<Lsn> Lsn::parse(std::string_view text) {
    const auto slash = text.find('/');
    if (slash == std::string_view::npos || slash == 0 || slash + 1 == text.size()) {
        return std::nullopt;
    }
    std::uint32_t hi = 0;
    std::uint32_t lo = 0;
    const auto a = std::from_chars(text.data(), text.data() + slash, hi, 16);
    const auto b = std::from_chars(text.data() + slash + 1, text.data() + text.size(), lo, 16);
    if (a.ec != std::errc{} || a.ptr != text.data() + slash || b.ec != std::errc{} ||
        b.ptr != text.data() + text.size()) {
        return std::nullopt;
    }
    return Lsn{(std::uint64_t(hi) << 32) | lo};
}

} // namespace pgtide::schema
