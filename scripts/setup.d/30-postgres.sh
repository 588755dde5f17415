#!/usr/bin/env bash
# PostgreSQL server binaries for the tests, from Debian's packages. Installs
# the `postgresql` package only when no server binaries are found; runs
# `apt-get update` only when the package cannot be found without it.
# The package's own cluster and system service are not used: the tests start
# private servers with scripts/postgres.sh (temp data dir, free port).
# Idempotent and non-interactive.
set -euo pipefail

have_server() {
	compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null &&
		compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

if have_server; then
	echo "postgres: server binaries present: $(ls -d /usr/lib/postgresql/*/bin | tr '\n' ' ')"
	exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# The package may start its own cluster on 5432 when installed; harmless, the
# tests never use it.
if ! apt-cache show postgresql >/dev/null 2>&1; then
	$sudo apt-get update -qq
fi
$sudo apt-get install -y -qq --no-install-recommends postgresql >/dev/null
have_server || { echo "postgres: install finished but no server binaries under /usr/lib/postgresql" >&2; exit 1; }
echo "postgres: installed $(ls -d /usr/lib/postgresql/*/bin | tr '\n' ' ')"
