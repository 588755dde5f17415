#!/usr/bin/env bash
# Node packages of the live view (web/): esbuild, the Connect runtime,
# playwright-core and TypeScript, installed with `npm ci` exactly as
# web/package-lock.json pins them, when node_modules is missing or was
# installed from a different lock file. `make web-build` runs this first.
set -euo pipefail
cd "$(dirname "$0")/../../web"
command -v node >/dev/null || { echo "setup: node (>= 20) is required to build the live view (web/)" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
	echo "setup: node >= 20 is required for web/, found $(node --version)" >&2
	exit 1
fi
want=$(sha256sum package-lock.json | cut -d' ' -f1)
stamp=node_modules/.holdfast-lock-sha256
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	exit 0
fi
npm ci --no-audit --no-fund
echo "$want" >"$stamp"
