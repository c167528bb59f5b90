// pgtide: the binary's entry point: command line, config, signals, exit codes.
#include <csignal>
#include <cstdio>
#include <iostream>

#include <unistd.h>

#include "io/cancel.hpp"
#include "io/event_loop.hpp"
#include "io/log.hpp"
#include "io/pg_connection.hpp"
#include "io/signals.hpp"
#include "io/sync_wait.hpp"
#include "io/when_all.hpp"
#include "replicate/coordinator.hpp"
#include "replicate/errors.hpp"
#include "src/bench_command.hpp"
#include "src/check_command.hpp"
#include "src/command_line.hpp"
#include "src/config.hpp"
#include "src/drop_command.hpp"
#include "src/progress.hpp"
#include "src/resync_command.hpp"
#include "src/status_command.hpp"

namespace {

using pgtide::replicate::ExitCode;

pgtide::replicate::RunOptions run_options(const pgtide::app::Config& c,
                                          const pgtide::app::CommandLine& cl) {
    pgtide::replicate::RunOptions o;
    o.source_dsn = c.source.dsn;
    o.publications = c.source.publications;
    o.slot = c.source.slot;
    o.temporary_slot = c.source.temporary_slot;
    o.existing_slot_restart =
        c.source.existing_slot == pgtide::app::SourceConfig::ExistingSlot::RestartSnapshot;
    o.reconnect_deadline = c.source.reconnect_deadline;
    if (c.destination.is_postgresql()) {
        o.postgres_url = c.destination.url;
        o.destination_reconnect_deadline = c.destination.reconnect_deadline;
    } else {
        o.sqlite_path = c.destination.sqlite_path();
    }
    o.deletes = c.destination.deletes == pgtide::app::DestinationConfig::Deletes::Soft
                    ? pgtide::replicate::Deletes::Soft
                    : pgtide::replicate::Deletes::Hard;
    o.parallel_tables = c.snapshot.parallel_tables;
    o.page_rows = c.snapshot.page_rows;
    o.batch_rows = c.snapshot.batch_rows;
    o.batch_bytes = c.snapshot.batch_bytes;
    o.max_row_bytes = c.snapshot.max_row_bytes;
    o.max_attempts = c.snapshot.max_attempts;
    o.split_rows = c.snapshot.split_rows_for(c.destination);
    o.chunk_rows = c.snapshot.chunk_rows;
    o.copy_commit_rows = c.snapshot.commit_rows_for(c.destination, c.apply);
    o.status_interval = c.stream.status_interval;
    o.receive_timeout = c.stream.receive_timeout;
    o.stream_binary = c.stream.binary;
    o.stream_large_transactions =
        c.stream.large_transactions == pgtide::app::StreamConfig::LargeTransactions::Stream;
    o.spool_dir = c.stream.spool_dir;
    o.heartbeat_interval = c.stream.heartbeat_interval;
    o.publication_poll_interval = c.stream.publication_poll_interval;
    o.flush_interval = c.apply.flush_interval;
    o.apply_batch_rows = c.apply.batch_rows;
    for (const auto& t : c.tables) {
        pgtide::replicate::TableOverride ov;
        const auto dot = t.name.find('.');
        ov.schema = dot == std::string::npos ? "public" : t.name.substr(0, dot);
        ov.name = dot == std::string::npos ? t.name : t.name.substr(dot + 1);
        ov.target = t.target;
        ov.key = t.key;
        o.tables.push_back(std::move(ov));
    }
    o.once = cl.once;
    o.resnapshot = cl.resnapshot;
    o.metrics_listen = c.metrics.listen;
    return o;
}

// Turns SIGINT/SIGTERM into a stop request at the next transaction boundary.
pgtide::io::Task<void> watch_signals(pgtide::replicate::Coordinator* coordinator,
                                     pgtide::io::CancelToken token) {
    try {
        std::vector<int> signals{SIGINT, SIGTERM};
        const int sig = co_await pgtide::io::wait_signal(std::move(signals), token);
        pgtide::io::log_info("signal received; finishing the current transaction",
                             {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
        coordinator->request_stop();
    } catch (const pgtide::io::Cancelled&) {
    }
}

pgtide::io::Task<pgtide::replicate::RunSummary> run_then_stop(pgtide::replicate::Coordinator* c,
                                                              pgtide::io::CancelSource* watcher) {
    std::exception_ptr error;
    pgtide::replicate::RunSummary summary;
    try {
        summary = co_await c->run();
    } catch (...) {
        error = std::current_exception();
    }
    watcher->cancel();
    if (error) {
        std::rethrow_exception(error);
    }
    co_return summary;
}

// The live progress display, only on a terminal with text logs.
pgtide::io::Task<void> progress_if(bool enabled, const pgtide::replicate::Metrics* metrics,
                                   pgtide::io::CancelToken token) {
    if (enabled) {
        co_await pgtide::app::show_progress(metrics, token);
    }
}

pgtide::io::Task<pgtide::replicate::RunSummary> run_command(pgtide::replicate::RunOptions options,
                                                            bool progress) {
    pgtide::replicate::Coordinator coordinator(std::move(options));
    pgtide::io::CancelSource watcher;
    auto [summary, ignored, shown] = co_await pgtide::io::when_all(
        run_then_stop(&coordinator, &watcher), watch_signals(&coordinator, watcher.token()),
        progress_if(progress, &coordinator.metrics(), watcher.token()));
    (void)ignored;
    (void)shown;
    co_return summary;
}

int run(const pgtide::app::CommandLine& cl, const pgtide::app::Config& config) {
    pgtide::io::block_signals({SIGINT, SIGTERM});
    std::signal(SIGPIPE, SIG_IGN);
    pgtide::io::EventLoop loop;
    const bool progress =
        ::isatty(2) == 1 && config.log.format == pgtide::app::LogConfig::Format::Text;
    const auto summary =
        pgtide::io::sync_wait(loop, run_command(run_options(config, cl), progress));
    if (cl.json) {
        std::printf("{\"tables_copied\":%lld,\"rows_copied\":%lld,\"transactions\":%lld,"
                    "\"changes\":%lld,\"commits\":%lld,\"lsn\":\"%s\",\"epoch\":%lld}\n",
                    (long long)summary.tables_copied, (long long)summary.rows_copied,
                    (long long)summary.transactions, (long long)summary.changes,
                    (long long)summary.commits, summary.lsn.str().c_str(),
                    (long long)summary.epoch);
    } else {
        std::printf("pgtide: copied %lld tables (%lld rows), applied %lld transactions (%lld "
                    "changes), reached LSN %s in epoch %lld\n",
                    (long long)summary.tables_copied, (long long)summary.rows_copied,
                    (long long)summary.transactions, (long long)summary.changes,
                    summary.lsn.str().c_str(), (long long)summary.epoch);
    }
    std::fflush(stdout);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    using namespace pgtide;
    try {
        const app::CommandLine cl = app::parse_command_line(argc, argv);
        if (cl.command == app::Command::Help) {
            std::cout << app::usage_text();
            return 0;
        }
        if (cl.command == app::Command::Version) {
            std::cout << "pgtide 0.1.0\n";
            return 0;
        }
        if (cl.command == app::Command::Bench) { // its own flags, no configuration
            return app::run_bench(app::parse_bench_args(cl.bench_args));
        }
        const app::Config config = app::build_config(cl);
        io::set_log_options(io::LogLevel(int(config.log.level)),
                            config.log.format == app::LogConfig::Format::Json
                                ? io::LogFormat::Json
                                : io::LogFormat::Text);
        switch (cl.command) {
        case app::Command::Run:
            return run(cl, config);
        case app::Command::Check: {
            io::EventLoop loop;
            const app::CheckReport report = io::sync_wait(loop, app::run_check(config));
            std::fputs(app::format_check(report, cl.json).c_str(), stdout);
            std::fflush(stdout);
            return app::check_exit_code(report);
        }
        case app::Command::Status: {
            io::EventLoop loop;
            const app::StatusReport report = io::sync_wait(loop, app::run_status(config));
            std::fputs(app::format_status(report, cl.json).c_str(), stdout);
            std::fflush(stdout);
            return app::status_exit_code(report);
        }
        case app::Command::Drop: {
            io::EventLoop loop;
            const app::DropReport report = io::sync_wait(loop, app::run_drop(config));
            std::fputs(report.text.c_str(), stdout);
            std::fflush(stdout);
            return int(ExitCode::Ok);
        }
        case app::Command::Resync: {
            std::string names;
            for (const auto& t : cl.tables) {
                names += (names.empty() ? "" : ", ") + t;
            }
            bool runner = false;
            {
                io::EventLoop loop;
                runner = io::sync_wait(loop, app::request_resync(config, cl.tables)).runner;
                if (runner) {
                    io::sync_wait(loop, app::wait_for_resync(config, cl.tables, cl.wait));
                }
            }
            if (runner) {
                std::printf(cl.wait ? "pgtide: copied again by the running pgtide: %s\n"
                                    : "pgtide: the running pgtide is copying again: %s\n",
                            names.c_str());
                std::fflush(stdout);
                return int(ExitCode::Ok);
            }
            // Nobody streams this destination: copy by itself, then stream up to now.
            app::CommandLine once = cl;
            once.once = true;
            return run(once, config);
        }
        default:
            io::log_error("this command is not implemented yet; see `pgtide --help`");
            return int(ExitCode::Usage);
        }
    } catch (const app::UsageError& e) {
        std::cerr << "pgtide: " << e.what() << "\n"
                  << "try `pgtide --help`\n";
        return int(ExitCode::Usage);
    } catch (const app::ConfigError& e) {
        io::log_error(e.what());
        return int(ExitCode::Usage);
    } catch (const replicate::DefiniteError& e) {
        io::log_error(e.what());
        return int(e.code());
    } catch (const io::PgError& e) {
        io::log_error(e.what(), {{"sqlstate", e.sqlstate}});
        return int(ExitCode::Other);
    } catch (const std::exception& e) {
        io::log_error(e.what());
        return int(ExitCode::Other);
    }
}
