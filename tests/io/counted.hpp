// Counted: a lifetime-counting value (cppcoro's `counted`) for runtime tests.
#pragma once

namespace pgtide::io::testing {

struct Counted {
    static inline int constructed = 0;
    static inline int destroyed = 0;
    static void reset() { constructed = destroyed = 0; }
    static int alive() { return constructed - destroyed; }

    int id = 0;
    bool moved_from = false;

    explicit Counted(int i = 0) : id(i) { ++constructed; }
    Counted(const Counted& o) : id(o.id) { ++constructed; }
    Counted(Counted&& o) noexcept : id(o.id) {
        ++constructed;
        o.moved_from = true;
    }
    Counted& operator=(const Counted&) = default;
    Counted& operator=(Counted&&) = default;
    ~Counted() { ++destroyed; }
};

} // namespace pgtide::io::testing
