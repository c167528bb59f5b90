#!/usr/bin/env bash
# Fails when a layer includes one above it (src → replicate → {schema, io}), or when code
# outside io/pg_connection.* calls a blocking libpq function, or a co_await holds a braced
# temporary.
set -u
root=${1:-.}
cd "$root" || exit 2
bad=0
check() { # folder, forbidden include prefixes...
    local dir=$1; shift
    for p in "$@"; do
        if grep -rnE "#include \"$p/" "$dir" --include='*.hpp' --include='*.cpp'; then
            echo "lint: $dir must not include $p/" >&2; bad=1
        fi
    done
}
check io schema replicate src
check schema io replicate src
check replicate src
if grep -rnE '\b(PQexec|PQexecParams|PQconnectdb|PQconnectdbParams|PQprepare)\s*\(' io schema replicate src \
        --include='*.cpp' --include='*.hpp' | grep -v '^io/pg_connection\.'; then
    echo "lint: blocking libpq call outside io/pg_connection" >&2; bad=1
fi
# GCC 12 mishandles braced temporaries inside co_await expressions (a shared_ptr member was
# released twice: a use after free under ASan). Build the value in a named local first.
if grep -rnE "co_await[^;]*[A-Za-z_>]\{" io schema replicate src --include='*.cpp' --include='*.hpp' \
        | grep -v "operator co_await"; then
    echo "lint: braced temporary inside a co_await expression; name it first" >&2; bad=1
fi
exit $bad
