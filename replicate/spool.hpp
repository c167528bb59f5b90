// Spool: the on-disk files that hold streamed in-progress transactions until they end.
//
// With `streaming 'on'`, pgoutput sends a transaction that outgrows the source's
// logical_decoding_work_mem in blocks (Stream Start ... Stream Stop) long before it commits,
// interleaved with other transactions, and ends it later with Stream Commit or Stream Abort.
// Nothing of it may reach the destination before the commit, and holding it in memory would
// make memory grow with the transaction. So each top-level transaction gets one file, and its
// messages (the raw pgoutput bytes, each with its length) are appended to it as they arrive;
// at Stream Commit the stream reads them back, in order and in bounded chunks, and decodes
// them as if they were arriving now; at Stream Abort the file is deleted.
//
// Subtransactions: a change carries the xid of the subtransaction that made it. The offset at
// which each subtransaction's first change was written is remembered; an abort of that
// subtransaction (ROLLBACK TO SAVEPOINT) truncates the file there and forgets the
// subtransactions that started later, which are its descendants, as PostgreSQL's own apply
// worker does (worker.c, stream_abort_internal). Relation messages are kept as part of the
// transaction, because pgoutput sends them once per streamed transaction and assumes the
// receiver installs them when that transaction commits (pgoutput.c, cleanup_rel_sync_cache);
// a Relation message that only the truncated part held is written again after the cut, since
// later changes of the transaction may rely on it.
//
// Memory: one write buffer (one block is open at a time; it is flushed when full and at every
// Stream Stop) and one read buffer, each about buffer_bytes plus at most one message; per
// transaction, a few words per subtransaction and the bytes of its Relation messages. File
// I/O runs on a worker thread of its own, never on the loop; a flush suspends the stream
// reader, which is backpressure on the replication connection.
//
// Files: `<directory>/<pid>-<xid>-<n>.spool`, each locked (flock) by the process that writes
// it. open() deletes the files no live process holds, which are left over from a crash (the
// server resends those transactions anyway); close() deletes this process's files and the
// directory when it is empty. Another pgtide using the same directory (the same slot name on
// another source) keeps its files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <unordered_set>

#include "io/task.hpp"
#include "io/worker_thread.hpp"

namespace pgtide::replicate {

struct Metrics;

class Spool {
public:
    static constexpr std::size_t kDefaultBufferBytes = 256 * 1024;

    /// The spool directory of `slot`: `<parent>/pgtide-spool-<slot>`, where an empty `parent`
    /// means $TMPDIR, else /tmp.
    static std::filesystem::path directory_for(const std::string& parent, const std::string& slot);

    /// Starts the worker thread; touches nothing on disk. `metrics` (optional) counts the bytes
    /// spooled.
    explicit Spool(std::filesystem::path directory, Metrics* metrics = nullptr,
                   std::size_t buffer_bytes = kDefaultBufferBytes);
    /// Closes and deletes the files still open (synchronously: after an error, close() may
    /// not have run), then joins the worker.
    ~Spool();
    Spool(const Spool&) = delete;
    Spool& operator=(const Spool&) = delete;

    /// Creates the directory and deletes the spool files no live process holds. Suspends.
    /// Throws DefiniteError naming the directory when it cannot be created or read.
    io::Task<void> open();

    /// A stream block of top-level transaction `xid` begins; `first_segment` starts the
    /// transaction's file (replacing one of the same xid). Suspends. Throws InternalError for a
    /// continuation of a transaction that has no file, or while another block is open, and
    /// DefiniteError when the file cannot be created.
    io::Task<void> start_block(std::uint32_t xid, bool first_segment);
    /// Appends one message of the open block: a pgoutput message whose bytes 1-4 are the xid
    /// of the (sub)transaction that made it (Relation, Insert, Update, Delete, Truncate).
    /// Suspends when the buffer is full and flushes it. Throws InternalError outside a block,
    /// ProtocolError when the message is too short to hold its xid, DefiniteError naming the
    /// file when it cannot be written (a full disk).
    io::Task<void> append(std::string_view message);
    /// The open block ends: its buffer is written. Suspends. Throws as append.
    io::Task<void> stop_block();

    /// Stream Abort: discards the whole transaction when subxid == xid (deleting its file),
    /// otherwise the changes of subtransaction `subxid` and of those that began after it.
    /// Nothing happens for a transaction or subtransaction that spooled nothing. Suspends.
    /// Throws DefiniteError when the file cannot be truncated or written.
    io::Task<void> abort(std::uint32_t xid, std::uint32_t subxid);

    /// True while top-level transaction `xid` has a file.
    bool holds(std::uint32_t xid) const;
    /// The path of `xid`'s file ("" when it has none), for messages.
    std::string path_of(std::uint32_t xid) const;
    /// Bytes spooled for `xid` so far.
    std::uint64_t size_of(std::uint32_t xid) const;
    /// The Relation messages of `xid` that are in force at its commit, in order (what a
    /// transaction that is skipped must still install).
    std::vector<std::string> relations(std::uint32_t xid) const;

    /// Reads `xid`'s messages back in the order they were written: the next one, or nullopt
    /// after the last (the call after that starts over). The view stays valid until the next
    /// call. Suspends
    /// (reads whole chunks). Throws InternalError when `xid` has no file or the file ends
    /// inside a message, DefiniteError when it cannot be read.
    io::Task<std::optional<std::string_view>> next(std::uint32_t xid);

    /// Deletes `xid`'s file (after its commit). Suspends.
    io::Task<void> discard(std::uint32_t xid);
    /// Deletes every file of this process (a new replication session: the server resends
    /// every transaction that had not ended). Suspends.
    io::Task<void> discard_all();
    /// discard_all, then removes the directory if no other process has files in it. Suspends.
    io::Task<void> close();

    const std::filesystem::path& directory() const { return directory_; }

private:
    struct Subtransaction {
        std::uint32_t xid = 0;
        std::uint64_t offset = 0; ///< where its first change was written
    };
    struct RelationRecord {
        std::uint64_t offset = 0;
        std::uint32_t oid = 0;
        std::string bytes;
    };
    struct File {
        std::uint32_t xid = 0;
        std::string path;
        int fd = -1;
        std::uint64_t size = 0;    ///< bytes written, plus the write buffer while its block is open
        std::uint64_t flushed = 0; ///< bytes in the file
        std::vector<Subtransaction> subtransactions; ///< in the order of their first change
        std::unordered_set<std::uint32_t> subxids;   ///< the same xids, to look them up
        std::uint32_t last_subxid = 0;               ///< of the last change (0: none)
        std::vector<RelationRecord> relations;
        std::uint64_t read_offset = 0; ///< file offset just past read_buffer
        std::string read_buffer;
        std::size_t read_pos = 0;
    };

    File& file(std::uint32_t xid);
    const File* find(std::uint32_t xid) const;
    void buffer_record(File& f, std::string_view message);
    /// The next read of `f` starts at its beginning.
    void rewind(File& f);
    io::Task<void> flush(File* f);
    io::Task<void> remove(std::uint32_t xid);

    std::filesystem::path directory_;
    Metrics* metrics_;
    std::size_t buffer_bytes_;
    std::map<std::uint32_t, std::unique_ptr<File>> files_;
    File* open_block_ = nullptr;
    std::string write_buffer_;
    std::uint64_t sequence_ = 0;
    io::WorkerThread worker_;
};

} // namespace pgtide::replicate
