#!/usr/bin/env bash
# Runs a command with a throwaway etcd, Redis and PostgreSQL started by the
# project's scripts on free loopback ports, their addresses exported as
# HOLDFAST_ETCD_ENDPOINTS, HOLDFAST_REDIS_ADDR and HOLDFAST_POSTGRES_DSN, and
# stops them (by PID) when the command ends. Exits with the command's status.
#
#   scripts/with-services.sh CMD [ARGS...]
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
cleanup() {
	"$root/postgres.sh" stop "$dir/postgres" >/dev/null 2>&1 || true
	"$root/redis.sh" stop "$dir/redis" >/dev/null 2>&1 || true
	"$root/etcd.sh" stop "$dir/etcd" >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/etcd" "$dir/redis" "$dir/postgres"
for svc in etcd redis postgres; do
	line=$("$root/$svc.sh" start "$dir/$svc")
	export "${line?}"
	echo "with-services: ${line%%=*} set" >&2
done
"$@"
