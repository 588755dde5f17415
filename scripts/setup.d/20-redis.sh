#!/usr/bin/env bash
# Redis for the Redis backend's tests: Debian's redis-server package, installed
# if missing. The package's own system service is not started (tests start
# their own throw-away instance through scripts/redis.sh on a free port).
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# Keep the package's init scripts from starting the system service
# (policy-rc.d answers "denied" for the duration of the install).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
	$SUDO chmod +x "$policy"
	made_policy=1
fi
cleanup() { if [ "$made_policy" = 1 ]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT
install() { $SUDO apt-get install -y -q --no-install-recommends redis-server redis-tools; }
# Refresh the package lists only when the install cannot find the package.
if ! install; then
	$SUDO apt-get update -q
	install
fi
command -v redis-server >/dev/null
