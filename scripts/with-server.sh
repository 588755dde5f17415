#!/usr/bin/env bash
# with-server.sh CMD [ARGS...]: runs CMD against a real `holdfast serve`.
#
# Starts $HOLDFAST_BIN_DIR/holdfast (default: bin/ of this repository, or a
# fresh `go build` of ./server/cmd/holdfast when bin/ has none) on
# 127.0.0.1:0 with the embedded memory backend (extra serve flags from
# HOLDFAST_SERVE_ARGS), waits for its readiness line on stdout
#     holdfast serving addr=127.0.0.1:PORT backend=... shared=... durable=...
# exports HOLDFAST_ADDR=http://127.0.0.1:PORT (and HOLDFAST_SERVER_PID, so a
# test may stop or pause the server), runs CMD, stops the server by its PID
# and exits with CMD's status. Server logs go to stderr.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
ready_timeout=${HOLDFAST_READY_TIMEOUT:-60}
tmp=$(mktemp -d)
bin_dir=${HOLDFAST_BIN_DIR:-$root/bin}
server=$bin_dir/holdfast
if [ ! -x "$server" ]; then
	if [ -n "${HOLDFAST_BIN_DIR:-}" ]; then
		echo "with-server: $server not found; run 'make build'" >&2
		rm -rf "$tmp"
		exit 1
	fi
	# No bin/ yet: build the server for this run only.
	echo "with-server: building holdfast into $tmp" >&2
	(cd "$root" && go build -o "$tmp/holdfast" ./server/cmd/holdfast) || { rm -rf "$tmp"; exit 1; }
	server=$tmp/holdfast
fi

fifo=$tmp/stdout
mkfifo "$fifo"
pid=""
drain=""
stop() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		# A test may have SIGSTOPped it; let it see the TERM.
		kill -CONT "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [ -n "$drain" ]; then wait "$drain" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck disable=SC2086 # HOLDFAST_SERVE_ARGS is a list of flags.
"$server" serve --addr 127.0.0.1:0 ${HOLDFAST_SERVE_ARGS:-} >"$fifo" &
pid=$!
exec 3<"$fifo"
line=""
deadline=$((SECONDS + ready_timeout))
while :; do
	remaining=$((deadline - SECONDS))
	if [ "$remaining" -le 0 ]; then
		echo "with-server: no readiness line from holdfast within ${ready_timeout}s" >&2
		exit 1
	fi
	rc=0
	IFS= read -r -t "$remaining" line <&3 || rc=$?
	if [ "$rc" -gt 128 ]; then
		continue # timed out; the deadline check above decides
	elif [ "$rc" -ne 0 ]; then
		echo "with-server: holdfast closed its stdout (or exited) before it was ready" >&2
		exit 1
	fi
	case "$line" in
	"holdfast serving addr="*) break ;;
	*) echo "$line" >&2 ;;
	esac
done
addr=${line#holdfast serving addr=}
addr=${addr%% *}
# Anything else the server prints on stdout goes to our stderr, so that its
# writes never block on a full pipe.
cat <&3 >&2 &
drain=$!
exec 3<&-

export HOLDFAST_ADDR="http://$addr"
export HOLDFAST_SERVER_PID=$pid
echo "with-server: $line (pid $pid)" >&2
status=0
"$@" || status=$?
exit "$status"
