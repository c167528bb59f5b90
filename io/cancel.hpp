// Cancellation: a CancelSource owned by whoever decides, cheap CancelTokens passed to waits.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>

namespace pgtide::io {

/// Thrown by a wait whose CancelToken was cancelled (after its operation has really ended).
struct Cancelled : std::runtime_error {
    Cancelled() : std::runtime_error("operation cancelled") {}
    using std::runtime_error::runtime_error;
};

namespace detail {
struct CancelState;
}

class CancelRegistration;

/// Observes a CancelSource. Default-constructed tokens are never cancelled. Copyable, cheap
/// (one shared_ptr); loop thread only.
class CancelToken {
public:
    CancelToken() noexcept = default;
    bool cancelled() const noexcept;
    /// False for a default token: waits need not register anything.
    bool can_be_cancelled() const noexcept { return bool(state_); }
    /// Throws Cancelled if cancelled().
    void throw_if_cancelled() const;

private:
    friend class CancelSource;
    friend class CancelRegistration;
    explicit CancelToken(std::shared_ptr<detail::CancelState> state) noexcept
        : state_(std::move(state)) {}
    std::shared_ptr<detail::CancelState> state_;
};

/// Requests cancellation of every wait given one of its tokens. Copies share the state.
class CancelSource {
public:
    CancelSource();
    /// Marks cancelled and runs every registered callback once (inline, in registration order).
    /// Idempotent.
    void cancel();
    bool cancelled() const noexcept;
    CancelToken token() const noexcept { return CancelToken{state_}; }

private:
    std::shared_ptr<detail::CancelState> state_;
};

/// Runs fn once if the token is cancelled while this object lives (at once, inline, if it
/// already is). Unregisters on destruction. Neither copyable nor movable: keep it in the frame
/// of the wait it serves.
class CancelRegistration {
public:
    CancelRegistration(const CancelToken& token, std::function<void()> fn);
    ~CancelRegistration();
    CancelRegistration(const CancelRegistration&) = delete;
    CancelRegistration& operator=(const CancelRegistration&) = delete;

private:
    friend struct detail::CancelState;
    std::shared_ptr<detail::CancelState> state_;
    std::function<void()> fn_;
    CancelRegistration* prev_ = nullptr;
    CancelRegistration* next_ = nullptr;
    bool linked_ = false;
};

} // namespace pgtide::io
