// Coordinator: bootstrap, then stream, with restarts.
#include "replicate/coordinator.hpp"

#include <algorithm>
#include <functional>
#include <random>
#include <set>

#include "io/async_scope.hpp"
#include "io/cancel.hpp"
#include "io/channel.hpp"
#include "io/http_server.hpp"
#include "io/log.hpp"
#include "io/pg_connection.hpp"
#include "io/timer.hpp"
#include "io/when_all.hpp"
#include "io/worker_thread.hpp"
#include "replicate/applier.hpp"
#include "replicate/errors.hpp"
#include "replicate/postgres_destination.hpp"
#include "replicate/replication_connection.hpp"
#include "replicate/session.hpp"
#include "replicate/slot_info.hpp"
#include "replicate/snapshot_copier.hpp"
#include "replicate/spool.hpp"
#include "replicate/sqlite_writer.hpp"
#include "replicate/stream.hpp"
#include "schema/codec.hpp"
#include "schema/pg_types.hpp"
#include "schema/sql_quote.hpp"

namespace pgtide::replicate {

namespace {

// Connects after a loss give up sooner than the first connect: the reconnect deadline and the
// backoff decide how long pgtide keeps trying.
constexpr std::chrono::milliseconds kReconnectTimeout{10000};

std::string random_token() {
    std::random_device rd;
    std::uniform_int_distribution<std::uint64_t> dist;
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)dist(rd),
                  (unsigned long long)dist(rd));
    return buf;
}

std::int64_t unix_ms_now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Source sessions of the pgtide process whose owner token is `owner`.
io::Task<std::int64_t> count_sessions(io::PgConnection& conn, std::string owner) {
    std::vector<std::optional<std::string>> params{"pgtide/" + owner};
    io::PgResult r = co_await conn.exec_params(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", std::move(params));
    co_return std::stoll(std::string(r.get(0, 0)));
}

io::Task<void> drop_slot(io::PgConnection& conn, std::string slot) {
    std::vector<std::optional<std::string>> params{slot};
    co_await conn.exec_params("SELECT pg_drop_replication_slot($1)", std::move(params));
}

std::string message_of(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& ex) {
        return ex.what();
    } catch (...) {
        return "unknown error";
    }
}

bool is_connection_loss(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const TransientError&) {
        return true;
    } catch (const io::PgError& pe) {
        return pe.connection_lost || pe.sqlstate.rfind("08", 0) == 0 || pe.sqlstate == "57P01" ||
               pe.sqlstate == "57P02" || pe.sqlstate == "57P03";
    } catch (...) {
        return false;
    }
}

/// A PostgreSQL destination whose session broke or cannot be opened.
bool is_destination_loss(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const DestinationError& de) {
        return de.kind() == DestinationErrorKind::Io || de.kind() == DestinationErrorKind::CantOpen;
    } catch (...) {
        return false;
    }
}

/// The PostgreSQL destination's connection was lost while streaming (`reason`): connects again,
/// backing off as for the source, until destination.reconnect_deadline. Returns the checkpoint
/// the destination holds, from which the stream goes on (the last commit may have gone through
/// without pgtide hearing of it), or nothing when a stop was requested meanwhile. A checkpoint
/// there that is not `ours` any more (owner or epoch) is a takeover: exit 4.
io::Task<std::optional<Checkpoint>>
reconnect_destination(PostgresDestination* dest, std::optional<std::chrono::milliseconds> deadline,
                      Metrics* metrics, const bool* stop_requested, Checkpoint ours,
                      std::string reason) {
    const auto lost_at = std::chrono::steady_clock::now();
    std::chrono::milliseconds backoff{100};
    std::mt19937_64 jitter(std::random_device{}());
    metrics->phase = Metrics::Phase::Reconnecting;
    metrics->destination_reconnects += 1;
    metrics->last_error_unix_s = unix_ms_now() / 1000;
    for (bool first = true;; first = false) {
        io::log_warn(first ? "lost the destination connection; reconnecting"
                           : "the destination is still unreachable; retrying",
                     {{"error", reason}, {"retry_in_ms", std::to_string(backoff.count())}});
        std::uniform_int_distribution<long> spread(0, backoff.count() / 2);
        co_await io::sleep_for(backoff + std::chrono::milliseconds(spread(jitter)));
        backoff = std::min(backoff * 2, std::chrono::milliseconds(10000));
        if (*stop_requested) {
            co_return std::nullopt;
        }
        try {
            co_await dest->reconnect();
            std::optional<Checkpoint> found = co_await dest->load_checkpoint(ours.slot_name);
            if (!found || found->owner != ours.owner || found->epoch != ours.epoch) {
                throw DefiniteError(ExitCode::Fenced,
                                    "the checkpoint of slot " + ours.slot_name +
                                        " in the destination changed while its connection was "
                                        "lost (another pgtide took over, or the destination was "
                                        "restored from a backup); stopping");
            }
            io::log_info("reconnected to the destination", {{"lsn", found->lsn.str()}});
            co_return found;
        } catch (const DestinationError& e) {
            if (e.kind() != DestinationErrorKind::Io &&
                e.kind() != DestinationErrorKind::CantOpen) {
                throw;
            }
            reason = e.what();
        }
        const auto out_of_reach = std::chrono::steady_clock::now() - lost_at;
        if (deadline && out_of_reach >= *deadline) {
            throw DefiniteError(
                ExitCode::Other,
                "the postgresql destination stayed unreachable for " +
                    std::to_string(
                        std::chrono::duration_cast<std::chrono::seconds>(out_of_reach).count()) +
                    " s, past destination.reconnect_deadline; last error: " + reason);
        }
    }
}

// A reconnect after a lost source connection, for the metrics.
void note_connection_loss(Metrics& metrics) {
    metrics.reconnects += 1;
    metrics.last_error_unix_s = unix_ms_now() / 1000;
}

// Closes the channel when the producer ends, however it ends, so the consumer never waits
// for work that will not come.
io::Task<void> produce_copy(SnapshotCopier* copier, io::Channel<ApplyWork>* channel) {
    std::exception_ptr error;
    try {
        co_await copier->run(*channel);
    } catch (...) {
        error = std::current_exception();
    }
    if (!error) {
        ApplyWork work(Finish{});
        co_await channel->send(std::move(work));
    }
    channel->close();
    if (error) {
        std::rethrow_exception(error);
    }
}

io::Task<void> produce_stream(Stream* stream, io::Channel<ApplyWork>* channel,
                              io::CancelSource* heartbeats) {
    std::exception_ptr error;
    try {
        co_await stream->run(*channel);
    } catch (...) {
        error = std::current_exception();
    }
    heartbeats->cancel();
    channel->close();
    if (error) {
        std::rethrow_exception(error);
    }
}

// Writes a non-transactional logical message every `interval`, on a connection of its own:
// its WAL position reaches the stream even when no published table changes, so the slot keeps
// moving while other tables fill the WAL. A failed heartbeat is logged, never fatal.
io::Task<void> heartbeat(std::string dsn, std::string application_name,
                         std::chrono::milliseconds interval, io::CancelToken token) {
    std::optional<io::PgConnection> conn;
    const std::string sql =
        std::string("SELECT pg_logical_emit_message(false, '") + kHeartbeatPrefix + "', '')";
    // A heartbeat stuck on a silent network must not hold up the end of the stream: closing
    // its connection ends a pending query at once.
    std::optional<io::PgConnection>* conn_ptr = &conn;
    std::function<void()> on_cancel = [conn_ptr]() {
        if (*conn_ptr) {
            (*conn_ptr)->close();
        }
    };
    io::CancelRegistration registration(token, std::move(on_cancel));
    try {
        for (;;) {
            co_await io::sleep_for(interval, token);
            std::exception_ptr error;
            try {
                if (!conn || !conn->is_open()) {
                    conn = co_await io::PgConnection::connect(
                        dsn, sql_connection_params(application_name), kReconnectTimeout / 2);
                }
                co_await conn->exec(sql);
            } catch (const io::Cancelled&) {
                throw;
            } catch (...) {
                error = std::current_exception();
            }
            if (error) {
                try {
                    std::rethrow_exception(error);
                } catch (const std::exception& e) {
                    io::log_warn("heartbeat failed", {{"error", e.what()}});
                }
                conn.reset();
            }
        }
    } catch (const io::Cancelled&) {
    }
}

// Runs `work`, then closes `channel`, however `work` ended, so that nobody waits on the channel
// for what will not come; rethrows the failure of `work`.
io::Task<void> closing(io::Task<void> work, io::Channel<ApplyWork>* channel) {
    std::exception_ptr error;
    try {
        co_await std::move(work);
    } catch (...) {
        error = std::current_exception();
    }
    channel->close();
    if (error) {
        std::rethrow_exception(error);
    }
}

// The applier's side: on failure, close the channel so a producer blocked on send returns.
io::Task<void> consume(Applier* applier, io::Channel<ApplyWork>* channel) {
    return closing(applier->run(*channel), channel);
}

// The published tables as the destination takes them. A PostgreSQL destination reads the
// source's text output back with the same types (no canonical values in between, so nothing is
// lost or reformatted) and keeps the source's schema (SQLite's default name folds it in).
std::vector<std::shared_ptr<const schema::Table>>
destination_tables(std::vector<SourceTable>& source_tables, bool source_text) {
    if (source_tables.empty()) {
        throw DefiniteError(ExitCode::SourceNotReady,
                            "the publications list no tables; add tables to them "
                            "(ALTER PUBLICATION ... ADD TABLE ...)");
    }
    for (auto& st : source_tables) {
        st.table.source_text = source_text;
        st.table.copy_binary =
            source_text &&
            std::all_of(st.columns.begin(), st.columns.end(),
                        [](const SourceColumn& c) { return schema::binary_portable(c.type_oid); });
        if (source_text &&
            st.table.target == schema::default_target_name(st.table.schema, st.table.name)) {
            st.table.target = st.table.schema + "." + st.table.name;
        }
    }
    std::vector<std::shared_ptr<const schema::Table>> tables;
    for (const auto& st : source_tables) {
        tables.push_back(std::make_shared<const schema::Table>(st.table));
        for (std::size_t c = 0; c < st.table.columns.size(); ++c) {
            const bool binary =
                st.table.copy_binary ||
                (!st.table.source_text && schema::has_binary_decoder(st.table.columns[c].type));
            io::log_debug(binary ? "column copied in binary" : "column copied as text",
                          {{"table", st.table.qualified()},
                           {"column", st.table.columns[c].name},
                           {"type", st.columns[c].type_sql}});
        }
    }
    return tables;
}

// The tables as the destination follows them: each column's type replaced by the one the
// destination recorded, so that the stream's first description of a table is compared with
// what the destination holds, and a type change made while pgtide was stopped is seen.
std::vector<std::shared_ptr<const schema::Table>>
as_followed(const std::vector<std::shared_ptr<const schema::Table>>& tables,
            const std::map<std::string, std::vector<schema::TableColumn>>& recorded) {
    std::vector<std::shared_ptr<const schema::Table>> out;
    for (const auto& t : tables) {
        const auto it = recorded.find(t->target);
        if (it == recorded.end()) {
            out.push_back(t);
            continue;
        }
        auto followed = std::make_shared<schema::Table>(*t);
        for (schema::TableColumn& c : followed->columns) {
            for (const schema::TableColumn& r : it->second) {
                if (r.name == c.name) {
                    c.type = r.type;
                    c.typmod = r.typmod;
                    c.type_sql = r.type_sql;
                    c.storage = schema::storage_class(r.type);
                }
            }
        }
        out.push_back(std::move(followed));
    }
    return out;
}

// Creates what the destination lacks of the tables (and, for PostgreSQL, the user types their
// columns use); columns missing from existing tables are added.
io::Task<void> create_destination_tables(Destination* dest, SourceCatalog* catalog,
                                         io::PgConnection* catalog_conn,
                                         std::vector<SourceTable> source_tables) {
    std::vector<schema::Table> plain_tables;
    for (const auto& st : source_tables) {
        plain_tables.push_back(st.table);
    }
    if (auto* postgres = dynamic_cast<PostgresDestination*>(dest)) {
        std::vector<UserType> types = co_await catalog->user_types(*catalog_conn, source_tables);
        co_await postgres->create_types(std::move(types));
    }
    co_await dest->create_tables(std::move(plain_tables));
}

// Whether every column of `tables` can be decoded from pgoutput's binary form.
bool all_binary(const std::vector<std::shared_ptr<const schema::Table>>& tables) {
    for (const auto& t : tables) {
        for (const auto& c : t->columns) {
            if (!schema::has_binary_decoder(c.type)) {
                io::log_info("streaming text values: a column has no binary decoder",
                             {{"table", t->qualified()}, {"column", c.name}});
                return false;
            }
        }
    }
    return true;
}

// The readers' settings of a copy (the epoch's, or a table's alone).
SnapshotOptions snapshot_options(const RunOptions& o, const std::string& application_name,
                                 const bool* stop_requested) {
    SnapshotOptions so;
    so.parallel_tables = o.parallel_tables;
    so.page_rows = o.page_rows;
    so.batch_rows = o.batch_rows;
    so.batch_bytes = o.batch_bytes;
    so.max_row_bytes = o.max_row_bytes;
    so.split_rows = o.split_rows;
    // Its tables have no key while copied, so the rows of a chunk cut short can be found and
    // removed before the copy goes on (PostgresDestination::discard_unfinished_chunks). SQLite
    // inserts fastest in key order, which keyset pages give it.
    so.read_chunks = !o.postgres_url.empty();
    so.chunk_rows = o.chunk_rows;
    so.application_name = application_name;
    so.stop_requested = stop_requested;
    return so;
}

// What following the publications' table list needs of the run.
struct PublicationFollower {
    const RunOptions* options = nullptr;
    Destination* dest = nullptr;
    SourceCatalog* catalog = nullptr;
    io::PgConnection* catalog_conn = nullptr;
    Applier* applier = nullptr;
    const bool* stop_requested = nullptr;
    std::string application_name;
    std::string owner;
    /// Copies run beside the next stream session (ConcurrentCopy) instead of before it.
    bool beside_stream = false;
};

// Tables whose copy runs beside the stream session: the name of the copy's temporary slot and
// what to copy.
struct CopyBeside {
    std::string slot;
    std::vector<SourceTable> tables;
};

// What follow_publications found: by source table, the version of every table copied alone in
// this epoch (the stream skips their changes below it), and a copy left to run beside the
// stream.
struct Followed {
    std::map<std::string, schema::Lsn> copied_at;
    std::optional<CopyBeside> beside;
};

// The columns to copy, read again once the copy's snapshot exists (as for an epoch's): a column
// added and written before the consistent point is in the snapshot, and the stream will not send
// those values again.
io::Task<void> read_columns_again(SourceCatalog* catalog, io::PgConnection* conn,
                                  const RunOptions* o, std::vector<SourceTable>* tables) {
    const std::vector<SourceTable> now =
        co_await catalog->published_tables(*conn, o->publications, o->tables);
    for (SourceTable& st : *tables) {
        const std::string name = st.table.qualified();
        const auto found = std::find_if(now.begin(), now.end(), [&name](const SourceTable& n) {
            return n.table.qualified() == name;
        });
        if (found != now.end()) {
            st = *found;
        }
    }
}

// Brings the destination's table list in line with the publications while the epoch streams
// (DESIGN §4 "Copy ranges"). A table they gained is copied alone, under the exported snapshot
// of a temporary slot of its own: emptied, copied with the slot's consistent LSN Cr as the
// version of its rows, then ready, while the checkpoint stays where it is; the stream then
// skips that table's changes committed below Cr (the copy holds them) and applies the others.
// The temporary slot goes with its connection, so a crash leaves nothing to clean; a table
// whose copy did not finish is copied again by the next run. A table they lost is forgotten
// (its state row goes, its destination table stays). With f.beside_stream the copy is left to
// run beside the next stream session (copy_beside_stream): the tables are recorded copying, and
// Followed::beside holds them and the copy's slot; only a copy that may go on from where a
// killed process cut it short (its copy_key) is still made here, before the stream.
io::Task<Followed> follow_publications(PublicationFollower f,
                                       std::vector<SourceTable> source_tables) {
    const Checkpoint& checkpoint = f.applier->checkpoint();
    const std::vector<TableProgress> states = co_await f.dest->table_states(checkpoint.slot_name);
    Followed followed;
    std::map<std::string, schema::Lsn>& copied_at = followed.copied_at;
    std::vector<std::string> left;
    for (const TableProgress& p : states) {
        const bool published =
            std::any_of(source_tables.begin(), source_tables.end(), [&p](const SourceTable& st) {
                return st.table.qualified() == p.source_table;
            });
        if (!published) {
            io::log_info("a table left the publications; its destination table is kept as it is",
                         {{"table", p.source_table}, {"target", p.target_table}});
            left.push_back(p.source_table);
        } else if (p.state == TableState::Ready && p.copy_lsn > checkpoint.consistent_lsn) {
            copied_at[p.source_table] = p.copy_lsn;
        }
    }
    co_await f.applier->forget_tables(std::move(left));

    // A table whose recorded source OID is not today's was dropped and created again under its
    // name: its destination rows are the old table's, so it is copied again.
    const auto recreated = [](const TableProgress& p, const SourceTable& st) {
        return p.source_oid != 0 && st.table.source_oid != 0 && p.source_oid != st.table.source_oid;
    };
    // A column dropped and added again under its name emptied it in every existing row, which
    // the stream never sends: copied again too.
    const auto column_again = [](const TableProgress& p, const SourceTable& st) {
        return column_added_again(p.source_columns, st.table.source_columns);
    };
    // A table whose publication membership shares nothing with the recorded one was taken out
    // of the publications and put back: the stream sent none of its changes in between.
    const auto came_back = [](const TableProgress& p, const SourceTable& st) {
        return !p.membership.empty() && !st.table.publication_membership.empty() &&
               !share_a_membership(p.membership, st.table.publication_membership);
    };
    std::vector<SourceTable> joined;
    std::vector<TableProgress> moved; // ready tables published through other catalog rows now
    for (const SourceTable& st : source_tables) {
        const std::string name = st.table.qualified();
        const auto state =
            std::find_if(states.begin(), states.end(), [&name](const TableProgress& p) {
                return p.source_table == name && p.state == TableState::Ready;
            });
        if (state == states.end() || recreated(*state, st) || came_back(*state, st) ||
            column_again(*state, st)) {
            joined.push_back(st);
            copied_at.erase(name);
        } else if (state->membership != st.table.publication_membership ||
                   state->source_columns != st.table.source_columns) {
            // Recorded as found, so that a column added since the copy is watched too.
            TableProgress p = *state;
            p.membership = st.table.publication_membership;
            p.source_columns = st.table.source_columns;
            moved.push_back(std::move(p));
        }
    }
    co_await f.applier->record_tables(std::move(moved));
    if (joined.empty()) {
        co_return followed;
    }
    const RunOptions& o = *f.options;
    // New to the destination: created as the source has them. The others exist; emptying them
    // for their copy brings their columns up to date (Destination::empty_tables).
    std::vector<SourceTable> fresh;
    for (const SourceTable& st : joined) {
        const std::string name = st.table.qualified();
        if (std::none_of(states.begin(), states.end(),
                         [&name](const TableProgress& p) { return p.source_table == name; })) {
            fresh.push_back(st);
        }
    }
    if (!fresh.empty()) {
        co_await create_destination_tables(f.dest, f.catalog, f.catalog_conn, std::move(fresh));
    }
    const std::string copy_slot = o.slot.substr(0, 40) + "_copy_" + f.owner.substr(0, 8);
    // The state row of a source table; nullptr when it has none.
    const auto state_row = [&states](const std::string& name) -> const TableProgress* {
        const auto found =
            std::find_if(states.begin(), states.end(),
                         [&name](const TableProgress& p) { return p.source_table == name; });
        return found == states.end() ? nullptr : &*found;
    };
    const auto log_copy_alone = [&](const SourceTable& st, bool beside_stream) {
        const std::string name = st.table.qualified();
        const TableProgress* state = state_row(name);
        const char* reason =
            state == nullptr                   ? "it joined the publications"
            : recreated(*state, st)            ? "it was dropped and created again"
            : came_back(*state, st)            ? "it left the publications and was added again"
            : column_again(*state, st)         ? "a column was dropped and added again"
            : state->state == TableState::Init ? "a copy was requested or had not started"
                                               : "its copy did not finish";
        io::log_info("copying a table alone",
                     {{"table", name},
                      {"reason", reason},
                      {"slot", copy_slot},
                      {"beside_the_stream", beside_stream ? "yes" : "no"}});
    };
    // A copy a killed process cut short, which may go on from its key (checked again below,
    // once the copy's snapshot shows the table's shape): copied before the stream, because the
    // stream must apply every change since that copy's version, which it cannot while it skips
    // the table beside a copy. Returns the table's state row when it may, else nullptr.
    const auto may_go_on = [&](const SourceTable& st) -> const TableProgress* {
        const TableProgress* state = state_row(st.table.qualified());
        const bool cut_short = state != nullptr && state->state == TableState::Copying &&
                               !state->copy_key.empty() && state->epoch == checkpoint.epoch &&
                               checkpoint.lsn <= state->copy_lsn && !recreated(*state, st) &&
                               !came_back(*state, st) && !column_again(*state, st);
        return cut_short ? state : nullptr;
    };
    std::vector<SourceTable> beside_tables;
    if (f.beside_stream) {
        const auto split = std::stable_partition(
            joined.begin(), joined.end(),
            [&may_go_on](const SourceTable& st) { return may_go_on(st) != nullptr; });
        beside_tables.assign(split, joined.end());
        joined.erase(split, joined.end());
    }
    for (const SourceTable& st : joined) {
        log_copy_alone(st, false);
    }
    for (const SourceTable& st : beside_tables) {
        log_copy_alone(st, true);
    }
    if (!beside_tables.empty()) {
        // Recorded copying now, so that a request to copy them (state init) is not taken again
        // while their copy starts; a process killed before StartCopy copies them again.
        std::vector<TableProgress> copying;
        for (const auto& t : destination_tables(beside_tables, !o.postgres_url.empty())) {
            copying.push_back(TableProgress{t->qualified(), t->target, TableState::Copying,
                                            checkpoint.epoch, checkpoint.lsn, 0, t->source_oid,
                                            t->publication_membership, t->source_columns});
        }
        co_await f.applier->record_tables(std::move(copying));
        CopyBeside beside;
        beside.slot = copy_slot;
        beside.tables = std::move(beside_tables);
        followed.beside = std::move(beside);
    }
    if (joined.empty()) {
        co_return followed;
    }
    ReplicationConnection copy_conn =
        co_await ReplicationConnection::connect(o.source_dsn, f.application_name);
    const CreatedSlot created = co_await copy_conn.create_slot(copy_slot, true);
    io::log_info("copy snapshot taken",
                 {{"slot", copy_slot}, {"lsn", created.consistent_lsn.str()}});
    co_await read_columns_again(f.catalog, f.catalog_conn, f.options, &joined);
    std::vector<std::shared_ptr<const schema::Table>> copies =
        destination_tables(joined, !o.postgres_url.empty());
    SnapshotCopier copier(o.source_dsn, created.snapshot_name, joined,
                          snapshot_options(o, f.application_name, f.stop_requested));
    // A copy cut short goes on from where it got (its copy_key) when the destination holds its
    // rows as it left them: same epoch, same source table of the same shape, and a checkpoint
    // not past that copy's version, so that the stream, which has applied none of the table's
    // changes since, applies them all (copied_at below is that older version).
    std::vector<TableProgress> resumed;
    for (std::size_t i = 0; i < joined.size(); ++i) {
        const SourceTable& st = joined[i];
        const std::string name = st.table.qualified();
        const TableProgress* state = may_go_on(st);
        if (state == nullptr) {
            continue;
        }
        std::optional<CopyKey> key = parse_copy_key(state->copy_key);
        const bool fits =
            key && key->shape == SnapshotCopier::copy_shape(st) && !key->ranges.empty() &&
            std::all_of(key->ranges.begin(), key->ranges.end(), [&st](const RangeProgress& r) {
                return r.after.empty() || r.after.size() == st.table.key_columns.size();
            });
        if (!fits) {
            io::log_info("copying a table again from the start: its table changed since its copy "
                         "was cut short",
                         {{"table", name}});
            continue;
        }
        const auto ranges_left = std::count_if(key->ranges.begin(), key->ranges.end(),
                                               [](const RangeProgress& r) { return !r.done; });
        io::log_info("resuming a table's copy where it was cut short",
                     {{"table", name},
                      {"rows_kept", std::to_string(state->rows_copied)},
                      {"ranges", std::to_string(key->ranges.size())},
                      {"ranges_left", std::to_string(ranges_left)},
                      {"copied_since", state->copy_lsn.str()}});
        copier.resume(i, std::move(*key));
        resumed.push_back(*state);
    }
    co_await f.applier->start_table_copies(std::move(copies), created.consistent_lsn, resumed);
    io::Channel<ApplyWork> channel(std::size_t(2 * std::max(1, o.parallel_tables)));
    co_await io::when_all(produce_copy(&copier, &channel), consume(f.applier, &channel));
    co_await f.applier->complete_table_copies();
    // How the copy read its tables: keyset pages, or unordered chunks (PostgreSQL destinations).
    io::log_info("tables copied alone",
                 {{"tables", std::to_string(joined.size())},
                  {"chunks_read", std::to_string(copier.stats().chunks_read)}});
    copy_conn.connection().close(); // the temporary slot goes with it
    for (const SourceTable& st : joined) {
        copied_at[st.table.qualified()] = created.consistent_lsn;
    }
    for (const TableProgress& p : resumed) {
        copied_at[p.source_table] = p.copy_lsn;
    }
    co_return followed;
}

// Hands the values of `lane` to the applier's channel `out` one at a time: the next is queued
// once the applier is done with the one before, so that what the main stream queued meanwhile
// goes first. Closes `lane` when `out` closes, so that the copier stops.
io::Task<void> pace_copy(io::Channel<ApplyWork>* lane, io::Channel<ApplyWork>* out) {
    for (;;) {
        std::optional<ApplyWork> work = co_await lane->recv();
        if (!work) {
            break;
        }
        if (!co_await out->send_and_wait(std::move(*work))) {
            lane->close();
            break;
        }
    }
}

// A copy beside the stream session (DESIGN §4 "Copy ranges"; docs/ARCHITECTURE.md "Copies
// beside the stream"). Its own replication connection creates the copy's temporary slot (which
// waits for the source's open transactions: the main stream does not), StartCopy empties the
// tables and records them copying at the slot's consistent LSN Cr, and every row is copied under
// the slot's snapshot at version Cr while the main stream applies every other table and skips
// these. Then the catch-up stream reads the slot from Cr and applies these tables' changes until
// it passes every transaction the main stream has begun, and hands them over (ConcurrentCopy);
// CatchUpDone makes them ready. A copy cut short (the session ends, a stop) leaves its tables not
// ready: the next session copies them again. A failure closes the applier's channel, so that the
// session ends with it. The end of the main stream (`session_over`) closes the copy's
// replication connection: creating the slot can wait on the source for as long as a
// transaction stays open there, and a stop must not.
//
// The copy's work reaches the applier's channel one value at a time: the next is queued once
// the applier is done with the one before (Channel::send_and_wait), so that a batch the main
// stream queues meanwhile waits behind one batch of the copy at most (issue 9). The copier's
// rows pass through `lane` and pace_copy; the catch-up paces its own batches (StreamOptions::
// catch_up), and starts once the applier is done with the last copied row, so every copied row
// is applied before the catch-up's first change, and its last batch before the hand-off.
io::Task<void> copy_beside_stream(CopyBeside copy, ConcurrentCopy* state, const RunOptions* o,
                                  std::string application_name, const bool* stop_requested,
                                  std::vector<std::shared_ptr<const schema::Table>> followed,
                                  bool binary, io::Channel<ApplyWork>* out,
                                  io::CancelToken session_over) {
    std::exception_ptr error;
    std::optional<ReplicationConnection> replication;
    std::optional<ReplicationConnection>* replication_ptr = &replication;
    std::function<void()> on_over = [replication_ptr]() {
        if (*replication_ptr) {
            (*replication_ptr)->connection().close();
        }
    };
    io::CancelRegistration registration(session_over, std::move(on_over));
    try {
        replication.emplace(co_await ReplicationConnection::connect(o->source_dsn, application_name,
                                                                    kReconnectTimeout));
        session_over.throw_if_cancelled(); // ended while connecting: close() found nothing
        const CreatedSlot created = co_await replication->create_slot(copy.slot, true);
        io::log_info("copy snapshot taken",
                     {{"slot", copy.slot}, {"lsn", created.consistent_lsn.str()}});
        io::PgConnection catalog_conn = co_await io::PgConnection::connect(
            o->source_dsn, sql_connection_params(application_name), kReconnectTimeout);
        SourceCatalog catalog;
        co_await read_columns_again(&catalog, &catalog_conn, o, &copy.tables);
        StartCopy start;
        start.tables = destination_tables(copy.tables, !o->postgres_url.empty());
        start.version = created.consistent_lsn;
        ApplyWork start_work(std::move(start));
        const bool started = co_await out->send_and_wait(std::move(start_work));
        if (started) {
            SnapshotCopier copier(o->source_dsn, created.snapshot_name, copy.tables,
                                  snapshot_options(*o, application_name, stop_requested));
            io::Channel<ApplyWork> lane(1);
            // The lane closes when the copier ends, so that pace_copy ends too.
            co_await io::when_all(closing(copier.run(lane), &lane), pace_copy(&lane, out));
        }
        if (started && !out->closed() && !*stop_requested) {
            co_await replication->start(copy.slot, created.consistent_lsn, o->publications, binary,
                                        false);
            io::log_info("catching up the tables copied beside the stream",
                         {{"slot", copy.slot}, {"lsn", created.consistent_lsn.str()}});
            StreamOptions so;
            so.concurrent = state;
            so.catch_up = true;
            so.tick = std::max(std::chrono::milliseconds(10), o->flush_interval / 2);
            const schema::Lsn durable = created.consistent_lsn;
            Stream stream(*replication, catalog_conn, catalog, std::move(followed),
                          created.consistent_lsn, &durable, stop_requested, so);
            co_await stream.run(*out);
            if (state->handoff && !out->closed()) {
                ApplyWork work(CatchUpDone{*state->handoff});
                co_await out->send(std::move(work));
            }
        }
    } catch (const StopRequested&) {
    } catch (...) {
        if (!session_over.cancelled()) {
            error = std::current_exception(); // else the session ended: nothing to report
        }
    }
    if (replication) {
        replication->connection().close(); // the temporary slot goes with it
    }
    if (error) {
        out->close(); // the session ends with the copy's failure
        std::rethrow_exception(error);
    }
}

// Takes a table that joined the publications while the main stream runs (Stream's
// TableJoiner): creates its destination table inside the stream's destination transaction
// (SchemaChange), adds it to the session's ConcurrentCopy, so that the main stream skips it,
// and starts its copy beside the stream in the session's scope. One copy per session: a later
// table, one the stream could not decode as it streams (binary values without a decoder), or
// one that needs user-defined types created in a PostgreSQL destination is left to the
// session's end and copied as before.
class SessionJoiner : public TableJoiner {
public:
    SessionJoiner(const RunOptions* options, SourceCatalog* catalog, io::PgConnection* catalog_conn,
                  ConcurrentCopy* concurrent, io::AsyncScope* scope, io::Channel<ApplyWork>* out,
                  io::CancelToken session_over, std::string application_name, std::string copy_slot,
                  const bool* stop_requested,
                  std::vector<std::shared_ptr<const schema::Table>> followed, bool binary)
        : options_(options), catalog_(catalog), catalog_conn_(catalog_conn),
          concurrent_(concurrent), scope_(scope), out_(out), session_over_(session_over),
          application_name_(std::move(application_name)), copy_slot_(std::move(copy_slot)),
          stop_requested_(stop_requested), followed_(std::move(followed)), binary_(binary) {}

    io::Task<std::shared_ptr<const schema::Table>> join(std::string name) override {
        if (copied_ || !concurrent_->tables.empty() || not_published_.contains(name)) {
            co_return nullptr;
        }
        const RunOptions& o = *options_;
        std::vector<SourceTable> now =
            co_await catalog_->published_tables(*catalog_conn_, o.publications, o.tables);
        const auto found = std::find_if(now.begin(), now.end(), [&name](const SourceTable& st) {
            return st.table.qualified() == name;
        });
        if (found == now.end()) {
            // A leaf partition published through its root, say: not a table of its own.
            not_published_.insert(name);
            co_return nullptr;
        }
        std::vector<SourceTable> joined{*found};
        const bool source_text = !o.postgres_url.empty();
        if (source_text && !(co_await catalog_->user_types(*catalog_conn_, joined)).empty()) {
            co_return nullptr;
        }
        std::vector<std::shared_ptr<const schema::Table>> tables =
            destination_tables(joined, source_text);
        if (binary_ && !all_binary(tables)) {
            co_return nullptr;
        }
        std::shared_ptr<const schema::Table> table = tables.at(0);
        io::log_info("a table joined the publications while streaming", {{"table", name}});
        io::log_info("copying a table alone", {{"table", name},
                                               {"reason", "it joined the publications"},
                                               {"slot", copy_slot_},
                                               {"beside_the_stream", "yes"},
                                               {"stream", "goes on"}});
        SchemaChange create{table}; // the destination table, inside the stream's transaction
        ApplyWork create_work(std::move(create));
        if (!co_await out_->send(std::move(create_work))) {
            co_return nullptr;
        }
        copied_ = true;
        concurrent_->tables.insert(name);
        std::vector<std::shared_ptr<const schema::Table>> followed = followed_;
        followed.push_back(table);
        CopyBeside copy;
        copy.slot = copy_slot_;
        copy.tables = std::move(joined);
        scope_->spawn(copy_beside_stream(std::move(copy), concurrent_, options_, application_name_,
                                         stop_requested_, std::move(followed), binary_, out_,
                                         session_over_));
        co_return table;
    }

    /// A copy was started in this session: the next session reads the table states again.
    bool copied() const { return copied_; }

private:
    const RunOptions* options_;
    SourceCatalog* catalog_;
    io::PgConnection* catalog_conn_;
    ConcurrentCopy* concurrent_;
    io::AsyncScope* scope_;
    io::Channel<ApplyWork>* out_;
    io::CancelToken session_over_;
    std::string application_name_;
    std::string copy_slot_;
    const bool* stop_requested_;
    std::vector<std::shared_ptr<const schema::Table>> followed_;
    bool binary_;
    bool copied_ = false;
    std::set<std::string> not_published_;
};

} // namespace

Coordinator::Coordinator(RunOptions options) : options_(std::move(options)) {}

io::Task<RunSummary> Coordinator::run() {
    if (!options_.metrics_listen) {
        co_return co_await run_phases();
    }
    std::optional<io::HttpServer> server;
    try {
        server.emplace(*options_.metrics_listen);
    } catch (const std::exception& e) {
        throw DefiniteError(ExitCode::Usage, std::string("metrics.listen: ") + e.what() +
                                                 "; choose another address or stop whatever "
                                                 "uses it");
    }
    const Metrics* metrics = &metrics_;
    auto render = [metrics]() {
        return render_metrics(*metrics, std::chrono::system_clock::now());
    };
    server->route("/metrics", kMetricsContentType, std::move(render));
    io::log_info("serving metrics", {{"address", *options_.metrics_listen}});
    io::AsyncScope scope;
    scope.spawn(server->serve());
    std::exception_ptr error;
    RunSummary summary;
    try {
        summary = co_await run_phases();
    } catch (...) {
        error = std::current_exception();
    }
    server->stop();
    co_await scope.join();
    if (error) {
        std::rethrow_exception(error);
    }
    co_return summary;
}

io::Task<RunSummary> Coordinator::run_phases() {
    const std::string owner = random_token();
    // Every session of this process carries the owner token, so that a newcomer can tell a
    // live owner from the lease of a dead one.
    const std::string application_name = "pgtide/" + owner;
    std::unique_ptr<Destination> dest;
    if (options_.postgres_url.empty()) {
        dest = co_await SqliteWriter::open(options_.sqlite_path, options_.deletes);
    } else {
        // A table copied through a connection of its own commits as often as the applier
        // commits a copy (ApplierOptions::copy_commit_rows).
        dest = co_await PostgresDestination::open(
            options_.postgres_url, application_name, options_.copy_commit_rows, options_.deletes,
            std::size_t(2 * std::max(1, options_.parallel_tables)));
    }

    // The source: catalog connection, target LSN for --once, published tables.
    io::PgConnection catalog_conn = co_await io::PgConnection::connect(
        options_.source_dsn, sql_connection_params(application_name));
    {
        // Settings and privileges that every later step needs: said plainly, before any slot.
        io::PgResult r = co_await catalog_conn.exec(
            "SELECT current_setting('wal_level'), r.rolsuper OR r.rolreplication, current_user "
            "FROM pg_roles r WHERE r.rolname = current_user");
        if (r.get(0, 0) != "logical") {
            throw DefiniteError(ExitCode::SourceNotReady,
                                "wal_level is " + std::string(r.get(0, 0)) +
                                    " on the source, not logical: ALTER SYSTEM SET wal_level = "
                                    "logical; then restart PostgreSQL (`pgtide check` lists "
                                    "every setting pgtide needs)");
        }
        if (r.get(0, 1) != "t") {
            throw DefiniteError(ExitCode::SourceNotReady,
                                "role " + std::string(r.get(0, 2)) +
                                    " has neither REPLICATION nor SUPERUSER on the source: ALTER "
                                    "ROLE " +
                                    schema::quote_identifier(std::string(r.get(0, 2))) +
                                    " REPLICATION");
        }
    }
    std::optional<schema::Lsn> target;
    if (options_.once) {
        io::PgResult r = co_await catalog_conn.exec("SELECT pg_current_wal_insert_lsn()::text");
        target = schema::Lsn::parse(r.get(0, 0));
        io::log_info("--once: streaming until the source's current WAL position",
                     {{"lsn", target->str()}});
    }
    SourceCatalog catalog;
    std::vector<SourceTable> source_tables =
        co_await catalog.published_tables(catalog_conn, options_.publications, options_.tables);
    const bool source_text = !options_.postgres_url.empty();
    std::vector<std::shared_ptr<const schema::Table>> tables =
        destination_tables(source_tables, source_text);

    const std::string slot = options_.slot;
    std::optional<Checkpoint> checkpoint = co_await dest->load_checkpoint(slot);

    ReplicationConnection replication =
        co_await ReplicationConnection::connect(options_.source_dsn, application_name);
    const SourceIdentity identity = co_await replication.identify_system();

    if (checkpoint) {
        if (checkpoint->system_identifier != identity.system_identifier ||
            checkpoint->database != identity.database) {
            throw DefiniteError(ExitCode::Fenced,
                                "the destination was filled from another source (system " +
                                    checkpoint->system_identifier + ", database " +
                                    checkpoint->database + ") but the source is system " +
                                    identity.system_identifier + ", database " + identity.database +
                                    "; use a new destination or fix source.dsn");
        }
        if (checkpoint->timeline != identity.timeline) {
            throw DefiniteError(ExitCode::Fenced,
                                "the source is on timeline " + std::to_string(identity.timeline) +
                                    " but the destination followed timeline " +
                                    std::to_string(checkpoint->timeline) +
                                    " (a restored backup or a promoted standby); start a new "
                                    "destination (a new file, or drop it and its slot)");
        }
        // A live owner keeps sessions named after its token on the source; the lease alone
        // could be the leftover of a killed process.
        if (checkpoint->owner != owner && checkpoint->lease_until_unix_ms > unix_ms_now()) {
            // Sessions of a process that was just killed linger until their backends notice:
            // give them 5 s.
            std::int64_t sessions = co_await count_sessions(catalog_conn, checkpoint->owner);
            for (int i = 0; i < 50 && sessions > 0; ++i) {
                co_await io::sleep_for(std::chrono::milliseconds(100));
                sessions = co_await count_sessions(catalog_conn, checkpoint->owner);
            }
            if (sessions > 0) {
                throw DefiniteError(
                    ExitCode::Fenced,
                    "another pgtide process holds this destination (lease for slot " + slot +
                        " valid for " +
                        std::to_string(checkpoint->lease_until_unix_ms - unix_ms_now()) +
                        " ms more, and its sessions are connected to the source); stop it first");
            }
        }
    } else {
        Checkpoint fresh;
        fresh.slot_name = slot;
        fresh.system_identifier = identity.system_identifier;
        fresh.timeline = identity.timeline;
        fresh.database = identity.database;
        fresh.owner = owner;
        fresh.lease_until_unix_ms = unix_ms_now() + 30000;
        fresh.updated_at_unix_ms = unix_ms_now();
        co_await dest->insert_checkpoint(fresh);
        checkpoint = fresh;
    }

    co_await create_destination_tables(dest.get(), &catalog, &catalog_conn, source_tables);

    ApplierOptions applier_options;
    applier_options.batch_rows = options_.apply_batch_rows;
    applier_options.copy_commit_rows = options_.copy_commit_rows;
    applier_options.flush_interval = options_.flush_interval;
    applier_options.idle_checkpoint_interval = options_.status_interval;
    applier_options.metrics = &metrics_;
    applier_options.copy_request_interval = options_.publication_poll_interval;
    Applier applier(*dest, *checkpoint, applier_options);
    applier.set_tables(tables);
    if (checkpoint->owner != owner) {
        co_await applier.take_over(owner);
    }

    // A walsender whose client just died may hold the slot for a moment: give it 5 s.
    std::optional<SlotInfo> slot_info = co_await read_slot_info(catalog_conn, slot);
    for (int i = 0; i < 50 && slot_info && slot_info->active; ++i) {
        co_await io::sleep_for(std::chrono::milliseconds(100));
        slot_info = co_await read_slot_info(catalog_conn, slot);
    }
    if (slot_info && slot_info->active) {
        throw DefiniteError(ExitCode::Fenced, "replication slot " + slot +
                                                  " is in use by another process; stop it first");
    }

    const bool need_snapshot = checkpoint->phase == Phase::Snapshot || options_.resnapshot;
    // A snapshot a killed process left unfinished resumes when its slot is still there, proven
    // ours and usable: the tables it copied whole stay, the epoch goes on streaming from its
    // consistent point, and every other table is copied alone (DESIGN §4 "Copy ranges") before
    // the stream starts. Otherwise the snapshot starts over in a new epoch.
    bool resume = false;
    if (need_snapshot && !options_.resnapshot && checkpoint->phase == Phase::Snapshot &&
        checkpoint->lsn.valid() && slot_info && slot_info->slot_type == "logical" &&
        slot_info->plugin == "pgoutput" && slot_info->database == identity.database &&
        slot_proven_ours(*checkpoint, *slot_info)) {
        resume = !(co_await check_slot_lost(catalog_conn, slot)).has_value();
    }
    if (resume) {
        std::vector<TableProgress> copied;
        for (const TableProgress& p : co_await dest->table_states(slot)) {
            if (p.epoch == checkpoint->epoch &&
                (p.state == TableState::Copied || p.state == TableState::Ready)) {
                copied.push_back(p);
            }
        }
        io::log_info("resuming the unfinished snapshot: the tables it copied stay, the others "
                     "are copied alone",
                     {{"epoch", std::to_string(checkpoint->epoch)},
                      {"slot", slot},
                      {"tables_copied", std::to_string(copied.size())}});
        co_await applier.resume_snapshot(std::move(copied));
    } else if (need_snapshot) {
        if (slot_info) {
            // Drop only a slot this destination proves it created for an unfinished epoch, or
            // one the user allowed us to replace.
            const bool proven =
                checkpoint->phase == Phase::Snapshot && slot_proven_ours(*checkpoint, *slot_info);
            const bool replaceable = slot_info->slot_type == "logical" &&
                                     slot_info->plugin == "pgoutput" &&
                                     slot_info->database == identity.database;
            if (!replaceable ||
                !(proven || options_.existing_slot_restart || options_.resnapshot)) {
                throw DefiniteError(
                    ExitCode::SourceNotReady,
                    "replication slot " + slot +
                        " already exists and this destination cannot prove it created it (" +
                        (replaceable ? std::string("its position differs from the recorded one")
                                     : "a " + slot_info->slot_type + " slot of plugin '" +
                                           slot_info->plugin + "' in database '" +
                                           slot_info->database + "'") +
                        "); drop it (SELECT pg_drop_replication_slot('" + slot +
                        "')), choose another source.slot, or set existing_slot = "
                        "\"restart_snapshot\"");
            }
            io::log_info("dropping the slot of an unfinished snapshot", {{"slot", slot}});
            co_await drop_slot(catalog_conn, slot);
        }
        // Each attempt is an epoch of its own: a lost connection abandons it (its slot is
        // ours, so it is dropped) and the next attempt starts over under a new slot. An
        // exported snapshot that expired is never reused.
        metrics_.phase = Metrics::Phase::Snapshot;
        for (int attempt = 1;; ++attempt) {
            std::exception_ptr error;
            const std::int64_t epoch = applier.checkpoint().epoch + 1;
            try {
                {
                    // Announced first: a crash right after CREATE_REPLICATION_SLOT leaves a slot
                    // the next run can prove its own (slot_proven_ours) and replace.
                    io::PgResult at =
                        co_await catalog_conn.exec("SELECT pg_current_wal_insert_lsn()::text");
                    const std::optional<schema::Lsn> from = schema::Lsn::parse(at.get(0, 0));
                    if (!from) {
                        throw InternalError("pg_current_wal_insert_lsn() returned " +
                                            std::string(at.get(0, 0)));
                    }
                    co_await applier.announce_slot(epoch, *from);
                }
                CreatedSlot created =
                    co_await replication.create_slot(slot, options_.temporary_slot);
                io::log_info("created replication slot", {{"slot", slot},
                                                          {"lsn", created.consistent_lsn.str()},
                                                          {"epoch", std::to_string(epoch)}});
                // The tables and columns to copy are read again now that the slot exists: a
                // column added and written between start-up and the consistent point is in the
                // exported snapshot, and the stream will never send those values. What is read
                // now holds everything the snapshot can see (a column added later reads as
                // NULL, or its default, in the snapshot's rows, as it does on the source).
                source_tables = co_await catalog.published_tables(
                    catalog_conn, options_.publications, options_.tables);
                tables = destination_tables(source_tables, source_text);
                co_await create_destination_tables(dest.get(), &catalog, &catalog_conn,
                                                   source_tables);
                applier.set_tables(tables);
                co_await applier.start_epoch(epoch, created.consistent_lsn);
                for (const auto& st : source_tables) {
                    metrics_.snapshot_estimates[st.table.qualified()] =
                        std::max<std::int64_t>(0, st.table.estimated_rows);
                }
                SnapshotCopier copier(
                    options_.source_dsn, created.snapshot_name, source_tables,
                    snapshot_options(options_, application_name, &stop_requested_));
                io::Channel<ApplyWork> channel(
                    std::size_t(2 * std::max(1, options_.parallel_tables)));
                co_await io::when_all(produce_copy(&copier, &channel), consume(&applier, &channel));
                co_await applier.complete_snapshot();
                io::log_info("snapshot complete",
                             {{"epoch", std::to_string(epoch)},
                              {"rows", std::to_string(applier.stats().rows_copied)},
                              {"chunks_read", std::to_string(copier.stats().chunks_read)}});
            } catch (...) {
                error = std::current_exception();
            }
            if (!error) {
                break;
            }
            co_await applier.abort();
            if (stop_requested_) {
                io::log_info("stopped during the snapshot; the next run resumes it (or starts a "
                             "new epoch if its slot is gone)");
                break;
            }
            if (!is_connection_loss(error) || attempt >= options_.max_attempts) {
                std::rethrow_exception(error);
            }
            try {
                std::rethrow_exception(error);
            } catch (const std::exception& e) {
                note_connection_loss(metrics_);
                io::log_warn("lost a source connection during the snapshot; starting a new epoch",
                             {{"epoch", std::to_string(epoch)},
                              {"attempt", std::to_string(attempt)},
                              {"error", e.what()}});
            }
            replication.connection().close();
            catalog_conn.close();
            co_await io::sleep_for(std::chrono::milliseconds(200 * attempt));
            catalog_conn = co_await io::PgConnection::connect(
                options_.source_dsn, sql_connection_params(application_name));
            replication =
                co_await ReplicationConnection::connect(options_.source_dsn, application_name);
            // The abandoned epoch's slot was created by this process: drop it once its
            // walsender has let go of it.
            std::optional<SlotInfo> abandoned = co_await read_slot_info(catalog_conn, slot);
            for (int i = 0; i < 50 && abandoned && abandoned->active; ++i) {
                co_await io::sleep_for(std::chrono::milliseconds(100));
                abandoned = co_await read_slot_info(catalog_conn, slot);
            }
            if (abandoned) {
                co_await drop_slot(catalog_conn, slot);
            }
        }
    } else if (std::optional<std::string> lost = co_await check_slot_lost(catalog_conn, slot)) {
        throw DefiniteError(ExitCode::SlotLost, *lost);
    }
    PublicationFollower follower;
    follower.options = &options_;
    follower.dest = dest.get();
    follower.catalog = &catalog;
    follower.catalog_conn = &catalog_conn;
    follower.applier = &applier;
    follower.stop_requested = &stop_requested_;
    follower.application_name = application_name;
    follower.owner = owner;
    // Tables copied alone in this epoch, by source name: the version of their copy.
    std::map<std::string, schema::Lsn> copied_at;
    // The publications gained a table since the destination was copied (found at start-up, or
    // by the stream): it is copied before the stream goes on.
    bool follow_tables = !need_snapshot || resume;
    std::string joined_table;          ///< named by the stream's PublicationChanged
    std::string recopy_table;          ///< named by CopyRequested
    std::set<std::string> left_tables; ///< not published now, changes still in the stream
    std::optional<CopyBeside> beside;  ///< a copy to run beside the next stream session

    // Streaming, with reconnects.
    if (target && !stop_requested_) {
        try {
            co_await catalog_conn.exec(std::string("SELECT pg_logical_emit_message(false, '") +
                                       kOnceMarkerPrefix + "', '')");
        } catch (const io::PgError& e) {
            io::log_warn("could not emit the --once marker; waiting for a keepalive instead",
                         {{"error", e.what()}});
        }
    }
    // Binary column values only when every published column can be decoded from them: a
    // type without a decoder would arrive in a form pgtide cannot read.
    bool binary = options_.stream_binary && !source_text && all_binary(tables);
    // Streamed in-progress transactions wait in files until they end. A failed run deletes
    // its files when the spool is destroyed; a clean one also removes the directory.
    std::optional<Spool> spool;
    if (options_.stream_large_transactions) {
        spool.emplace(Spool::directory_for(options_.spool_dir, slot), &metrics_);
        co_await spool->open();
    }
    std::chrono::milliseconds backoff{100};
    // Since when the source has been unreachable (unset while streaming works): the
    // reconnect deadline counts from the loss, not from the start of streaming.
    std::optional<std::chrono::steady_clock::time_point> unreachable_since;
    std::mt19937_64 jitter(std::random_device{}());
    bool connected = true;
    auto* postgres = dynamic_cast<PostgresDestination*>(dest.get());
    bool destination_lost = false; ///< stopped while reconnecting to the destination
    while (!stop_requested_) {
        std::exception_ptr error;
        bool copied_in_session = false; ///< a table that joined was copied beside this session
        try {
            if (!connected) {
                replication = co_await ReplicationConnection::connect(
                    options_.source_dsn, application_name, kReconnectTimeout);
                // The catalog session (types of columns the stream introduces) may have died
                // with the same cause.
                catalog_conn.close();
                catalog_conn = co_await io::PgConnection::connect(
                    options_.source_dsn, sql_connection_params(application_name),
                    kReconnectTimeout);
                connected = true;
                // The slot may have been dropped or invalidated while the source was out of
                // reach: that ends this epoch, it is no reason to retry.
                if (std::optional<std::string> lost =
                        co_await check_slot_lost(catalog_conn, slot)) {
                    throw DefiniteError(ExitCode::SlotLost, *lost);
                }
            }
            if (follow_tables) {
                if (!recopy_table.empty()) {
                    std::vector<std::string> one{recopy_table};
                    co_await dest->request_copies(slot, std::move(one));
                }
                if (!joined_table.empty() || !recopy_table.empty()) {
                    source_tables = co_await catalog.published_tables(
                        catalog_conn, options_.publications, options_.tables);
                    tables = destination_tables(source_tables, source_text);
                    if (!joined_table.empty() &&
                        std::none_of(tables.begin(), tables.end(), [&joined_table](const auto& t) {
                            return t->qualified() == joined_table;
                        })) {
                        // Published when that change was made, not now (it left, or was
                        // renamed): what remains to stream of it is skipped.
                        io::log_info("skipping the changes of a table that is not published "
                                     "any more",
                                     {{"table", joined_table}});
                        left_tables.insert(joined_table);
                    }
                    binary = binary && all_binary(tables);
                }
                // A table is copied beside the stream, which goes on; for --once, before the
                // stream starts.
                follower.beside_stream = !target;
                Followed followed = co_await follow_publications(follower, source_tables);
                copied_at = std::move(followed.copied_at);
                beside = std::move(followed.beside);
                if (!beside) {
                    applier.set_tables(tables);
                }
                follow_tables = false;
                joined_table.clear();
                recopy_table.clear();
            }
            const schema::Lsn start = applier.checkpoint().lsn;
            co_await replication.start(slot, start, options_.publications, binary,
                                       spool.has_value());
            io::log_info("streaming", {{"slot", slot}, {"lsn", start.str()}});
            metrics_.phase = Metrics::Phase::Streaming;
            backoff = std::chrono::milliseconds(100);
            unreachable_since.reset();
            StreamOptions stream_options;
            stream_options.status_interval = options_.status_interval;
            stream_options.receive_timeout = options_.receive_timeout;
            // Quiet periods this long end with a Tick, which commits a stale destination
            // transaction: lag stays within about 1.5 flush intervals.
            stream_options.tick =
                std::max(std::chrono::milliseconds(10), options_.flush_interval / 2);
            stream_options.stop_at = target;
            stream_options.metrics = &metrics_;
            stream_options.spool = spool ? &*spool : nullptr;
            stream_options.copied_at = copied_at;
            stream_options.left = left_tables;
            stream_options.publications = options_.publications;
            stream_options.publication_poll_interval = options_.publication_poll_interval;
            const std::map<std::string, std::vector<schema::TableColumn>> recorded =
                co_await dest->recorded_column_types();
            // The copies beside this session: the one follow_publications left, and one of a
            // table that joins while it streams (SessionJoiner; not for --once, which copies
            // before it streams).
            ConcurrentCopy concurrent;
            if (beside) {
                for (const SourceTable& st : beside->tables) {
                    concurrent.tables.insert(st.table.qualified());
                }
            }
            stream_options.concurrent = &concurrent;
            io::Channel<ApplyWork> channel(8);
            // Cancelled when the main stream ends: the heartbeats stop, the copies end.
            io::CancelSource heartbeats;
            io::AsyncScope copies;
            SessionJoiner joiner(&options_, &catalog, &catalog_conn, &concurrent, &copies, &channel,
                                 heartbeats.token(), application_name,
                                 options_.slot.substr(0, 40) + "_copy_" + owner.substr(0, 8),
                                 &stop_requested_, as_followed(tables, recorded), binary);
            if (!target) {
                stream_options.joiner = &joiner;
            }
            Stream stream(replication, catalog_conn, catalog, as_followed(tables, recorded), start,
                          &applier.checkpoint().lsn, &stop_requested_, stream_options);
            applier.set_stream(&replication);
            if (beside) {
                copies.spawn(copy_beside_stream(*beside, &concurrent, &options_, application_name,
                                                &stop_requested_, as_followed(tables, recorded),
                                                binary, &channel, heartbeats.token()));
            }
            std::exception_ptr session_error;
            try {
                co_await io::when_all(produce_stream(&stream, &channel, &heartbeats),
                                      consume(&applier, &channel),
                                      heartbeat(options_.source_dsn, application_name,
                                                options_.heartbeat_interval, heartbeats.token()));
            } catch (...) {
                session_error = std::current_exception();
            }
            heartbeats.cancel();
            try {
                co_await copies.join();
            } catch (...) {
                if (!session_error) {
                    session_error = std::current_exception();
                }
            }
            copied_in_session = joiner.copied();
            if (session_error) {
                std::rethrow_exception(session_error);
            }
            applier.set_stream(nullptr);
            co_await replication.stop();
            break;
        } catch (...) {
            error = std::current_exception();
        }
        if (beside || copied_in_session) {
            // Ready or not, the destination says (CatchUpDone commits with the main stream):
            // the next session reads the table states again, and copies what is not ready.
            beside.reset();
            follow_tables = true;
        }
        applier.set_stream(nullptr);
        std::exception_ptr abort_error;
        try {
            co_await applier.abort();
        } catch (...) {
            abort_error = std::current_exception();
        }
        if (abort_error) {
            // A destination whose connection is lost cannot roll back: what it had not
            // committed went with its session.
            if (postgres == nullptr || !is_destination_loss(abort_error)) {
                std::rethrow_exception(abort_error);
            }
            error = abort_error;
        }
        try {
            std::rethrow_exception(error);
        } catch (const PublicationChanged& e) {
            // Nothing of the transaction that met the table is applied: copy the table, then
            // stream again from the checkpoint.
            io::log_info("a table joined the publications while streaming", {{"table", e.table()}});
            joined_table = e.table();
            follow_tables = true;
            replication.connection().close();
            connected = false;
            continue;
        } catch (const CopyRequested& e) {
            io::log_info("a table is copied again", {{"table", e.table()}, {"reason", e.reason()}});
            recopy_table = e.table();
            follow_tables = true;
            replication.connection().close();
            connected = false;
            continue;
        } catch (const StopRequested&) {
            break; // while copying a table that joined: the next run copies it again
        } catch (...) {
        }
        if (postgres != nullptr && is_destination_loss(error)) {
            std::optional<Checkpoint> durable = co_await reconnect_destination(
                postgres, options_.destination_reconnect_deadline, &metrics_, &stop_requested_,
                applier.checkpoint(), message_of(error));
            if (!durable) {
                destination_lost = true; // nothing to release the lease with
                break;
            }
            applier.resume_from(std::move(*durable));
            // The stream goes on from the checkpoint, and the tables' states are read again:
            // what the lost session had not committed is gone.
            follow_tables = true;
            replication.connection().close();
            connected = false;
            continue;
        }
        if (!is_connection_loss(error)) {
            std::rethrow_exception(error);
        }
        const auto now = std::chrono::steady_clock::now();
        if (!unreachable_since) {
            unreachable_since = now;
        }
        const std::string reason = message_of(error);
        if (options_.reconnect_deadline &&
            now - *unreachable_since >= *options_.reconnect_deadline) {
            throw DefiniteError(ExitCode::Other,
                                "the source stayed unreachable for " +
                                    std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                       now - *unreachable_since)
                                                       .count()) +
                                    " s, past source.reconnect_deadline; last error: " + reason);
        }
        note_connection_loss(metrics_);
        metrics_.phase = Metrics::Phase::Reconnecting;
        io::log_warn(connected ? "lost the replication connection; reconnecting"
                               : "the source is still unreachable; retrying",
                     {{"error", reason}, {"retry_in_ms", std::to_string(backoff.count())}});
        replication.connection().close();
        connected = false;
        std::uniform_int_distribution<long> spread(0, backoff.count() / 2);
        co_await io::sleep_for(backoff + std::chrono::milliseconds(spread(jitter)));
        backoff = std::min(backoff * 2, std::chrono::milliseconds(10000));
        if (stop_requested_) {
            break;
        }
    }

    metrics_.phase = Metrics::Phase::Stopping;
    if (spool) {
        co_await spool->close();
    }
    if (!destination_lost) {
        co_await applier.release_lease();
    }
    RunSummary summary;
    summary.tables_copied = applier.stats().tables_copied;
    summary.rows_copied = applier.stats().rows_copied;
    summary.transactions = applier.stats().transactions;
    summary.changes = applier.stats().changes;
    summary.commits = metrics_.destination_commits; // the applier's, one per run
    summary.lsn = applier.checkpoint().lsn;
    summary.epoch = applier.checkpoint().epoch;
    co_await dest->close();
    co_return summary;
}

} // namespace pgtide::replicate
