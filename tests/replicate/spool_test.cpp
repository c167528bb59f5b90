// Spool: streamed transactions written to files and read back, against the messages PostgreSQL
// 15 streamed (tests/fixtures/pgoutput/proto2_streaming.hex) and hand-built subtransactions.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include "io/event_loop.hpp"
#include "io/sync_wait.hpp"
#include "replicate/metrics.hpp"
#include "replicate/pgoutput.hpp"
#include "replicate/spool.hpp"
#include "tests/support/hex_fixture.hpp"

namespace pgtide::replicate {
namespace {

using pgtide::testing::load_pgoutput_fixture;

std::string be32(std::uint32_t v) {
    std::string out;
    for (int shift = 24; shift >= 0; shift -= 8) {
        out.push_back(static_cast<char>((v >> shift) & 0xff));
    }
    return out;
}

// An Insert of one text column, as a stream block carries it.
std::string insert(std::uint32_t xid, std::uint32_t relation, const std::string& value) {
    return "I" + be32(xid) + be32(relation) + "N" + std::string("\0\1", 2) + "t" +
           be32(std::uint32_t(value.size())) + value;
}

// A Relation of one text column "v".
std::string relation(std::uint32_t xid, std::uint32_t oid) {
    return "R" + be32(xid) + be32(oid) + std::string("public\0t\0d\0\1\1v\0", 15) + be32(25) +
           be32(0xffffffff);
}

// "R<oid>" or "I<value>" for each message, xid-less: what a replay hands the decoder.
std::string summary(std::string_view message) {
    PgOutputDecoder decoder(2);
    decoder.enter_stream_block(1);
    const PgOutputMessage m = decoder.decode(message);
    if (const auto* r = std::get_if<pgoutput::Relation>(&m)) {
        return "R" + std::to_string(r->oid);
    }
    if (const auto* i = std::get_if<pgoutput::Insert>(&m)) {
        return "I" + std::string(i->new_tuple.columns.at(0).data);
    }
    return std::string(1, message[0]);
}

io::Task<std::vector<std::string>> read_all(Spool* spool, std::uint32_t xid) {
    std::vector<std::string> out;
    for (;;) {
        std::optional<std::string_view> record = co_await spool->next(xid);
        if (!record) {
            break;
        }
        out.push_back(summary(*record));
    }
    co_return out;
}

io::Task<void> append_all(Spool* spool, std::vector<std::string> messages) {
    for (const std::string& m : messages) {
        co_await spool->append(m);
    }
}

// Feeds the fixture through the spool as the stream does; each Stream Commit replays its
// transaction. The replays by xid.
io::Task<std::map<std::uint32_t, std::vector<std::string>>>
drive_fixture(Spool* spool, std::vector<std::string> messages) {
    std::map<std::uint32_t, std::vector<std::string>> replays;
    PgOutputDecoder decoder(2);
    for (const std::string& bytes : messages) {
        const char type = bytes[0];
        if (decoder.in_stream_block() &&
            std::string_view("RIUDT").find(type) != std::string::npos) {
            co_await spool->append(bytes);
            continue;
        }
        const PgOutputMessage m = decoder.decode(bytes);
        if (const auto* start = std::get_if<pgoutput::StreamStart>(&m)) {
            co_await spool->start_block(start->xid, start->first_segment);
        } else if (std::holds_alternative<pgoutput::StreamStop>(m)) {
            co_await spool->stop_block();
        } else if (const auto* abort = std::get_if<pgoutput::StreamAbort>(&m)) {
            co_await spool->abort(abort->xid, abort->subxid);
        } else if (const auto* commit = std::get_if<pgoutput::StreamCommit>(&m)) {
            const std::uint32_t xid = commit->xid;
            replays[xid] = co_await read_all(spool, xid);
            co_await spool->discard(xid);
        }
    }
    co_return replays;
}

class SpoolTest : public ::testing::Test {
protected:
    void SetUp() override {
        parent_ = std::filesystem::temp_directory_path() /
                  ("pgtide-spool-test-" + std::to_string(::getpid()));
        std::filesystem::remove_all(parent_);
    }
    void TearDown() override { std::filesystem::remove_all(parent_); }

    std::vector<std::filesystem::path> files(const std::filesystem::path& dir) const {
        std::vector<std::filesystem::path> out;
        if (std::filesystem::exists(dir)) {
            for (const auto& e : std::filesystem::directory_iterator(dir)) {
                out.push_back(e.path());
            }
        }
        return out;
    }

    io::EventLoop loop_;
    std::filesystem::path parent_;
};

TEST_F(SpoolTest, DirectoryIsNamedAfterTheSlot) {
    EXPECT_EQ(Spool::directory_for("/var/spool", "s1"), "/var/spool/pgtide-spool-s1");
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    EXPECT_EQ(Spool::directory_for("", "pgtide"),
              std::filesystem::path(base) / "pgtide-spool-pgtide");
}

TEST_F(SpoolTest, CapturedStreamsReplayCommittedChangesOnly) {
    const auto messages = load_pgoutput_fixture("proto2_streaming.hex");
    ASSERT_EQ(messages.size(), 72u);
    Metrics metrics;
    // A buffer smaller than one message: every append flushes, every read is a new chunk.
    Spool spool(Spool::directory_for(parent_.string(), "s"), &metrics, 64);
    io::sync_wait(loop_, spool.open());
    const auto replays = io::sync_wait(loop_, drive_fixture(&spool, messages));

    // 740: committed, five blocks (the fixture keeps the first insert of each).
    ASSERT_TRUE(replays.contains(740));
    EXPECT_EQ(replays.at(740),
              (std::vector<std::string>{"R16389", "I100", "I590", "I1080", "I1570", "I2060"}))
        << ::testing::PrintToString(replays.at(740));
    // 741: rolled back as a whole, never replayed.
    EXPECT_FALSE(replays.contains(741));
    EXPECT_FALSE(spool.holds(741));
    // 742: ROLLBACK TO SAVEPOINT of subtransaction 743: its inserts are gone, the Relation it
    // sent first (t1) is kept after the cut, then what 744 sent.
    ASSERT_TRUE(replays.contains(742));
    EXPECT_EQ(replays.at(742),
              (std::vector<std::string>{"R16396", "I7", "R16389", "R16396", "I8"}));
    EXPECT_GT(metrics.spooled_bytes, 0u);
    EXPECT_TRUE(files(spool.directory()).empty());
    io::sync_wait(loop_, spool.close());
    EXPECT_FALSE(std::filesystem::exists(spool.directory()));
}

TEST_F(SpoolTest, SubtransactionAbortTruncatesItAndItsDescendants) {
    Spool spool(Spool::directory_for(parent_.string(), "s"), nullptr, 100);
    io::sync_wait(loop_, spool.open());
    const std::uint32_t top = 900;
    io::sync_wait(loop_, spool.start_block(top, true));
    const std::vector<std::string> first{
        relation(top, 1),      insert(top, 1, "a"),  insert(901, 1, "s1"), // SAVEPOINT s1
        insert(902, 1, "s2"),                                              // SAVEPOINT s2
        insert(901, 1, "s1b"),                                             // RELEASE s2: back in s1
        relation(903, 2),      insert(903, 2, "s3"), // SAVEPOINT s3, first use of relation 2
    };
    io::sync_wait(loop_, append_all(&spool, first));
    io::sync_wait(loop_, spool.stop_block());

    // ROLLBACK TO s3: only s3 goes; relation 2 stays (nothing before described it).
    io::sync_wait(loop_, spool.abort(top, 903));
    // A subtransaction without changes: nothing happens.
    io::sync_wait(loop_, spool.abort(top, 950));
    EXPECT_EQ(io::sync_wait(loop_, read_all(&spool, top)),
              (std::vector<std::string>{"R1", "Ia", "Is1", "Is2", "Is1b", "R2"}));
    EXPECT_EQ(spool.relations(top).size(), 2u);

    io::sync_wait(loop_, spool.start_block(top, false));
    const std::vector<std::string> second{insert(904, 2, "s4"), insert(top, 1, "b")};
    io::sync_wait(loop_, append_all(&spool, second));
    io::sync_wait(loop_, spool.stop_block());
    // ROLLBACK TO s1: s1, s2 (its child) and everything after s1 began are gone; a second
    // read starts from the beginning.
    io::sync_wait(loop_, spool.abort(top, 901));
    EXPECT_EQ(io::sync_wait(loop_, read_all(&spool, top)),
              (std::vector<std::string>{"R1", "Ia", "R2"}));
    // s2 was forgotten with s1: aborting it now changes nothing.
    io::sync_wait(loop_, spool.abort(top, 902));
    EXPECT_EQ(io::sync_wait(loop_, read_all(&spool, top)),
              (std::vector<std::string>{"R1", "Ia", "R2"}));
    // The whole transaction.
    const std::string path = spool.path_of(top);
    EXPECT_TRUE(std::filesystem::exists(path));
    io::sync_wait(loop_, spool.abort(top, top));
    EXPECT_FALSE(spool.holds(top));
    EXPECT_FALSE(std::filesystem::exists(path));
    io::sync_wait(loop_, spool.close());
}

TEST_F(SpoolTest, MessagesLargerThanTheBufferSurviveWholeAndMemoryComesBack) {
    Spool spool(Spool::directory_for(parent_.string(), "s"), nullptr, 1024);
    io::sync_wait(loop_, spool.open());
    io::sync_wait(loop_, spool.start_block(7, true));
    std::vector<std::string> messages;
    for (int i = 0; i < 200; ++i) {
        messages.push_back(insert(
            7, 1, std::string(std::size_t(i % 3 == 0 ? 5000 : 10), 'x') + std::to_string(i)));
    }
    io::sync_wait(loop_, append_all(&spool, messages));
    io::sync_wait(loop_, spool.stop_block());
    const auto replayed = io::sync_wait(loop_, read_all(&spool, 7));
    ASSERT_EQ(replayed.size(), messages.size());
    for (std::size_t i = 0; i < messages.size(); ++i) {
        EXPECT_EQ(replayed[i], summary(messages[i])) << i;
    }
    io::sync_wait(loop_, spool.close());
}

TEST_F(SpoolTest, OpenDeletesFilesOfDeadProcessesOnly) {
    const auto dir = Spool::directory_for(parent_.string(), "s");
    std::filesystem::create_directories(dir);
    const auto stale = dir / "1-5-1.spool";
    const auto live = dir / "2-6-1.spool";
    const auto other = dir / "notes.txt";
    for (const auto& p : {stale, live, other}) {
        std::ofstream(p) << "x";
    }
    // Another process would hold its lock; a second open file description stands in for it.
    const int fd = ::open(live.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    Spool spool(dir);
    io::sync_wait(loop_, spool.open());
    EXPECT_FALSE(std::filesystem::exists(stale));
    EXPECT_TRUE(std::filesystem::exists(live));
    EXPECT_TRUE(std::filesystem::exists(other));
    // close() leaves a directory that is not empty.
    io::sync_wait(loop_, spool.close());
    EXPECT_TRUE(std::filesystem::exists(dir));
    ::close(fd);
}

TEST_F(SpoolTest, FilesOfAFailedRunAreDeletedWithTheSpool) {
    const auto dir = Spool::directory_for(parent_.string(), "s");
    std::string path;
    {
        Spool spool(dir);
        io::sync_wait(loop_, spool.open());
        io::sync_wait(loop_, spool.start_block(3, true));
        const std::vector<std::string> one{insert(3, 1, "v")};
        io::sync_wait(loop_, append_all(&spool, one));
        path = spool.path_of(3);
        EXPECT_TRUE(std::filesystem::exists(path));
    }
    EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(SpoolTest, ADirectoryRemovedWhileRunningIsMadeAgain) {
    Spool spool(Spool::directory_for(parent_.string(), "s"));
    io::sync_wait(loop_, spool.open());
    std::filesystem::remove_all(spool.directory());
    io::sync_wait(loop_, spool.start_block(4, true));
    const std::vector<std::string> one{insert(4, 1, "v")};
    io::sync_wait(loop_, append_all(&spool, one));
    io::sync_wait(loop_, spool.stop_block());
    EXPECT_EQ(io::sync_wait(loop_, read_all(&spool, 4)), std::vector<std::string>{"Iv"});
    io::sync_wait(loop_, spool.close());
}

TEST_F(SpoolTest, ProtocolViolationsThrow) {
    Spool spool(Spool::directory_for(parent_.string(), "s"));
    io::sync_wait(loop_, spool.open());
    // A change outside a block, a continuation without a first segment, a short message.
    EXPECT_THROW(io::sync_wait(loop_, spool.append(insert(1, 1, "v"))), std::logic_error);
    EXPECT_THROW(io::sync_wait(loop_, spool.start_block(1, false)), std::logic_error);
    io::sync_wait(loop_, spool.start_block(1, true));
    EXPECT_THROW(io::sync_wait(loop_, spool.append(std::string("I\0\0", 3))), std::logic_error);
    EXPECT_THROW(io::sync_wait(loop_, spool.start_block(2, true)), std::logic_error);
    io::sync_wait(loop_, spool.close());
}

} // namespace
} // namespace pgtide::replicate
