// pgtide resync: records copy requests in the destination, and waits for the runner.
#include "src/resync_command.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

#include "io/log.hpp"
#include "io/timer.hpp"
#include "replicate/destination.hpp"
#include "replicate/errors.hpp"
#include "replicate/postgres_destination.hpp"
#include "replicate/sqlite_writer.hpp"
#include "src/command_support.hpp"

namespace pgtide::app {

namespace {

using replicate::DefiniteError;
using replicate::ExitCode;

io::Task<std::unique_ptr<replicate::Destination>> open_destination(Config config) {
    if (config.destination.is_postgresql()) {
        // resync copies nothing: it marks tables for the running process to copy.
        co_return co_await replicate::PostgresDestination::open(
            config.destination.url, "pgtide resync",
            config.snapshot.commit_rows_for(config.destination, config.apply));
    }
    co_return co_await replicate::SqliteWriter::open(config.destination.sqlite_path());
}

bool lease_live(const replicate::Checkpoint& c) {
    return !c.owner.empty() && c.lease_until_unix_ms > unix_ms_now();
}

} // namespace

io::Task<ResyncRequest> request_resync(Config config, std::vector<std::string> tables) {
    std::unique_ptr<replicate::Destination> dest = co_await open_destination(config);
    const std::string slot = config.source.slot;
    const std::optional<replicate::Checkpoint> checkpoint = co_await dest->load_checkpoint(slot);
    if (!checkpoint || checkpoint->phase != replicate::Phase::Streaming) {
        co_await dest->close();
        throw DefiniteError(ExitCode::Other, "nothing to resync: " + destination_name(config) +
                                                 " holds no finished snapshot for slot " + slot +
                                                 "; `pgtide run` copies every table first");
    }
    const std::vector<replicate::TableProgress> states = co_await dest->table_states(slot);
    for (const std::string& table : tables) {
        if (std::none_of(states.begin(), states.end(),
                         [&table](const auto& p) { return p.source_table == table; })) {
            std::string known;
            for (const auto& p : states) {
                known += (known.empty() ? "" : ", ") + p.source_table;
            }
            co_await dest->close();
            throw DefiniteError(ExitCode::Usage,
                                "table " + table + " is not replicated into " +
                                    destination_name(config) + " (slot " + slot +
                                    "); it follows: " + (known.empty() ? "nothing" : known));
        }
    }
    co_await dest->request_copies(slot, tables);
    co_await dest->close();
    for (const std::string& table : tables) {
        io::log_info("resync requested", {{"table", table}});
    }
    ResyncRequest out;
    out.runner = lease_live(*checkpoint);
    co_return out;
}

io::Task<void> wait_for_resync(Config config, std::vector<std::string> tables, bool until_copied) {
    std::unique_ptr<replicate::Destination> dest = co_await open_destination(config);
    const std::string slot = config.source.slot;
    for (;;) {
        const std::optional<replicate::Checkpoint> checkpoint =
            co_await dest->load_checkpoint(slot);
        const std::vector<replicate::TableProgress> states = co_await dest->table_states(slot);
        const bool done = std::all_of(tables.begin(), tables.end(), [&](const std::string& t) {
            return std::any_of(states.begin(), states.end(), [&](const auto& p) {
                return p.source_table == t &&
                       (until_copied ? p.state == replicate::TableState::Ready
                                     : p.state != replicate::TableState::Init);
            });
        });
        if (done) {
            break;
        }
        if (!checkpoint || !lease_live(*checkpoint)) {
            co_await dest->close();
            throw DefiniteError(ExitCode::Other,
                                "the pgtide that held " + destination_name(config) +
                                    " stopped before the copy was done; the request stays "
                                    "recorded: the next `pgtide run` (or `pgtide resync` "
                                    "again) copies the tables");
        }
        co_await io::sleep_for(std::chrono::milliseconds(200));
    }
    co_await dest->close();
}

} // namespace pgtide::app
