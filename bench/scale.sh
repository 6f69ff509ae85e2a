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
# The runs in results/scale/ were made with
#   ./scale.sh -out results/scale/ext4 -runs 3 -duration 1s \
#     -scale-sets 100k-64B,1M-64B,10M-64B,1M-1KiB -scale-load-budget 6m
#   mount -t tmpfs -o huge=always,size=22g tmpfs /mnt/scale
#   BENCH_DIR=/mnt/scale ./scale.sh -out results/scale/tmpfs-huge -runs 2 -duration 1s \
#     -stores sharedmap,lmdb,fastcache,floor -scale-sets 1M-64B,10M-64B,50M-64B,100M-64B
# (on ext4, a map past the kernel's background dirty limit, about a tenth
# of the RAM, is written back without pause: see docs/PERFORMANCE.md).
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
