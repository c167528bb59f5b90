// `pgtide resync TABLE…`: a new, exact copy of tables the destination already follows (DESIGN §4
// "Copy ranges"). The request is the table's `_pgtide_tables` state set to init; the process
// that streams copies such a table alone under a temporary slot's snapshot and goes on.
#pragma once

#include <string>
#include <vector>

#include "io/task.hpp"
#include "src/config.hpp"

namespace pgtide::app {

/// What request_resync found.
struct ResyncRequest {
    /// Another pgtide holds the destination (a live lease): it takes the request. Otherwise the
    /// caller copies by itself (`pgtide run --once`).
    bool runner = false;
};

/// Records the request for each of `tables` (qualified, "public.orders") in the destination.
/// Suspends. Throws DefiniteError: Usage for a table the destination does not follow (naming
/// the ones it does), Other when the destination holds no finished snapshot for the slot.
io::Task<ResyncRequest> request_resync(Config config, std::vector<std::string> tables);

/// Waits until the running pgtide has taken the request of every table of `tables` (its state
/// is no longer init) or, with `until_copied`, copied it (ready again). Gives up with
/// DefiniteError(Other) when the runner's lease runs out first (it stopped): the request stays
/// recorded for the next run. Suspends.
io::Task<void> wait_for_resync(Config config, std::vector<std::string> tables, bool until_copied);

} // namespace pgtide::app
