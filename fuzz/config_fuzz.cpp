// libFuzzer target: the configuration loader (parse_config, the same entry point the file
// loader uses, then validate) and the value parsers it relies on.
//
// Whatever the text, each returns or throws its documented error (ConfigError, or
// std::invalid_argument for sizes and durations); nothing else.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fuzz/fuzz_support.hpp"
#include "src/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace pgtide;
    if (size < 1) {
        return 0;
    }
    const auto mode =
        static_cast<fuzz::ConfigMode>(data[0] % static_cast<std::uint8_t>(fuzz::ConfigMode::Count));
    // libFuzzer's buffer ends where the text does: a read past it is a heap overflow.
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    switch (mode) {
    case fuzz::ConfigMode::Toml:
        try {
            const app::Config config = app::parse_config(text, "fuzz.toml");
            (void)app::redact_dsn(config.source.dsn);
            app::validate(config);
            if (config.destination.is_sqlite()) {
                (void)config.destination.sqlite_path();
            }
        } catch (const app::ConfigError&) {
        }
        break;
    case fuzz::ConfigMode::Size:
        try {
            (void)app::parse_size(text);
        } catch (const std::invalid_argument&) {
        }
        break;
    case fuzz::ConfigMode::Duration:
        try {
            fuzz::require(app::parse_duration(text).count() >= 0, "a negative duration");
        } catch (const std::invalid_argument&) {
        }
        break;
    case fuzz::ConfigMode::Dsn:
        (void)app::redact_dsn(text);
        break;
    case fuzz::ConfigMode::TableName:
        (void)app::qualify_table_name(text);
        break;
    case fuzz::ConfigMode::Count:
        break;
    }
    return 0;
}
