#!/usr/bin/env bash
# Installs what the test suite needs, if it is missing: each file in
# scripts/setup.d/ handles one thing (a service, Node or Python packages).
# Idempotent: safe to run on every `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
for step in scripts/setup.d/*.sh; do
	[ -e "$step" ] || continue
	echo "setup: $step"
	bash "$step"
done
