// Decoding throughput of binary COPY fields on one core: BinaryCopyParser + decode_binary, from
// an in-memory COPY stream to canonical Values (issue 5: ≥ 50 M int8 and ≥ 10 M timestamptz
// fields/s). Counters: fields/s ("items_per_second") and COPY bytes/s.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>

#include "schema/binary_copy.hpp"
#include "schema/codec.hpp"
#include "schema/pg_types.hpp"

namespace {

using pgtide::schema::BinaryCopyParser;
using pgtide::schema::TypeRef;
using pgtide::schema::Value;

constexpr int kRows = 10000;

void put_u32(std::string& out, std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) {
        out += char((v >> shift) & 0xff);
    }
}

void put_u64(std::string& out, std::uint64_t v) {
    for (int shift = 56; shift >= 0; shift -= 8) {
        out += char((v >> shift) & 0xff);
    }
}

/// The CopyData payloads of `COPY ... TO STDOUT (FORMAT binary)` for kRows rows of `columns`
/// 8-byte fields drawn by `value`: PostgreSQL sends the header with the first row, then one
/// CopyData per row, then the trailer.
template <typename F> std::vector<std::string> copy_messages(int columns, F value) {
    std::vector<std::string> out;
    std::string msg("PGCOPY\n\377\r\n\0", 11);
    put_u32(msg, 0);
    put_u32(msg, 0);
    for (int r = 0; r < kRows; ++r) {
        msg += char(columns >> 8);
        msg += char(columns & 0xff);
        for (int c = 0; c < columns; ++c) {
            put_u32(msg, 8);
            put_u64(msg, value());
        }
        out.push_back(std::move(msg));
        msg.clear();
    }
    out.push_back(std::string("\xff\xff", 2));
    return out;
}

/// The same bytes cut into chunks of `chunk` bytes (a reader that batches CopyData payloads).
std::vector<std::string> rechunk(const std::vector<std::string>& messages, std::size_t chunk) {
    std::string all;
    for (const auto& m : messages) {
        all += m;
    }
    std::vector<std::string> out;
    for (std::size_t at = 0; at < all.size(); at += chunk) {
        out.push_back(all.substr(at, chunk));
    }
    return out;
}

std::uint64_t int8_value() {
    static std::mt19937_64 rng(42);
    return rng();
}

std::uint64_t timestamptz_value() {
    // Microseconds since 2000-01-01 within ±50 years, as a table of recent events holds.
    static std::mt19937_64 rng(7);
    static std::uniform_int_distribution<std::int64_t> d(-50LL * 365 * 86400 * 1000000,
                                                         50LL * 365 * 86400 * 1000000);
    return std::uint64_t(d(rng));
}

/// Parses every chunk and decodes every field; state.range(0) columns, state.range(1) chunk
/// bytes (0: one CopyData payload per row, as PostgreSQL sends them).
void run(benchmark::State& state, TypeRef type, std::uint64_t (*value)()) {
    const int columns = int(state.range(0));
    const auto messages = copy_messages(columns, value);
    const auto chunks =
        state.range(1) == 0 ? messages : rechunk(messages, std::size_t(state.range(1)));
    std::size_t bytes = 0;
    for (const auto& c : chunks) {
        bytes += c.size();
    }
    std::vector<std::optional<std::string_view>> fields;
    std::vector<Value> row(static_cast<std::size_t>(columns));
    for (auto _ : state) {
        BinaryCopyParser parser;
        std::int64_t decoded = 0;
        for (const auto& chunk : chunks) {
            parser.feed(chunk);
            while (parser.next(fields) == BinaryCopyParser::Status::RowReady) {
                for (std::size_t i = 0; i < fields.size(); ++i) {
                    row[i] = pgtide::schema::decode_binary(type, *fields[i]);
                }
                benchmark::DoNotOptimize(row.data());
                decoded += std::int64_t(fields.size());
            }
        }
        parser.finish();
        if (decoded != std::int64_t(kRows) * columns) {
            state.SkipWithError("wrong field count");
            break;
        }
    }
    state.SetItemsProcessed(state.iterations() * kRows * columns);
    state.SetBytesProcessed(state.iterations() * std::int64_t(bytes));
}

void BM_CopyInt8(benchmark::State& state) {
    run(state, TypeRef{pgtide::schema::oid::kInt8, 0}, int8_value);
}

void BM_CopyTimestamptz(benchmark::State& state) {
    run(state, TypeRef{pgtide::schema::oid::kTimestamptz, 0}, timestamptz_value);
}

/// decode_binary alone, on one field value after another (no COPY framing).
template <std::uint32_t Oid> void BM_DecodeOnly(benchmark::State& state) {
    std::vector<std::string> values;
    for (int i = 0; i < 4096; ++i) {
        std::string v;
        put_u64(v, Oid == pgtide::schema::oid::kInt8 ? int8_value() : timestamptz_value());
        values.push_back(std::move(v));
    }
    const TypeRef type{Oid, 0};
    for (auto _ : state) {
        for (const auto& v : values) {
            Value out = pgtide::schema::decode_binary(type, v);
            benchmark::DoNotOptimize(out);
        }
    }
    state.SetItemsProcessed(state.iterations() * std::int64_t(values.size()));
}

// Args: {columns per row, chunk bytes (0 = one CopyData per row)}.
void copy_args(benchmark::internal::Benchmark* b) {
    for (const int columns : {1, 8}) {
        for (const int chunk : {0, 65536}) {
            b->Args({columns, chunk});
        }
    }
    b->ArgNames({"cols", "chunk"});
}

BENCHMARK(BM_CopyInt8)->Apply(copy_args);
BENCHMARK(BM_CopyTimestamptz)->Apply(copy_args);
BENCHMARK(BM_DecodeOnly<pgtide::schema::oid::kInt8>)->Name("BM_DecodeOnlyInt8");
BENCHMARK(BM_DecodeOnly<pgtide::schema::oid::kTimestamptz>)->Name("BM_DecodeOnlyTimestamptz");

} // namespace

BENCHMARK_MAIN();
