#!/usr/bin/env bash
# Starts and stops a throw-away redis-server for tests.
#
#   scripts/redis.sh start DIR [--persist]   start on 127.0.0.1 at a free port, data in DIR;
#                                            prints HOLDFAST_REDIS_ADDR=127.0.0.1:PORT
#   scripts/redis.sh stop DIR                stop the instance started in DIR (by its PID)
#   scripts/redis.sh restart DIR             stop it and start it again on the same port
#                                            (empty unless it was started with --persist)
#
# No persistence unless --persist (then append-only file in DIR). The server is
# stopped by the PID it recorded in DIR/redis.pid, never by process name.
set -euo pipefail

usage() { echo "usage: $0 start DIR [--persist] | stop DIR | restart DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
persist=0
[ "${3:-}" = "--persist" ] && persist=1

free_port() {
	# Ask the kernel for a free port: bind port 0 and read what it chose.
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null && return
	# No python3: try random high ports until one is not listening.
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
	done
	echo "no free port found" >&2
	return 1
}

start() {
	command -v redis-server >/dev/null || { echo "redis-server not found: run scripts/setup.sh" >&2; exit 1; }
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	local pidfile="$dir/redis.pid"
	if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		echo "redis already running in $dir (pid $(cat "$pidfile"))" >&2
		exit 1
	fi
	local tries port
	for tries in 1 2 3 4 5; do
		port=${fixed_port:-$(free_port)}
		rm -f "$pidfile"
		local args=(--bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize yes
			--pidfile "$pidfile" --logfile "$dir/redis.log" --protected-mode yes)
		if [ "$persist" = 1 ]; then
			args+=(--appendonly yes --appendfsync always --save "")
		else
			args+=(--appendonly no --save "")
		fi
		redis-server "${args[@]}" >/dev/null || true
		# Wait for PING with a deadline (10 s); give up early if the server died
		# (for example the port was taken between choosing and binding it).
		local deadline=$((SECONDS + 10)) ok=0
		while [ $SECONDS -lt $deadline ]; do
			if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]; then ok=1; break; fi
			if [ -s "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then break; fi
			sleep 0.05
		done
		if [ "$ok" = 1 ]; then
			echo "$port" >"$dir/redis.port"
			echo "$persist" >"$dir/redis.persist"
			echo "HOLDFAST_REDIS_ADDR=127.0.0.1:$port"
			return 0
		fi
		if [ -s "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
		echo "redis did not answer PING on port $port (attempt $tries); log:" >&2
		tail -5 "$dir/redis.log" >&2 2>/dev/null || true
	done
	exit 1
}

stop() {
	local pidfile="$dir/redis.pid"
	[ -s "$pidfile" ] || { echo "no pidfile in $dir: nothing to stop" >&2; return 0; }
	local pid
	pid=$(cat "$pidfile")
	kill "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + 10))
	while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
	if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
	rm -f "$pidfile"
}

restart() {
	[ -s "$dir/redis.port" ] || { echo "no redis.port in $dir: start it first" >&2; exit 1; }
	fixed_port=$(cat "$dir/redis.port")
	persist=$(cat "$dir/redis.persist" 2>/dev/null || echo 0)
	stop
	start
}

fixed_port=""
case "$cmd" in
start) start ;;
stop) stop ;;
restart) restart ;;
*) usage ;;
esac
