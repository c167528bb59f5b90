// The session settings pgtide sets on every connection it opens (DESIGN §5 "Precise rules").
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace pgtide::replicate {

/// libpq `options` that pin every setting a value's text form depends on, and `jit=off`:
/// pgtide's queries are catalog reads, COPY reads that spend their time in output functions,
/// and merges of one batch, where compiling costs more than it saves (a planner's cost over
/// jit_above_cost made the row estimate of 1,000 tables take 0.45 s instead of 0.02 s).
inline constexpr const char* kSessionOptions =
    "-c DateStyle=ISO -c TimeZone=UTC -c IntervalStyle=iso_8601 -c extra_float_digits=1 "
    "-c bytea_output=hex -c lc_monetary=C -c idle_in_transaction_session_timeout=0 "
    "-c statement_timeout=0 -c jit=off";

/// Connection parameters for an ordinary SQL connection (catalog queries, snapshot readers).
/// `application_name` carries the process's owner token while it runs (see Coordinator).
inline std::vector<std::pair<std::string, std::string>>
sql_connection_params(const std::string& application_name = "pgtide") {
    return {{"options", kSessionOptions},
            {"client_encoding", "UTF8"},
            {"application_name", application_name}};
}

/// Connection parameters for a logical walsender connection.
inline std::vector<std::pair<std::string, std::string>>
replication_connection_params(const std::string& application_name = "pgtide") {
    return {{"options", kSessionOptions},
            {"client_encoding", "UTF8"},
            {"application_name", application_name},
            {"replication", "database"}};
}

} // namespace pgtide::replicate
