// float4out / float8out as PostgreSQL prints them with extra_float_digits > 0.
#pragma once

#include <string>

namespace pgtide::schema {

/// PostgreSQL's float4 text (`1.1`, `1e+06`, `7.3405216e+07`, `NaN`, `-Infinity`).
std::string pg_float4_text(float v);

/// PostgreSQL's float8 text (`0.1`, `1e+15`, `1e-05`, `NaN`, `Infinity`).
std::string pg_float8_text(double v);

} // namespace pgtide::schema
