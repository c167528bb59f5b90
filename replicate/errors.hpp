// The three classes of failure (see STYLE.md "Errors carry their evidence") and the exit codes.
#pragma once

#include <stdexcept>
#include <string>

namespace pgtide::replicate {

/// Process exit codes (DESIGN §6).
enum class ExitCode : int {
    Ok = 0,
    Other = 1,
    Usage = 2,
    SourceNotReady = 3,
    Fenced = 4,
    SlotLost = 5,
};

/// Connection lost, server shutting down, timeouts: reconnect with backoff and resume.
class TransientError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// The work cannot go on without a person: stop with an exit code and a hint.
class DefiniteError : public std::runtime_error {
public:
    DefiniteError(ExitCode code, const std::string& message)
        : std::runtime_error(message), code_(code) {}
    ExitCode code() const { return code_; }

private:
    ExitCode code_;
};

/// The stream met a change of a table the publications gained since the destination was
/// copied: the coordinator copies that table (DESIGN §4 "Copy ranges"), then streams on from the
/// checkpoint. Nothing of the transaction that carried it is applied before.
class PublicationChanged : public std::runtime_error {
public:
    explicit PublicationChanged(const std::string& table)
        : std::runtime_error("table " + table +
                             " joined the publications after the destination was copied"),
          table_(table) {}
    /// The table, `schema.name`.
    const std::string& table() const { return table_; }

private:
    std::string table_;
};

/// A table needs a new copy: `pgtide resync` asked for one (its state is init), or the source
/// rewrote its rows (a type change). The streaming process copies it alone (DESIGN §4 "Copy
/// ranges"), then streams on from the checkpoint.
class CopyRequested : public std::runtime_error {
public:
    CopyRequested(const std::string& table, const std::string& reason)
        : std::runtime_error("table " + table + " is copied again: " + reason), table_(table),
          reason_(reason) {}
    const std::string& table() const { return table_; }
    const std::string& reason() const { return reason_; }

private:
    std::string table_;
    std::string reason_;
};

/// A broken invariant (a change outside a transaction, LSNs out of order). Never swallowed.
class InternalError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

} // namespace pgtide::replicate
