// Lsn: a WAL position, printed and parsed as PostgreSQL does (16/B374D848).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <compare>

namespace pgtide::schema {

/// A PostgreSQL log sequence number. Value type; 0 is "invalid" (0/0).
class Lsn {
public:
    constexpr Lsn() = default;
    constexpr explicit Lsn(std::uint64_t value) : value_(value) {}

    constexpr std::uint64_t value() const { return value_; }
    constexpr bool valid() const { return value_ != 0; }

    /// "16/B374D848" (hex, upper case, no zero padding), as pg_lsn prints.
    std::string str() const;
    /// Parses "X/Y" (either half may be zero-padded); nullopt when malformed.
    static std::optional<Lsn> parse(std::string_view text);

    friend constexpr auto operator<=>(Lsn, Lsn) = default;

private:
    std::uint64_t value_ = 0;
};

} // namespace pgtide::schema
