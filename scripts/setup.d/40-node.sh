#!/usr/bin/env bash
# Node packages of the TypeScript SDK (sdk-ts): installed with `npm ci`, exactly
# as sdk-ts/package-lock.json pins them, when node_modules is missing or was
# installed from a different lock file. The pinned protoc-gen-es in
# sdk-ts/node_modules/.bin is also the generator `make generate` runs.
set -euo pipefail
cd "$(dirname "$0")/../../sdk-ts"
command -v node >/dev/null || { echo "setup: node (>= 20) is required for sdk-ts" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
	echo "setup: node >= 20 is required for sdk-ts, found $(node --version)" >&2
	exit 1
fi
want=$(sha256sum package-lock.json | cut -d' ' -f1)
stamp=node_modules/.holdfast-lock-sha256
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	echo "setup: sdk-ts/node_modules is up to date"
	exit 0
fi
npm ci --no-audit --no-fund
echo "$want" >"$stamp"
