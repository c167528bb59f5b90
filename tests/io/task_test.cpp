// Task, sync_wait and when_all: ordering, symmetric transfer, exceptions, lifetimes.
#include <stdexcept>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "io/event_loop.hpp"
#include "io/sync_wait.hpp"
#include "io/task.hpp"
#include "io/timer.hpp"
#include "io/when_all.hpp"
#include "tests/io/counted.hpp"

namespace pgtide::io {
namespace {

using testing::Counted;
using namespace std::chrono_literals;

Task<int> value(int v) {
    co_return v;
}

Task<int> add_nested(int a, int b) {
    const int x = co_await value(a);
    const int y = co_await value(b);
    co_return x + y;
}

TEST(Task, ReturnsValueThroughSyncWait) {
    EventLoop loop;
    EXPECT_EQ(sync_wait(loop, add_nested(2, 3)), 5);
}

Task<void> record(std::vector<std::string>* log, std::string what) {
    log->push_back(what);
    co_return;
}

TEST(Task, IsLazyAndRunsInAwaitOrder) {
    EventLoop loop;
    std::vector<std::string> log;
    auto body = [](std::vector<std::string>* l) -> Task<void> {
        Task<void> a = record(l, "a");
        Task<void> b = record(l, "b");
        l->push_back("created");
        co_await std::move(b);
        co_await std::move(a);
    };
    sync_wait(loop, body(&log));
    EXPECT_EQ(log, (std::vector<std::string>{"created", "b", "a"}));
}

TEST(Task, DestroyingUnstartedTaskFreesFrameAndParams) {
    Counted::reset();
    {
        auto make = [](Counted c) -> Task<int> { co_return c.id; };
        Task<int> t = make(Counted{7});
        EXPECT_GE(Counted::alive(), 1); // the parameter copy lives in the frame
    }
    EXPECT_EQ(Counted::alive(), 0);
}

Task<void> trivial() {
    co_return;
}

Task<int> long_chain(int n) {
    int count = 0;
    for (int i = 0; i < n; ++i) {
        co_await trivial();
        ++count;
    }
    co_return count;
}

TEST(Task, MillionSynchronousAwaitsDoNotOverflowTheStack) {
    EventLoop loop;
    EXPECT_EQ(sync_wait(loop, long_chain(1'000'000)), 1'000'000);
}

Task<int> deep(int depth) {
    if (depth == 0) {
        co_return 0;
    }
    co_return 1 + co_await deep(depth - 1);
}

TEST(Task, DeepRecursionCompletesThroughSymmetricTransfer) {
    EventLoop loop;
    EXPECT_EQ(sync_wait(loop, deep(2000)), 2000);
}

Task<int> thrower(std::string msg) {
    co_await yield();
    throw std::runtime_error(msg);
}

Task<int> middle(std::string msg) {
    const int v = co_await thrower(msg);
    co_return v + 1;
}

Task<std::string> outer() {
    try {
        co_await middle("boom");
    } catch (const std::runtime_error& e) {
        co_return std::string("caught ") + e.what();
    }
    co_return "not thrown";
}

TEST(Task, ExceptionsPropagateThroughNestedTasks) {
    EventLoop loop;
    EXPECT_EQ(sync_wait(loop, outer()), "caught boom");
    EXPECT_THROW(sync_wait(loop, middle("x")), std::runtime_error);
}

Task<Counted> make_counted(int id) {
    co_await yield();
    co_return Counted{id};
}

Task<int> consume_counted(Counted c) {
    co_await yield();
    co_return c.id;
}

Task<int> counted_pipeline() {
    Counted a = co_await make_counted(1);
    Counted b{2};
    const int x = co_await consume_counted(b);            // lvalue argument copied
    const int y = co_await consume_counted(Counted{3});   // temporary argument
    const int z = co_await consume_counted(std::move(a)); // moved argument
    co_return x + y + z;
}

TEST(Task, EveryValueAndFrameDestroyedExactlyOnce) {
    Counted::reset();
    {
        EventLoop loop;
        EXPECT_EQ(sync_wait(loop, counted_pipeline()), 6);
    }
    EXPECT_EQ(Counted::alive(), 0);
    EXPECT_GT(Counted::constructed, 0);
}

TEST(Task, MoveAssignReleasesPreviousFrame) {
    Counted::reset();
    {
        auto make = [](Counted c) -> Task<int> { co_return c.id; };
        Task<int> t = make(Counted{1});
        t = make(Counted{2});
        EventLoop loop;
        EXPECT_EQ(sync_wait(loop, std::move(t)), 2);
    }
    EXPECT_EQ(Counted::alive(), 0);
}

TEST(SyncWait, DetectsDeadlock) {
    EventLoop loop;
    struct Never {
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<>) const noexcept {}
        void await_resume() const noexcept {}
    };
    auto body = []() -> Task<void> { co_await Never{}; };
    EXPECT_THROW(sync_wait(loop, body()), std::logic_error);
}

TEST(EventLoop, CurrentIsThisThreadsLoop) {
    EXPECT_THROW(EventLoop::current(), std::logic_error);
    {
        EventLoop loop;
        EXPECT_EQ(&EventLoop::current(), &loop);
        EXPECT_THROW(EventLoop{}, std::logic_error);
    }
    EXPECT_EQ(EventLoop::current_or_null(), nullptr);
}

TEST(EventLoop, PostNeverResumesInline) {
    EventLoop loop;
    std::vector<int> log;
    auto body = [](std::vector<int>* l) -> Task<void> {
        l->push_back(1);
        co_await yield();
        l->push_back(3);
    };
    auto other = [](std::vector<int>* l) -> Task<void> {
        l->push_back(2);
        co_return;
    };
    auto both = [](Task<void> a, Task<void> b) -> Task<void> {
        co_await when_all(std::move(a), std::move(b));
    };
    sync_wait(loop, both(body(&log), other(&log)));
    EXPECT_EQ(log, (std::vector<int>{1, 2, 3}));
}

Task<int> delayed(int v, std::chrono::milliseconds d) {
    co_await sleep_for(d);
    co_return v;
}

Task<void> delayed_void(std::vector<int>* log, std::chrono::milliseconds d) {
    co_await sleep_for(d);
    log->push_back(static_cast<int>(d.count()));
}

TEST(WhenAll, ReturnsResultsInArgumentOrder) {
    EventLoop loop;
    std::vector<int> log;
    auto [a, b, c] =
        sync_wait(loop, when_all(delayed(1, 20ms), delayed(2, 5ms), delayed_void(&log, 10ms)));
    EXPECT_EQ(a, 1);
    EXPECT_EQ(b, 2);
    static_assert(std::is_same_v<decltype(c), std::monostate>);
    EXPECT_EQ(log, (std::vector<int>{10}));
}

TEST(WhenAll, EmptyAndSynchronous) {
    EventLoop loop;
    auto r = sync_wait(loop, when_all(value(1), value(2)));
    EXPECT_EQ(r, std::make_tuple(1, 2));
    sync_wait(loop, when_all(std::vector<Task<void>>{}));
}

Task<int> fail_after(std::chrono::milliseconds d, std::string msg) {
    co_await sleep_for(d);
    throw std::runtime_error(msg);
}

Task<int> finish_after(std::chrono::milliseconds d, bool* finished) {
    co_await sleep_for(d);
    *finished = true;
    co_return 1;
}

TEST(WhenAll, RethrowsFirstExceptionOnlyAfterAllFinished) {
    EventLoop loop;
    bool finished = false;
    try {
        sync_wait(loop, when_all(finish_after(30ms, &finished), fail_after(1ms, "first"),
                                 fail_after(5ms, "second")));
        FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "first");
    }
    EXPECT_TRUE(finished);
}

TEST(WhenAll, VectorWaitsForAll) {
    EventLoop loop;
    std::vector<int> log;
    std::vector<Task<void>> tasks;
    for (int ms : {15, 5, 10}) {
        tasks.push_back(delayed_void(&log, std::chrono::milliseconds(ms)));
    }
    sync_wait(loop, when_all(std::move(tasks)));
    EXPECT_EQ(log, (std::vector<int>{5, 10, 15}));
}

Task<Counted> counted_after(int id, std::chrono::milliseconds d) {
    co_await sleep_for(d);
    co_return Counted{id};
}

TEST(WhenAll, CountedValuesDestroyedExactlyOnce) {
    Counted::reset();
    {
        EventLoop loop;
        auto [a, b] = sync_wait(loop, when_all(counted_after(1, 2ms), counted_after(2, 1ms)));
        EXPECT_EQ(a.id + b.id, 3);
        EXPECT_THROW(sync_wait(loop, when_all(counted_after(3, 1ms), fail_after(1ms, "x"))),
                     std::runtime_error);
    }
    EXPECT_EQ(Counted::alive(), 0);
}

} // namespace
} // namespace pgtide::io
