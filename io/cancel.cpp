// CancelSource/CancelToken: an intrusive list of registrations per source, loop thread only.
#include "io/cancel.hpp"

#include <utility>

namespace pgtide::io {

namespace detail {

struct CancelState {
    bool cancelled = false;
    CancelRegistration* head = nullptr;
    CancelRegistration* tail = nullptr;

    void link(CancelRegistration& r) noexcept {
        r.prev_ = tail;
        r.next_ = nullptr;
        if (tail != nullptr) {
            tail->next_ = &r;
        } else {
            head = &r;
        }
        tail = &r;
        r.linked_ = true;
    }

    void unlink(CancelRegistration& r) noexcept {
        if (!r.linked_) {
            return;
        }
        (r.prev_ != nullptr ? r.prev_->next_ : head) = r.next_;
        (r.next_ != nullptr ? r.next_->prev_ : tail) = r.prev_;
        r.prev_ = r.next_ = nullptr;
        r.linked_ = false;
    }

    void cancel() {
        if (cancelled) {
            return;
        }
        cancelled = true;
        while (head != nullptr) {
            CancelRegistration& r = *head;
            unlink(r);
            // The callback may destroy its registration: run a moved-out copy.
            auto fn = std::move(r.fn_);
            fn();
        }
    }
};

} // namespace detail

bool CancelToken::cancelled() const noexcept {
    return state_ && state_->cancelled;
}

void CancelToken::throw_if_cancelled() const {
    if (cancelled()) {
        throw Cancelled();
    }
}

CancelSource::CancelSource() : state_(std::make_shared<detail::CancelState>()) {}

void CancelSource::cancel() {
    state_->cancel();
}

bool CancelSource::cancelled() const noexcept {
    return state_->cancelled;
}

CancelRegistration::CancelRegistration(const CancelToken& token, std::function<void()> fn)
    : state_(token.state_), fn_(std::move(fn)) {
    if (!state_) {
        return;
    }
    if (state_->cancelled) {
        auto f = std::move(fn_);
        f();
        return;
    }
    state_->link(*this);
}

CancelRegistration::~CancelRegistration() {
    if (state_) {
        state_->unlink(*this);
    }
}

} // namespace pgtide::io
