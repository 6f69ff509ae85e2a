#!/usr/bin/env bash
# Runs the peer benchmark end to end: installs what it needs (Debian's
# redis-server; the Go peers come from the module proxy, LMDB through cgo
# from github.com/PowerDNS/lmdb-go v1.9.3, pinned in go.mod), starts Redis on
# a unix socket, runs every store, stops Redis, and writes results/:
# results.md (the table), chart.png, raw.txt (Go benchmark format; feed it to
# benchstat). Extra arguments go to the benchmark, e.g. -runs 3 -duration 500ms
# or -stores sharedmap,lmdb -datasets 1M-64B; BENCH_OUT names another
# directory for the run's files (default results, or results/partial for a
# run narrowed by -stores, -datasets or -cells).
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v redis-server >/dev/null; then
	echo "installing redis-server (Debian package)" >&2
	if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
	# On a systemd host the package starts and enables its own server on
	# port 6379; this script runs its own on a socket, and leaves none.
	if command -v systemctl >/dev/null; then
		$SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
	fi
fi
command -v gcc >/dev/null || { echo "gcc is needed for LMDB (cgo): apt-get install gcc" >&2; exit 1; }

work=$(mktemp -d)
sock="$work/redis.sock"
redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --save '' --appendonly no \
	--dir "$work" --daemonize no >"$work/redis.log" 2>&1 &
redis_pid=$!
bench_pid=
cleanup() {
	# The benchmark first (SIGTERM: it removes its stores and workers),
	# while its binary and Redis are still there.
	if [ -n "$bench_pid" ]; then
		kill "$bench_pid" 2>/dev/null || true
		wait "$bench_pid" 2>/dev/null || true
	fi
	kill "$redis_pid" 2>/dev/null || true
	wait "$redis_pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# The socket's file appears when redis-server binds it, a moment before it
# listens; only an answered PING says it is up.
redis_up() { [ "$(redis-cli -s "$sock" ping 2>/dev/null)" = PONG ]; }
for _ in $(seq 100); do redis_up && break; sleep 0.1; done
redis_up || { echo "redis-server did not start:" >&2; cat "$work/redis.log" >&2; exit 1; }

go build -o "$work/bench" .
# The benchmark decides where its files go (-out or BENCH_OUT, else
# results, or results/partial for a run narrowed by -stores, -datasets or
# -cells) and writes them only when the run ends whole.
# It runs in the background and is waited for, so that a SIGTERM to this
# script reaches the traps at once and stops the benchmark too, instead of
# leaving it running on a deleted binary, without Redis, to overwrite the
# kept results with a run that skipped stores.
BENCH_REDIS_SOCKET="$sock" "$work/bench" "$@" &
bench_pid=$!
wait "$bench_pid"
bench_pid=
