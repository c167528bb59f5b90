#!/usr/bin/env bash
# Smoke test of bench/run (issue 3): every scenario at --scale 0.01 with the binaries of this
# build tree, then the JSON it wrote must be well formed: every scenario present and verified,
# every figure a positive number, no failures. No figure is compared with anything (timings on
# a shared machine are not assertions).
# Usage: tests/bench_smoke.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
out=$(mktemp -d /tmp/pgtide-bench-smoke-XXXXXX)
trap 'rm -rf "$out"' EXIT
"$src/bench/run" --scale 0.01 --repeat 1 --live-seconds 5 --no-record --no-build \
    --scenarios snapshot,stream,live,pg_snapshot,pg_stream,memory,many_tables \
    --build-dir "$build" --json-out "$out/bench.json"
python3 - "$out/bench.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
problems = []
want = {"snapshot", "stream_txn10", "stream_txn1000", "live", "pg_snapshot", "pg_stream", "memory",
        "many_tables"}
got = [s["scenario"] for s in doc["scenarios"]]
if set(got) != want:
    problems.append(f"scenarios {sorted(got)}, expected {sorted(want)}")
if doc["failures"]:
    problems.append(f"failures: {doc['failures']}")
for key in ("date", "commit", "postgresql", "sqlite", "scale", "narrow_rows", "wide_rows"):
    if doc["meta"].get(key) in (None, ""):
        problems.append(f"meta.{key} missing")
for s in doc["scenarios"]:
    if not s.get("verified"):
        problems.append(f"{s['scenario']}: not verified")
    for f in s.get("figures", []):
        for k in ("rows", "seconds", "rows_per_s", "mb_per_s", "pgtide_over_this"):
            v = f.get(k)
            if not isinstance(v, (int, float)) or v <= 0:
                problems.append(f"{s['scenario']} / {f['name']}: {k} = {v!r}")
        if f["name"].startswith("pgtide") and not (f.get("peak_rss_mb") or 0) > 0:
            problems.append(f"{s['scenario']} / {f['name']}: no peak RSS")
    if s["scenario"] == "live":
        if not s["transactions"] > 0 or any(not (s["lag_ms"][q] or 0) > 0 for q in ("p50", "p99", "max")):
            problems.append(f"live: {s['transactions']} transactions, lag {s['lag_ms']}")
if problems:
    print("bench smoke: the JSON is not what it should be:\n  " + "\n  ".join(problems))
    sys.exit(1)
print(f"bench smoke: {len(got)} scenarios, {sum(len(s.get('figures', [])) for s in doc['scenarios'])} figures, all well formed")
PY
