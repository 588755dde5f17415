#!/usr/bin/env bash
# Starts and stops a throwaway etcd for the tests: 1 member, or 3 for the
# cluster tests, on 127.0.0.1 with free ports chosen at run time, its data in
# DIR (give it a fresh temp dir). Processes are tracked by PID in DIR and are
# stopped by PID, never by name: other people run tests on this machine too.
#
#   scripts/etcd.sh start DIR [members]   # prints HOLDFAST_ETCD_ENDPOINTS=...
#   scripts/etcd.sh stop DIR
#
# The etcd binary is $HOLDFAST_ETCD_BIN, or bin/etcd (scripts/setup.d/10-etcd.sh
# builds it). Extra etcd flags can be passed in $HOLDFAST_ETCD_ARGS.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
etcd_bin=${HOLDFAST_ETCD_BIN:-$root/bin/etcd}

usage() {
	echo "usage: $0 start DIR [members] | stop DIR" >&2
	exit 2
}

# free_ports N prints N distinct TCP ports that were free a moment ago (the
# kernel picks them; a lost race makes etcd fail to bind, and start retries).
free_ports() {
	if ! command -v python3 >/dev/null; then
		# Without python3: random ports that nothing listens on right now.
		local -a out=()
		while [ "${#out[@]}" -lt "$1" ]; do
			local p=$((20000 + RANDOM % 40000))
			if ! ss -Hltn "sport = :$p" | grep -q . && [[ " ${out[*]} " != *" $p "* ]]; then
				out+=("$p")
			fi
		done
		echo "${out[*]}"
		return
	fi
	python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

healthy() {
	curl -fsS --max-time 1 "$1/health" 2>/dev/null | grep -q '"health":"true"'
}

stop() {
	local dir=$1 pidfile pid
	for pidfile in "$dir"/m*.pid; do
		[ -e "$pidfile" ] || continue
		pid=$(cat "$pidfile")
		if kill -0 "$pid" 2>/dev/null; then
			kill "$pid" 2>/dev/null || true
			for _ in $(seq 100); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			kill -9 "$pid" 2>/dev/null || true
		fi
		rm -f "$pidfile"
	done
}

# try_start DIR N: one attempt with fresh ports; returns non-zero when a member
# does not become healthy within the deadline (it then stops what it started).
try_start() {
	local dir=$1 n=$2 i
	local -a ports client peer
	read -r -a ports <<<"$(free_ports $((2 * n)))"
	local cluster="" endpoints=""
	for ((i = 0; i < n; i++)); do
		client[i]="http://127.0.0.1:${ports[2 * i]}"
		peer[i]="http://127.0.0.1:${ports[2 * i + 1]}"
		cluster+="${cluster:+,}m$i=${peer[i]}"
		endpoints+="${endpoints:+,}${client[i]}"
	done
	local token="holdfast-$$-$RANDOM"
	for ((i = 0; i < n; i++)); do
		rm -rf "$dir/m$i.data"
		# shellcheck disable=SC2086 # HOLDFAST_ETCD_ARGS is a list of flags
		"$etcd_bin" --name "m$i" --data-dir "$dir/m$i.data" \
			--listen-client-urls "${client[i]}" --advertise-client-urls "${client[i]}" \
			--listen-peer-urls "${peer[i]}" --initial-advertise-peer-urls "${peer[i]}" \
			--initial-cluster "$cluster" --initial-cluster-token "$token" \
			--initial-cluster-state new --log-level warn ${HOLDFAST_ETCD_ARGS:-} \
			>"$dir/m$i.log" 2>&1 </dev/null &
		echo $! >"$dir/m$i.pid"
	done
	local deadline=$((SECONDS + 30)) ok
	while :; do
		ok=1
		for ((i = 0; i < n; i++)); do
			if ! kill -0 "$(cat "$dir/m$i.pid")" 2>/dev/null; then
				echo "etcd m$i exited; last log lines:" >&2
				tail -n 5 "$dir/m$i.log" >&2
				stop "$dir"
				return 1
			fi
			healthy "${client[i]}" || ok=0
		done
		[ "$ok" = 1 ] && break
		if ((SECONDS >= deadline)); then
			echo "etcd not healthy within 30s at $endpoints" >&2
			stop "$dir"
			return 1
		fi
		sleep 0.1
	done
	echo "$endpoints" >"$dir/endpoints"
	echo "HOLDFAST_ETCD_ENDPOINTS=$endpoints"
}

start() {
	local dir=$1 n=${2:-1} attempt
	[[ "$n" =~ ^[1-9]$ ]] || { echo "members must be 1..9, got $n" >&2; exit 2; }
	[ -x "$etcd_bin" ] || { echo "no etcd at $etcd_bin: run scripts/setup.d/10-etcd.sh" >&2; exit 1; }
	mkdir -p "$dir"
	for pidfile in "$dir"/m*.pid; do
		if [ -e "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
			echo "etcd already running from $dir (pid $(cat "$pidfile")); stop it first" >&2
			exit 1
		fi
	done
	for attempt in 1 2 3; do
		try_start "$dir" "$n" && return 0
		echo "etcd start attempt $attempt failed; retrying with new ports" >&2
	done
	exit 1
}

[ $# -ge 2 ] || usage
case $1 in
start) start "$2" "${3:-1}" ;;
stop) stop "$2" ;;
*) usage ;;
esac
