// `pgtide drop --yes`: drop the replication slot this destination proves it owns; keep the rest.
#pragma once

#include <string>

#include "io/task.hpp"
#include "src/config.hpp"

namespace pgtide::app {

/// What `drop` did, as lines for the user (stdout).
struct DropReport {
    bool dropped = false;
    std::string text;
};

/// Drops `source.slot` when the destination's checkpoint row names it, the source's system
/// identifier and database match the row, the slot is an inactive logical pgoutput slot of that
/// database, no pgtide holds the destination's lease, and the slot has not confirmed past the
/// checkpoint. Leaves the destination file untouched. "Nothing to drop" (no slot) is a success.
/// Throws replicate::DefiniteError: exit 2 when the destination file is missing, exit 4 when the
/// destination belongs to another source or database, the slot is active or in use, or cannot be
/// proven ours. Suspends.
io::Task<DropReport> run_drop(Config config);

} // namespace pgtide::app
