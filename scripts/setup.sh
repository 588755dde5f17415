#!/usr/bin/env bash
# Installs what the test suite needs, if it is missing. Idempotent: safe to
# run on every `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

go mod download -x >/dev/null 2>&1 || true
