#!/usr/bin/env bash
# Runs the scale run: how each store's Get, Put, load, memory and file cost
# grow from 100 thousand to 100 million keys (bench -scale; see scale.go).
# Needs no server; LMDB comes through cgo (gcc). It builds mapctl, whose
# check, recover and dump it times on sharedmap's file, and the benchmark,
# and writes results/scale/: results.md (rewritten after every store and
# set, so a long run is readable while it runs), chart.png and raw.txt (Go
# benchmark format). Extra arguments go to the benchmark, e.g.
#   ./scale.sh -scale-sets 100k-64B,1M-64B -runs 1 -duration 300ms -out /tmp/scale-smoke
#   ./scale.sh -stores sharedmap -resume=false   # re-run one store, keep the others' rows
# Store files go to $BENCH_DIR (default the temp directory); a pair that
# would not fit in its memory or disk is skipped, and the table says why.
set -euo pipefail
cd "$(dirname "$0")"

command -v gcc >/dev/null || { echo "gcc is needed for LMDB (cgo): apt-get install gcc" >&2; exit 1; }

work=$(mktemp -d)
bench_pid=
cleanup() {
	# The benchmark first (SIGTERM: it removes its stores; its children
	# die with it), while its binary is still there.
	if [ -n "$bench_pid" ]; then
		kill "$bench_pid" 2>/dev/null || true
		wait "$bench_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

(cd ../cmd/mapctl && go build -o "$work/mapctl" .)
go build -o "$work/bench" .
go build -o "$work/floor" ./floor
# In the background and waited for, so that a signal to this script
# reaches the traps at once and stops the benchmark too.
"$work/bench" -scale -mapctl "$work/mapctl" -floor "$work/floor" "$@" &
bench_pid=$!
wait "$bench_pid"
bench_pid=
