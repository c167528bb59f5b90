// PgSession: a persistent blocking libpq session for test workloads.
#include "tests/support/pg_session.hpp"

#include <memory>
#include <stdexcept>

#include <libpq-fe.h>

namespace pgtide::testing {

namespace {

struct ResultCloser {
    void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultCloser>;

} // namespace

void PgSession::Closer::operator()(pg_conn* c) const {
    PQfinish(c);
}

PgSession::PgSession(const std::string& dsn) : conn_(PQconnectdb(dsn.c_str())) {
    if (PQstatus(conn_.get()) != CONNECTION_OK) {
        throw std::runtime_error("connect: " + std::string(PQerrorMessage(conn_.get())));
    }
    PQsetNoticeProcessor(
        conn_.get(), [](void*, const char*) {}, nullptr);
}

PgSession::~PgSession() = default;

std::int64_t PgSession::exec(const std::string& sql) {
    Result r(PQexec(conn_.get(), sql.c_str()));
    const auto status = PQresultStatus(r.get());
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        throw std::runtime_error(std::string(PQresultErrorMessage(r.get())) +
                                 "  while running: " + sql.substr(0, 400));
    }
    const char* n = PQcmdTuples(r.get());
    return (n != nullptr && *n != '\0') ? std::stoll(n) : 0;
}

std::string PgSession::value(const std::string& sql) {
    Result r(PQexec(conn_.get(), sql.c_str()));
    if (PQresultStatus(r.get()) != PGRES_TUPLES_OK || PQntuples(r.get()) != 1 ||
        PQnfields(r.get()) != 1 || PQgetisnull(r.get(), 0, 0)) {
        throw std::runtime_error(std::string(PQresultErrorMessage(r.get())) +
                                 "  expected one value from: " + sql.substr(0, 400));
    }
    return PQgetvalue(r.get(), 0, 0);
}

} // namespace pgtide::testing
