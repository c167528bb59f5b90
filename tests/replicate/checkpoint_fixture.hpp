// The checkpoint row the destination unit tests start from.
#pragma once

#include "replicate/checkpoint.hpp"
#include "schema/lsn.hpp"

namespace pgtide::replicate::testing {

/// Slot "pgtide" of epoch 1 in phase snapshot, owned by "owner-a", at 16/B374D848.
inline Checkpoint sample_checkpoint() {
    Checkpoint c;
    c.slot_name = "pgtide";
    c.system_identifier = "7312345678901234567";
    c.timeline = 1;
    c.database = "app";
    c.epoch = 1;
    c.phase = Phase::Snapshot;
    c.consistent_lsn = schema::Lsn(0x16B374D848);
    c.lsn = schema::Lsn(0x16B374D848);
    c.owner = "owner-a";
    c.lease_until_unix_ms = 1700000010000;
    c.updated_at_unix_ms = 1700000000000;
    return c;
}

} // namespace pgtide::replicate::testing
