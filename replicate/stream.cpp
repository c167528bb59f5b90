// Stream: pgoutput messages to ApplyWork.
#include "replicate/stream.hpp"

#include "io/log.hpp"
#include "replicate/errors.hpp"
#include "replicate/metrics.hpp"
#include "replicate/spool.hpp"
#include "schema/codec.hpp"

namespace pgtide::replicate {

namespace {

std::string source_name(const std::string& schema, const std::string& name) {
    return schema + "." + name;
}

// The messages of a stream block that its transaction's spool keeps: the changes, and the
// Relation messages in force for them. Type, Origin and transactional Message are of no use.
bool spooled_in_block(std::string_view payload) {
    if (payload.empty()) {
        return false;
    }
    switch (payload[0]) {
    case 'R':
    case 'I':
    case 'U':
    case 'D':
    case 'T':
        return true;
    default:
        return false;
    }
}

void note_source_position(Metrics* metrics, schema::Lsn wal_end) {
    if (metrics != nullptr) {
        metrics->source_wal_end = std::max(metrics->source_wal_end, wal_end.value());
    }
}

} // namespace

Stream::Stream(ReplicationConnection& replication, io::PgConnection& catalog_conn,
               SourceCatalog& catalog, std::vector<std::shared_ptr<const schema::Table>> tables,
               schema::Lsn start, const schema::Lsn* durable, const bool* stop_requested,
               StreamOptions options)
    : replication_(replication), catalog_conn_(catalog_conn), catalog_(catalog), start_(start),
      durable_(durable), stop_requested_(stop_requested), options_(options), received_(start),
      last_idle_(start), last_status_(std::chrono::steady_clock::now()), last_poll_(last_status_) {
    for (auto& t : tables) {
        memberships_[t->qualified()] = t->publication_membership;
        column_numbers_[t->qualified()] = t->source_columns;
        by_name_[t->qualified()] = t;
    }
}

io::Task<void> Stream::send_status(bool reply) {
    last_status_ = std::chrono::steady_clock::now();
    co_await replication_.send_status(std::max(received_, *durable_), *durable_, reply);
}

io::Task<void> Stream::run(io::Channel<ApplyWork>& out) {
    decoder_ = std::make_unique<PgOutputDecoder>(replication_.proto_version());
    // The catalog session shares the network with the stream: a query it sends into a silent
    // network must fail like the stream does, not hold the reader forever.
    catalog_conn_.set_command_timeout(options_.receive_timeout);
    if (options_.spool != nullptr) {
        // Transactions a previous session left open are resent from their start.
        co_await options_.spool->discard_all();
    }
    last_received_ = std::chrono::steady_clock::now();
    while (!done_) {
        if (out.closed()) {
            // The applier stopped (its error is what the caller reports): nothing to read for.
            co_return;
        }
        const bool pending = !batch_.empty() || batch_commit_;
        const auto deadline =
            std::chrono::steady_clock::now() + (pending ? options_.batch_linger : options_.tick);
        StreamRead got = co_await replication_.read(deadline);
        const auto now = std::chrono::steady_clock::now();
        if (std::holds_alternative<StreamTimeout>(got)) {
            // Silence: ask the walsender for a reply, and give up only if none comes. (The
            // reader may also have been held by backpressure, so silence alone proves nothing.)
            if (!pinged_ && now - last_received_ >= options_.receive_timeout / 2) {
                pinged_ = true;
                pinged_at_ = now;
                co_await send_status(true);
            } else if (pinged_ && now - pinged_at_ >= options_.receive_timeout / 2) {
                throw TransientError(
                    "no message from the source for " +
                    std::to_string(
                        std::chrono::duration_cast<std::chrono::seconds>(now - last_received_)
                            .count()) +
                    " s, not even an answer to a keepalive request: the connection is presumed "
                    "dead");
            }
        } else {
            last_received_ = now;
            pinged_ = false;
        }
        if (auto* x = std::get_if<XLogData>(&got)) {
            note_source_position(options_.metrics, x->wal_end);
            co_await on_message(x->payload, out);
        } else if (auto* k = std::get_if<PrimaryKeepalive>(&got)) {
            received_ = std::max(received_, k->wal_end);
            note_source_position(options_.metrics, k->wal_end);
            if (k->reply_requested) {
                co_await send_status(false);
            }
            if (!in_transaction_ && k->wal_end > last_idle_ && !options_.catch_up) {
                last_idle_ = k->wal_end;
                co_await flush_batch(out);
                ApplyWork work(SourceIdle{k->wal_end});
                co_await out.send(std::move(work));
            }
            if (!in_transaction_) {
                co_await maybe_hand_off(k->wal_end, out);
            }
            if (!in_transaction_ && options_.stop_at && k->wal_end >= *options_.stop_at) {
                reached_target_ = true;
                done_ = true;
            }
        } else if (std::holds_alternative<StreamTimeout>(got)) {
            if (pending) {
                co_await flush_batch(out); // the source paused: hand the batch over now
            } else if (!options_.catch_up) {
                ApplyWork work(Tick{});
                co_await out.send(std::move(work));
            }
            // A quiet source sends keepalives only every wal_sender_timeout / 2: the catch-up
            // asks for one, whose position may be where it hands off.
            if (options_.catch_up && !in_transaction_) {
                co_await send_status(true);
            }
        } else {
            throw TransientError("the source ended the replication stream");
        }
        if (!in_transaction_ && *stop_requested_) {
            done_ = true;
        }
        if (std::chrono::steady_clock::now() - last_status_ >= options_.status_interval) {
            co_await send_status(false);
        }
        if (!in_transaction_ && options_.publication_poll_interval.count() > 0 &&
            std::chrono::steady_clock::now() - last_poll_ >= options_.publication_poll_interval) {
            last_poll_ = std::chrono::steady_clock::now();
            co_await poll_publications();
        }
    }
    co_await flush_batch(out);
    if (!options_.catch_up) {
        ApplyWork work(Finish{});
        co_await out.send(std::move(work));
    }
}

io::Task<void> Stream::poll_publications() {
    const std::map<std::string, SourceCatalog::PublishedName> names =
        co_await SourceCatalog::published_names(catalog_conn_, options_.publications);
    for (const auto& [name, published] : names) {
        const std::string& membership = published.membership;
        if (!by_name_.contains(name) && !co_await try_join(name)) {
            throw PublicationChanged(name);
        }
        // Taken out of the publications and put back since the last look: the stream sent none
        // of the changes made in between, so only a copy brings the table up to date.
        std::string& known = memberships_[name];
        if (!known.empty() && !membership.empty() && !share_a_membership(known, membership)) {
            throw CopyRequested(name, "it left the publications and was added again");
        }
        known = membership;
        // A column dropped and added again under its name since the last look: the existing
        // rows lost their values without a change the stream sends (DESIGN §4 "Stream").
        std::string& numbers = column_numbers_[name];
        if (const auto again = column_added_again(numbers, published.source_columns)) {
            throw CopyRequested(name, "column \"" + *again +
                                          "\" was dropped and added again, which empties it in "
                                          "every existing row");
        }
        numbers = published.source_columns;
    }
}

io::Task<bool> Stream::try_join(std::string name) {
    if (options_.joiner == nullptr || options_.catch_up || options_.left.contains(name)) {
        co_return false;
    }
    std::shared_ptr<const schema::Table> joined = co_await options_.joiner->join(name);
    if (!joined) {
        co_return false;
    }
    memberships_[name] = joined->publication_membership;
    column_numbers_[name] = joined->source_columns;
    by_name_[name] = std::move(joined);
    co_return true;
}

std::shared_ptr<const schema::Table> Stream::table_for(std::uint32_t relation_oid) const {
    const auto it = by_oid_.find(relation_oid);
    if (it == by_oid_.end()) {
        if (const auto unknown = unpublished_.find(relation_oid); unknown != unpublished_.end()) {
            // The catch-up applies the copied tables only: whatever else joined is the main
            // stream's to notice.
            if (options_.left.contains(unknown->second) || options_.catch_up) {
                return nullptr;
            }
            throw PublicationChanged(unknown->second);
        }
        throw InternalError("pgoutput sent a change for relation " + std::to_string(relation_oid) +
                            " before its Relation message");
    }
    return it->second;
}

io::Task<void> Stream::on_relation(pgoutput::Relation rel) {
    // Only the catalog look-ups (and the joiner) suspend; building the table is a plain
    // function (GCC 12 miscounted a shared_ptr local of this coroutine, which ASan caught as a
    // use after free).
    if (std::string name = source_name(rel.schema, rel.name); !by_name_.contains(name)) {
        // A table that joined the publications: taken beside the stream, it is described now
        // (its changes are skipped until its catch-up hands it over).
        co_await try_join(std::move(name));
    }
    std::vector<schema::TypeRef> types;
    types.reserve(rel.columns.size());
    for (const auto& rc : rel.columns) {
        types.push_back(co_await catalog_.resolve(catalog_conn_, rc.type_oid));
    }
    // Column types as SQL: what a PostgreSQL destination declares, and what a message about a
    // type change names (cached by the catalog).
    std::vector<std::string> type_sql;
    const auto known = by_name_.find(source_name(rel.schema, rel.name));
    if (known != by_name_.end()) {
        for (const auto& rc : rel.columns) {
            type_sql.push_back(
                co_await catalog_.format_type(catalog_conn_, rc.type_oid, rc.typmod));
        }
    }
    // What rows older than a column hold (ADD COLUMN ... DEFAULT), read now: PostgreSQL keeps
    // a column's missing value until the table is rewritten. Only a column the description
    // lacks needs them (a destination adds it with that default and storage): a description
    // of the same columns, the first one of every table after each connect, keeps what the
    // table's description says, without two catalog round trips per table.
    std::map<std::string, std::string> missing;
    std::map<std::string, std::string> storage; // for a PostgreSQL destination's new columns
    if (known != by_name_.end()) {
        const auto& columns = known->second->columns;
        const bool adds_a_column = std::any_of(
            rel.columns.begin(), rel.columns.end(), [&](const pgoutput::RelationColumn& rc) {
                return std::none_of(
                    columns.begin(), columns.end(),
                    [&](const schema::TableColumn& c) { return c.name == rc.name; });
            });
        if (adds_a_column) {
            missing = co_await catalog_.missing_values(catalog_conn_, rel.oid);
            if (known->second->source_text) { // only a PostgreSQL destination declares storage
                storage = co_await catalog_.column_storage(catalog_conn_, rel.oid);
            }
        } else {
            for (const schema::TableColumn& c : columns) {
                if (c.missing_text) {
                    missing.emplace(c.name, *c.missing_text);
                }
                if (!c.pg_storage.empty()) {
                    storage.emplace(c.name, c.pg_storage);
                }
            }
        }
    }
    install_relation(rel, types, type_sql, missing, storage);
}

void Stream::install_relation(const pgoutput::Relation& rel,
                              const std::vector<schema::TypeRef>& types,
                              const std::vector<std::string>& type_sql,
                              const std::map<std::string, std::string>& missing,
                              const std::map<std::string, std::string>& storage) {
    const std::string name = source_name(rel.schema, rel.name);
    if (const auto before = by_oid_.find(rel.oid);
        before != by_oid_.end() && before->second->qualified() != name) {
        throw DefiniteError(ExitCode::Other, "table " + before->second->qualified() +
                                                 " was renamed to " + name +
                                                 " on the source; pgtide cannot follow a "
                                                 "rename: start it again to copy the table "
                                                 "under its new name (the destination table of "
                                                 "the old name stays as it is)");
    }
    const auto known = by_name_.find(name);
    // Described for a transaction that the table's copy already holds (its changes are
    // skipped): what the description says of columns and types is history, not news for the
    // destination, which holds the copy. Its layout still decodes the changes that follow until
    // pgoutput describes the table again, some of which may come after the copy.
    const bool history = known != by_name_.end() && in_copy(known->second.get());
    if (known == by_name_.end()) {
        // Not one of ours. With publish_via_partition_root, pgoutput describes the leaf
        // partition too, after the root its changes are published as: only a change of such
        // a relation is an error (table_for).
        by_oid_.erase(rel.oid);
        unpublished_[rel.oid] = name;
        return;
    }
    // Another relation under a name the destination holds: the table was dropped and created
    // again, and its destination rows are the old table's. The coordinator copies it again
    // (follow_publications compares the OIDs); nothing of this transaction is applied.
    if (!history && known->second->source_oid != 0 && rel.oid != known->second->source_oid) {
        throw PublicationChanged(name);
    }
    unpublished_.erase(rel.oid);
    const schema::Table& old = *known->second;
    auto table = std::make_shared<schema::Table>();
    table->schema = old.schema;
    table->name = old.name;
    table->target = old.target;
    table->source_text = old.source_text;
    table->source_oid = old.source_oid;
    table->publication_membership = old.publication_membership;
    table->source_columns = old.source_columns;
    bool changed = rel.columns.size() != old.columns.size();
    for (std::size_t i = 0; i < rel.columns.size(); ++i) {
        const auto& rc = rel.columns[i];
        const schema::TableColumn* prev = nullptr;
        for (const auto& c : old.columns) {
            if (c.name == rc.name) {
                prev = &c;
            }
        }
        schema::TableColumn col;
        col.name = rc.name;
        col.typmod = rc.typmod;
        col.type = types[i];
        col.storage = schema::storage_class(col.type);
        col.type_sql = i < type_sql.size() ? type_sql[i] : std::string();
        col.key = prev != nullptr && prev->key;
        if (const auto m = missing.find(rc.name); m != missing.end()) {
            col.missing_text = m->second;
        }
        if (const auto st = storage.find(rc.name); st != storage.end()) {
            col.pg_storage = st->second;
        }
        const bool retyped =
            prev != nullptr && (!(prev->type == col.type) || prev->typmod != col.typmod);
        // SQLite declares storage classes: a column cannot change its own, even in a new copy.
        if (retyped && !history && prev->storage != col.storage && !table->source_text) {
            throw DefiniteError(
                ExitCode::Other,
                "column \"" + rc.name + "\" of " + name +
                    " changed type on the source to one stored as " +
                    schema::storage_class_name(col.storage) + " (was " +
                    schema::storage_class_name(prev->storage) +
                    "); the destination cannot follow: re-copy with `pgtide run --resnapshot`");
        }
        // The source rewrote the existing rows, which the stream never sends again: the table
        // is copied again, alone (DESIGN §4 "Copy ranges"), nothing of this transaction applied.
        if (retyped && !history && !schema::type_change_keeps_values(*prev, col)) {
            throw CopyRequested(
                name, "column \"" + rc.name + "\" changed type (" +
                          (prev->type_sql.empty() ? std::string("?") : prev->type_sql) + " to " +
                          (col.type_sql.empty() ? std::string("?") : col.type_sql) +
                          "), which can rewrite the values of existing rows");
        }
        if (prev == nullptr || !(prev->type == col.type) || prev->typmod != col.typmod ||
            i >= old.columns.size() || old.columns[i].name != rc.name) {
            changed = true;
        }
        table->columns.push_back(std::move(col));
    }
    for (auto k : old.key_columns) {
        const auto& key_name = old.columns[k].name;
        std::size_t found = table->columns.size();
        for (std::size_t i = 0; i < table->columns.size(); ++i) {
            if (table->columns[i].name == key_name) {
                found = i;
            }
        }
        if (found == table->columns.size()) {
            throw DefiniteError(ExitCode::Other, "key column \"" + key_name + "\" of " + name +
                                                     " is no longer published; stopping");
        }
        table->columns[found].key = true;
        table->key_columns.push_back(found);
    }
    by_oid_[rel.oid] = table;
    if (changed && !history) {
        by_name_[name] = table;
        pending_schema_change_ = std::move(table);
    }
}

schema::Row Stream::decode_tuple(const schema::Table& table,
                                 const pgoutput::TupleData& tuple) const {
    if (tuple.columns.size() != table.columns.size()) {
        throw InternalError("pgoutput tuple of " + table.qualified() + " has " +
                            std::to_string(tuple.columns.size()) + " columns, Relation said " +
                            std::to_string(table.columns.size()));
    }
    schema::Row row;
    row.reserve(tuple.columns.size());
    for (std::size_t i = 0; i < tuple.columns.size(); ++i) {
        const auto& c = tuple.columns[i];
        try {
            switch (c.kind) {
            case pgoutput::TupleColumn::Kind::Null:
                row.emplace_back(schema::Null{});
                break;
            case pgoutput::TupleColumn::Kind::Unchanged:
                row.emplace_back(schema::UnchangedToast{});
                break;
            case pgoutput::TupleColumn::Kind::Text:
                if (table.source_text) {
                    row.emplace_back(std::string(c.data));
                } else {
                    row.push_back(schema::decode_text(table.columns[i].type, c.data));
                }
                break;
            case pgoutput::TupleColumn::Kind::Binary:
                row.push_back(schema::decode_binary(table.columns[i].type, c.data));
                break;
            }
        } catch (const schema::DecodeError& e) {
            throw DefiniteError(ExitCode::Other,
                                std::string(e.what()) + " in column \"" + table.columns[i].name +
                                    "\" of " + table.qualified() + " at LSN " + version_.str());
        }
    }
    return row;
}

schema::Row Stream::key_of(const schema::Table& table, const schema::Row& row) const {
    schema::Row key;
    key.reserve(table.key_columns.size());
    for (auto k : table.key_columns) {
        key.push_back(row[k]);
    }
    return key;
}

io::Task<void> Stream::flush_batch(io::Channel<ApplyWork>& out) {
    if (batch_.empty() && !batch_commit_) {
        co_return;
    }
    ChangeBatch b{std::move(batch_), batch_commit_, batch_transactions_};
    if (options_.catch_up) {
        // Positions are the main stream's: the catch-up's batches carry changes only.
        b.commit.reset();
        b.transactions = 0;
        b.catch_up = true;
    }
    handed_inside_transaction_ = !b.commit && !b.catch_up;
    batch_.clear();
    batch_commit_.reset();
    batch_transactions_ = 0;
    ApplyWork work(std::move(b));
    co_await hand_over(out, std::move(work));
}

io::Task<void> Stream::hand_over(io::Channel<ApplyWork>& out, ApplyWork work) {
    if (options_.catch_up) {
        co_await out.send_and_wait(std::move(work));
    } else {
        co_await out.send(std::move(work));
    }
}

bool Stream::in_copy(const schema::Table* table) const {
    if (table == nullptr) {
        return true; // a table that left the publications
    }
    if (const ConcurrentCopy* c = options_.concurrent) {
        const bool copied = c->tables.contains(table->qualified());
        if (options_.catch_up) {
            return !copied;
        }
        if (copied && (!c->handoff || version_ < *c->handoff)) {
            return true;
        }
    }
    if (options_.copied_at.empty()) {
        return false;
    }
    const auto it = options_.copied_at.find(table->qualified());
    return it != options_.copied_at.end() && version_ < it->second;
}

void Stream::note_begun() {
    if (options_.concurrent != nullptr && !options_.catch_up) {
        options_.concurrent->main_begun = std::max(options_.concurrent->main_begun, version_);
    }
}

io::Task<void> Stream::maybe_hand_off(schema::Lsn position, io::Channel<ApplyWork>& out) {
    ConcurrentCopy* c = options_.concurrent;
    if (!options_.catch_up || c == nullptr || done_ || !(c->main_begun < position)) {
        co_return;
    }
    // What the catch-up holds goes first; sending may suspend while the main stream begins
    // another transaction, so the test is made again after it, with nothing in between.
    co_await flush_batch(out);
    if (c->main_begun < position && !out.closed()) {
        c->handoff = position;
        done_ = true;
    }
}

// Not a coroutine, on purpose: GCC 12 mis-destroys temporaries (the shared table pointers of
// braced Change temporaries) in coroutine bodies, which ASan caught as a use after free.
bool Stream::collect_change(const PgOutputMessage& msg) {
    if (auto* ins = std::get_if<pgoutput::Insert>(&msg)) {
        auto table = table_for(ins->relation_oid);
        if (in_copy(table.get())) {
            return true;
        }
        batch_.push_back(
            Change{Change::Kind::Upsert, table, decode_tuple(*table, ins->new_tuple), version_});
    } else if (auto* up = std::get_if<pgoutput::Update>(&msg)) {
        auto table = table_for(up->relation_oid);
        if (in_copy(table.get())) {
            return true;
        }
        schema::Row row = decode_tuple(*table, up->new_tuple);
        if (up->old_tuple) {
            const schema::Row old_row = decode_tuple(*table, *up->old_tuple);
            if (up->old_kind == 'O') {
                // REPLICA IDENTITY FULL: the old row is whole (PostgreSQL inlines its TOAST
                // values), so a column sent as unchanged TOAST has its value there. Without
                // it, a key change would leave nothing to fill that column at the new key.
                for (std::size_t i = 0; i < row.size() && i < old_row.size(); ++i) {
                    if (std::holds_alternative<schema::UnchangedToast>(row[i]) &&
                        !std::holds_alternative<schema::UnchangedToast>(old_row[i])) {
                        row[i] = old_row[i];
                    }
                }
            }
            // The key may have changed: a delete of the old key, then an upsert of the new.
            // Columns left UnchangedToast are nowhere in the WAL: the upsert takes them from the
            // old key's row, so it goes first (changes of different keys may be reordered).
            schema::Row old_key = key_of(*table, old_row);
            if (old_key != key_of(*table, row)) {
                bool unchanged = false;
                for (const auto& v : row) {
                    unchanged = unchanged || std::holds_alternative<schema::UnchangedToast>(v);
                }
                if (unchanged) {
                    Change moved{Change::Kind::Upsert, table, std::move(row), version_};
                    moved.moved_from = old_key;
                    batch_.push_back(std::move(moved));
                    batch_.push_back(
                        Change{Change::Kind::Delete, table, std::move(old_key), version_});
                    return true;
                }
                batch_.push_back(Change{Change::Kind::Delete, table, std::move(old_key), version_});
            }
        }
        batch_.push_back(Change{Change::Kind::Upsert, table, std::move(row), version_});
    } else if (auto* del = std::get_if<pgoutput::Delete>(&msg)) {
        auto table = table_for(del->relation_oid);
        if (in_copy(table.get())) {
            return true;
        }
        batch_.push_back(Change{Change::Kind::Delete, table,
                                key_of(*table, decode_tuple(*table, del->old_tuple)), version_});
    } else if (auto* tr = std::get_if<pgoutput::Truncate>(&msg)) {
        for (auto oid : tr->relation_oids) {
            auto table = table_for(oid);
            if (!in_copy(table.get())) {
                batch_.push_back(Change{Change::Kind::Truncate, table, {}, version_});
            }
        }
    } else {
        return false;
    }
    return true;
}

io::Task<void> Stream::follow_relation(pgoutput::Relation rel, io::Channel<ApplyWork>& out) {
    co_await on_relation(std::move(rel));
    if (pending_schema_change_) {
        co_await flush_batch(out);
        // Named, not a braced temporary inside co_await: GCC 12 released the table's
        // shared_ptr once too often there (ASan: use after free of the table).
        SchemaChange change;
        change.table = std::move(pending_schema_change_);
        ApplyWork work(std::move(change));
        co_await hand_over(out, std::move(work));
    }
}

io::Task<void> Stream::on_stream_start(pgoutput::StreamStart start) {
    if (options_.spool == nullptr) {
        throw InternalError("pgoutput streamed transaction " + std::to_string(start.xid) +
                            " although streaming was not requested");
    }
    if (in_transaction_) {
        throw InternalError("pgoutput Stream Start inside an open transaction");
    }
    if (!start.first_segment && !options_.spool->holds(start.xid)) {
        throw InternalError("pgoutput continued streamed transaction " + std::to_string(start.xid) +
                            ", whose first segment never came");
    }
    co_await options_.spool->start_block(start.xid, start.first_segment);
}

io::Task<void> Stream::on_stream_abort(pgoutput::StreamAbort abort) {
    if (options_.spool == nullptr) {
        // PostgreSQL 18 sends Stream Abort for a (sub)transaction it never streamed, even with
        // streaming off: it marks a transaction "streamed" when it discards the changes of one
        // it found aborted (reorderbuffer.c). Nothing of it reached us, so nothing is undone.
        io::log_debug(
            "Stream Abort of a transaction that was not streamed",
            {{"xid", std::to_string(abort.xid)}, {"subxid", std::to_string(abort.subxid)}});
        co_return;
    }
    if (abort.xid == abort.subxid && options_.spool->holds(abort.xid) &&
        options_.metrics != nullptr) {
        options_.metrics->streamed_aborted += 1;
    }
    const std::uint64_t before = options_.spool->size_of(abort.xid);
    co_await options_.spool->abort(abort.xid, abort.subxid);
    io::log_debug(abort.xid == abort.subxid ? "streamed transaction aborted"
                                            : "streamed subtransaction aborted",
                  {{"xid", std::to_string(abort.xid)},
                   {"subxid", std::to_string(abort.subxid)},
                   {"bytes_before", std::to_string(before)},
                   {"bytes_after", std::to_string(options_.spool->size_of(abort.xid))}});
}

io::Task<void> Stream::on_stream_commit(pgoutput::StreamCommit commit,
                                        io::Channel<ApplyWork>& out) {
    Spool* spool = options_.spool;
    if (spool == nullptr || !spool->holds(commit.xid)) {
        throw InternalError("pgoutput Stream Commit of transaction " + std::to_string(commit.xid) +
                            ", which was not streamed in this session");
    }
    if (in_transaction_) {
        throw InternalError("pgoutput Stream Commit inside an open transaction");
    }
    received_ = std::max(received_, commit.end_lsn);
    version_ = commit.commit_lsn;
    note_begun();
    // The spooled messages were sent inside stream blocks: each carries its xid.
    PgOutputDecoder replay(decoder_->proto_version());
    replay.enter_stream_block(commit.xid);
    if (commit.commit_lsn < start_) {
        // Applied before the checkpoint. Its Relation messages still count: pgoutput takes
        // them as sent once the transaction commits, and may not send them again.
        const std::vector<std::string> relations = spool->relations(commit.xid);
        for (const std::string& bytes : relations) {
            PgOutputMessage msg = replay.decode(bytes);
            co_await follow_relation(std::get<pgoutput::Relation>(std::move(msg)), out);
        }
    } else {
        const std::uint64_t bytes = spool->size_of(commit.xid);
        io::log_info("applying a streamed transaction", {{"xid", std::to_string(commit.xid)},
                                                         {"lsn", commit.commit_lsn.str()},
                                                         {"bytes", std::to_string(bytes)}});
        for (;;) {
            std::optional<std::string_view> record = co_await spool->next(commit.xid);
            if (!record) {
                break;
            }
            if (out.closed()) {
                co_return; // the applier stopped: its error ends the run
            }
            PgOutputMessage msg = replay.decode(*record);
            if (auto* r = std::get_if<pgoutput::Relation>(&msg)) {
                pgoutput::Relation rel = std::move(*r);
                co_await follow_relation(std::move(rel), out);
            } else if (collect_change(msg)) {
                batch_commit_.reset();
                if (std::int64_t(batch_.size()) >= options_.batch_rows) {
                    co_await flush_batch(out);
                }
            }
            // A long replay reads nothing from the source: keep the walsender from timing out.
            if (std::chrono::steady_clock::now() - last_status_ >= options_.status_interval) {
                co_await send_status(false);
            }
        }
        batch_commit_ = SourceCommit{commit.end_lsn, commit.commit_time};
        ++batch_transactions_;
        if (handed_inside_transaction_) {
            co_await flush_batch(out);
        }
    }
    co_await spool->discard(commit.xid);
    if (options_.metrics != nullptr) {
        options_.metrics->streamed_committed += 1;
    }
    if (options_.stop_at && commit.end_lsn >= *options_.stop_at) {
        reached_target_ = true;
        done_ = true;
    }
}

io::Task<void> Stream::on_message(std::string_view payload, io::Channel<ApplyWork>& out) {
    if (decoder_->in_stream_block() && spooled_in_block(payload)) {
        co_await options_.spool->append(payload); // decoded at Stream Commit
        co_return;
    }
    PgOutputMessage msg = decoder_->decode(payload);
    if (auto* start = std::get_if<pgoutput::StreamStart>(&msg)) {
        co_await on_stream_start(*start);
        co_return;
    }
    if (std::holds_alternative<pgoutput::StreamStop>(msg)) {
        co_await options_.spool->stop_block();
        co_return;
    }
    if (auto* commit = std::get_if<pgoutput::StreamCommit>(&msg)) {
        co_await on_stream_commit(*commit, out);
        co_return;
    }
    if (auto* abort = std::get_if<pgoutput::StreamAbort>(&msg)) {
        co_await on_stream_abort(*abort);
        co_return;
    }
    if (decoder_->in_stream_block()) {
        co_return; // Type, Origin, Message of a streamed transaction
    }
    if (auto* b = std::get_if<pgoutput::Begin>(&msg)) {
        if (in_transaction_) {
            throw InternalError("pgoutput Begin inside an open transaction");
        }
        in_transaction_ = true;
        version_ = b->final_lsn;
        skipping_ = b->final_lsn < start_;
        note_begun();
        co_return;
    }
    if (auto* c = std::get_if<pgoutput::Commit>(&msg)) {
        if (!in_transaction_) {
            throw InternalError("pgoutput Commit outside a transaction");
        }
        if (c->commit_lsn != version_) {
            throw InternalError("pgoutput Commit LSN " + c->commit_lsn.str() +
                                " differs from its Begin's " + version_.str());
        }
        in_transaction_ = false;
        received_ = std::max(received_, c->end_lsn);
        if (!skipping_) {
            batch_commit_ = SourceCommit{c->end_lsn, c->commit_time};
            ++batch_transactions_;
            // A full batch is handed over at the change that fills it, inside a transaction
            // (most often: transactions of 10 rows fill a batch of 1,000 at the last change of
            // the 100th). Without a batch that ends at a commit the applier could not end its
            // destination transaction until the source paused: a catch-up of millions of
            // changes would be one destination transaction, its checkpoint never moving.
            if (handed_inside_transaction_) {
                co_await flush_batch(out);
            }
        }
        skipping_ = false;
        if (options_.stop_at && c->end_lsn >= *options_.stop_at) {
            reached_target_ = true;
            done_ = true;
        }
        // Every transaction committed below the end of this one has been handed over.
        co_await maybe_hand_off(c->end_lsn, out);
        co_return;
    }
    if (auto* r = std::get_if<pgoutput::Relation>(&msg)) {
        pgoutput::Relation rel = std::move(*r);
        co_await follow_relation(std::move(rel), out);
        co_return;
    }
    if (auto* m = std::get_if<pgoutput::Message>(&msg)) {
        // A non-transactional message outside a transaction (pgtide's --once marker, its
        // heartbeat, anyone's) is a position before which everything has been sent.
        if (!m->transactional && !in_transaction_) {
            if (m->lsn > last_idle_ && !options_.catch_up) {
                last_idle_ = m->lsn;
                co_await flush_batch(out);
                ApplyWork work(SourceIdle{m->lsn});
                co_await out.send(std::move(work));
            }
            if (options_.stop_at && m->lsn >= *options_.stop_at) {
                reached_target_ = true;
                done_ = true;
            }
            co_await maybe_hand_off(m->lsn, out);
        }
        co_return;
    }
    if (skipping_) {
        co_return;
    }
    if (!collect_change(msg)) {
        co_return; // Origin, Type: nothing to apply
    }
    batch_commit_.reset(); // the batch now ends inside a transaction
    if (std::int64_t(batch_.size()) >= options_.batch_rows) {
        co_await flush_batch(out);
    }
}

} // namespace pgtide::replicate
