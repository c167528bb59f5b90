// Captured protocol messages kept as hex text under tests/fixtures/.
#pragma once

#include <string>
#include <vector>

namespace pgtide::testing {

/// The messages of tests/fixtures/pgoutput/<name>: one per non-empty, non-`#` line, each line
/// the message's bytes in hex. A missing file fails the calling test (and returns nothing).
std::vector<std::string> load_pgoutput_fixture(const std::string& name);

} // namespace pgtide::testing
