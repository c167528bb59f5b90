// `pgtide check`: is the source ready and the destination writable? One verdict per line.
#pragma once

#include <string>
#include <vector>

#include "io/task.hpp"
#include "replicate/errors.hpp"
#include "src/config.hpp"

namespace pgtide::app {

/// One verdict: a passed check, a warning (pgtide will run, but read this), or a failure with
/// the fix and the exit code `run` would stop with.
struct CheckVerdict {
    enum class Status { Ok, Warn, Fail };
    std::string check; ///< what was checked: "wal_level", "publication app", "keys", ...
    Status status = Status::Ok;
    std::string message;
    std::string fix; ///< what to do; empty when nothing needs doing
    replicate::ExitCode code = replicate::ExitCode::SourceNotReady; ///< for failures
};

struct CheckReport {
    std::vector<CheckVerdict> verdicts;
};

/// Runs every check against the source and the destination, without changing either (no slot
/// is created, the destination file is not created or written). Failures are verdicts, not
/// exceptions; a source that cannot be reached is one failing verdict. Suspends.
io::Task<CheckReport> run_check(Config config);

/// One line per verdict ("ok   wal_level: ..." / "FAIL keys: ... fix: ...") and a summary line,
/// or (json) one JSON object {"ok":…,"exit_code":…,"checks":[{check,status,message,fix}]}.
std::string format_check(const CheckReport& report, bool json);

/// 0 when nothing failed; else 2 when a failure is the configuration's (or the destination
/// path's), 3 when the source is not ready, else the first failure's code (4 identity or
/// ownership mismatch, 5 slot lost).
int check_exit_code(const CheckReport& report);

} // namespace pgtide::app
