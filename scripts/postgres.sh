#!/usr/bin/env bash
# Starts and stops a private PostgreSQL server for tests.
#
#   scripts/postgres.sh start DIR    initdb, start on 127.0.0.1 with a free port,
#                                    create database "holdfast", print
#                                    HOLDFAST_POSTGRES_DSN=postgres://...
#   scripts/postgres.sh stop DIR     stop the server (by its postmaster PID) and
#                                    delete its data
#   scripts/postgres.sh restart DIR [fast|immediate]
#                                    stop (immediate = crash-like, no checkpoint)
#                                    and start again on the same port and data;
#                                    prints the DSN again
#   scripts/postgres.sh kill DIR [immediate|fast]
#                                    stop the server but keep its data and port
#                                    (restart brings it back)
#   scripts/postgres.sh dsn DIR      print the DSN line of a running server
#
# DIR is the caller's state directory (created if missing). The cluster itself
# lives in a fresh directory under ${TMPDIR:-/tmp} recorded in DIR/pgdata:
# PostgreSQL refuses to run as root, so as root the cluster is owned and run by
# the `postgres` system user (created if missing), which must be able to reach
# its directory whatever the permissions of DIR's parents. The unix socket is
# inside the cluster directory, never in /var/run/postgresql.
#
# Host connections use scram-sha-256 with a random password (so tests can check
# that wrong credentials fail); local socket connections are trusted.
# fsync=off: a test server need not survive an OS crash, only a server crash or
# restart (commits are still written to the kernel before they are acknowledged).
set -euo pipefail

die() { echo "postgres.sh: $*" >&2; exit 1; }

bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
			echo "$d"
			return
		fi
	done
	if command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then
		dirname "$(readlink -f "$(command -v pg_ctl)")"
		return
	fi
	die "no PostgreSQL server binaries (run scripts/setup.d/30-postgres.sh)"
}

BIN=$(bindir)
RUNUSER=""

# as_owner runs a command as the cluster's owner.
as_owner() {
	if [ -n "$RUNUSER" ]; then
		runuser -u "$RUNUSER" -- "$@"
	else
		"$@"
	fi
}

setup_user() {
	if [ "$(id -u)" -eq 0 ]; then
		RUNUSER=postgres
		if ! id -u "$RUNUSER" >/dev/null 2>&1; then
			useradd --system --user-group --home-dir /nonexistent --no-create-home \
				--shell /usr/sbin/nologin "$RUNUSER" 2>/dev/null || id -u "$RUNUSER" >/dev/null ||
				die "cannot create the postgres system user"
		fi
	fi
}

port_free() {
	! ss -Htln "sport = :$1" 2>/dev/null | grep -q .
}

pick_port() {
	local p i
	for i in $(seq 1 100); do
		p=$((15000 + (RANDOM * 32768 + RANDOM) % 17000))
		if port_free "$p"; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

print_dsn() {
	local state=$1
	local port password
	port=$(cat "$state/port")
	password=$(cat "$state/password")
	echo "HOLDFAST_POSTGRES_DSN=postgres://holdfast:${password}@127.0.0.1:${port}/holdfast?sslmode=disable"
}

# launch starts the postmaster on port $2 and waits until it accepts
# connections; returns 1 when the port was taken meanwhile.
launch() {
	local data=$1 port=$2
	: >"$data/log"
	chown "${RUNUSER:-$(id -un)}" "$data/log" 2>/dev/null || true
	if ! as_owner "$BIN/pg_ctl" start -D "$data/db" -l "$data/log" -w -t 60 -s \
		-o "-c listen_addresses=127.0.0.1 -p $port -k $data -c fsync=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=32MB" \
		>/dev/null 2>&1; then
		if grep -qiE 'could not (bind|create listen)|address already in use' "$data/log"; then
			return 1
		fi
		cat "$data/log" >&2
		die "pg_ctl start failed (log above)"
	fi
	local deadline=$((SECONDS + 60))
	until "$BIN/pg_isready" -q -h 127.0.0.1 -p "$port" -t 2; do
		[ "$SECONDS" -lt "$deadline" ] || { cat "$data/log" >&2; die "not ready within 60s"; }
		sleep 0.1
	done
	head -1 "$data/db/postmaster.pid" >"$data/pid"
}

start() {
	local state=$1
	mkdir -p "$state"
	state=$(cd "$state" && pwd)
	if [ -f "$state/pgdata" ] && [ -f "$(cat "$state/pgdata")/pid" ]; then
		die "$state already has a server; stop it first"
	fi
	setup_user
	local parent=${TMPDIR:-/tmp}
	# The cluster's owner must be able to reach its directory.
	if ! as_owner test -w "$parent" -a -x "$parent" 2>/dev/null; then parent=/tmp; fi
	local data
	data=$(mktemp -d "$parent/holdfast-postgres.XXXXXX")
	chmod 0700 "$data"
	echo "$data" >"$state/pgdata"
	[ -z "$RUNUSER" ] || chown "$RUNUSER:" "$data"
	local password
	password=$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')
	echo "$password" >"$state/password"
	local pwfile="$data/pwfile"
	echo "$password" >"$pwfile"
	[ -z "$RUNUSER" ] || chown "$RUNUSER:" "$pwfile"
	as_owner "$BIN/initdb" -D "$data/db" -U holdfast --pwfile="$pwfile" \
		--auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 \
		--no-sync >"$data/initdb.log" 2>&1 || { cat "$data/initdb.log" >&2; die "initdb failed"; }
	rm -f "$pwfile"
	local port attempt
	for attempt in 1 2 3 4 5 6 7 8 9 10; do
		port=$(pick_port)
		if launch "$data" "$port"; then
			echo "$port" >"$state/port"
			cp "$data/pid" "$state/pid"
			"$BIN/psql" -q -h "$data" -p "$port" -U holdfast -d postgres \
				-c 'CREATE DATABASE holdfast' >/dev/null
			print_dsn "$state"
			return
		fi
	done
	die "could not bind a free port after 10 attempts"
}

stop_server() {
	local state=$1 mode=${2:-fast}
	[ -f "$state/pgdata" ] || return 0
	local data
	data=$(cat "$state/pgdata")
	[ -f "$data/pid" ] || return 0
	local pid
	pid=$(cat "$data/pid")
	setup_user
	if kill -0 "$pid" 2>/dev/null; then
		as_owner "$BIN/pg_ctl" stop -D "$data/db" -m "$mode" -w -t 30 -s >/dev/null 2>&1 ||
			kill -KILL "$pid" 2>/dev/null || true
		local deadline=$((SECONDS + 30))
		while kill -0 "$pid" 2>/dev/null; do
			[ "$SECONDS" -lt "$deadline" ] || { kill -KILL "$pid" 2>/dev/null || true; break; }
			sleep 0.05
		done
	fi
	rm -f "$data/pid" "$state/pid"
}

stop() {
	local state=$1
	[ -d "$state" ] || return 0
	stop_server "$state" fast
	if [ -f "$state/pgdata" ]; then
		local data
		data=$(cat "$state/pgdata")
		case "$data" in
		*/holdfast-postgres.*) rm -rf "$data" ;;
		esac
		rm -f "$state/pgdata"
	fi
}

restart() {
	local state=$1 mode=${2:-fast}
	[ -f "$state/pgdata" ] || die "$state has no server"
	local data port
	data=$(cat "$state/pgdata")
	port=$(cat "$state/port")
	stop_server "$state" "$mode"
	setup_user
	launch "$data" "$port" || die "port $port was taken while the server was down"
	cp "$data/pid" "$state/pid"
	print_dsn "$state"
}

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: $0 start|stop|restart|kill|dsn DIR [fast|immediate]"
case "$cmd" in
start) start "$dir" ;;
stop) stop "$dir" ;;
restart) restart "$dir" "${3:-fast}" ;;
kill) stop_server "$dir" "${3:-immediate}" ;;
dsn) print_dsn "$dir" ;;
*) die "unknown command $cmd" ;;
esac
