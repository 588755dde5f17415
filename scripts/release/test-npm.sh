#!/usr/bin/env bash
# test-npm.sh DIST_DIR: the TypeScript SDK's tarball as a user installs it.
#
# In a fresh npm project in a temporary directory outside the checkout, it
# installs DIST_DIR/npm/holdfast-sdk-*.tgz (its dependencies from the public
# registry) and takes a lock against a real `holdfast serve`:
#   - from an ES module (import),
#   - from CommonJS (require),
#   - from TypeScript compiled with lib ["ES2022"] (no DOM lib) and without
#     skipLibCheck, as an ES module and as CommonJS,
#   - and from a node:test file using @holdfast/sdk/testing, which starts
#     its own server from HOLDFAST_BIN.
# The server is $HOLDFAST_ADDR when set, else $HOLDFAST_BIN_DIR/holdfast
# (default bin/ of this checkout; built for the run when missing) started on
# 127.0.0.1:0 by scripts/with-server.sh and stopped by its PID. The testing
# helper finds that binary on PATH.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIST_DIR" >&2; exit 2; }

root=$(cd "$(dirname "$0")/../.." && pwd)
dist=$(cd "$1" && pwd)
shopt -s nullglob
tarballs=("$dist"/npm/holdfast-sdk-*.tgz)
[ ${#tarballs[@]} -eq 1 ] || { echo "test-npm: want exactly one $dist/npm/holdfast-sdk-*.tgz, found ${#tarballs[@]} (run make dist-npm)" >&2; exit 1; }
tarball=${tarballs[0]}
export HOLDFAST_BIN_DIR=${HOLDFAST_BIN_DIR:-$root/bin}

if [ -z "${HOLDFAST_ADDR:-}" ]; then
	built=""
	if [ ! -x "$HOLDFAST_BIN_DIR/holdfast" ]; then
		# No bin/holdfast (make test-release on a fresh clone): build one for this run.
		built=$(mktemp -d)
		echo "test-npm: building holdfast into $built" >&2
		(cd "$root" && go build -o "$built/" ./server/cmd/holdfast)
		export HOLDFAST_BIN_DIR=$built
	fi
	status=0
	"$root/scripts/with-server.sh" "$0" "$1" || status=$?
	[ -z "$built" ] || rm -rf "$built"
	exit "$status"
fi
[ -x "$HOLDFAST_BIN_DIR/holdfast" ] || { echo "test-npm: no $HOLDFAST_BIN_DIR/holdfast for @holdfast/sdk/testing (set HOLDFAST_BIN_DIR)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "test-npm: fresh project in $work, installing $(basename "$tarball")"
npm init -y >/dev/null
# The versions the SDK itself is built and checked with.
npm install --no-audit --no-fund "$tarball" typescript@5.9.3 @types/node@20.19.43

mkdir -p ts
cat >esm.mjs <<'EOF'
import { createClient } from "@holdfast/sdk";
const client = createClient(process.env.HOLDFAST_ADDR);
const guard = await client.lock("release/npm/esm").ttl("10s").acquire();
console.log(`esm: acquired, fencing token ${guard.fencingToken()}`);
await guard.unlock();
await client.close();
EOF
cat >cjs.cjs <<'EOF'
const { createClient } = require("@holdfast/sdk");
(async () => {
  const client = createClient(process.env.HOLDFAST_ADDR);
  const guard = await client.lock("release/npm/cjs").ttl("10s").acquire();
  console.log(`cjs: acquired, fencing token ${guard.fencingToken()}`);
  await guard.unlock();
  await client.close();
})().catch((e) => { console.error(e); process.exit(1); });
EOF
cat >ts/tsconfig.json <<'EOF'
{
  "compilerOptions": {
    "target": "ES2022",
    "lib": ["ES2022"],
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "types": ["node"],
    "strict": true,
    "skipLibCheck": false,
    "outDir": "out"
  },
  "include": ["*.mts", "*.cts"]
}
EOF
cat >ts/app.mts <<'EOF'
import { createClient, NotAcquiredError, type LeaseEvent } from "@holdfast/sdk";
import type { TestServer } from "@holdfast/sdk/testing";
const events: LeaseEvent["type"][] = [];
const client = createClient(process.env.HOLDFAST_ADDR!, { onLeaseEvent: (e) => events.push(e.type) });
const key = "release/npm/ts-esm";
const guard = await client.lock(key).ttl(10_000).acquire();
if ((await client.lock(key).tryAcquire()) !== undefined) throw new Error("tryAcquire of a held key answered a guard");
if ((await client.lock(key).runIfFree(() => "ran")).ran) throw new Error("runIfFree ran although the key is held");
const refused = await client.lock(key).wait(0).acquire().catch((e: unknown) => e);
if (!(refused instanceof NotAcquiredError) || refused.code !== "not_acquired") throw new Error(`wait(0) on a held key: ${String(refused)}`);
console.log(`ts (esm): acquired, fencing token ${guard.fencingToken()}`);
await guard.unlock();
if (!events.includes("released")) throw new Error(`no released event: ${events.join(",")}`);
const server: TestServer | undefined = undefined;
void server;
await client.close();
EOF
cat >ts/app.cts <<'EOF'
import { createClient } from "@holdfast/sdk";
async function main(): Promise<void> {
  const client = createClient(process.env.HOLDFAST_ADDR!);
  const guard = await client.lock("release/npm/ts-cjs").ttl("10s").acquire();
  console.log(`ts (cjs): acquired, fencing token ${guard.fencingToken()}`);
  await guard.unlock();
  await client.close();
}
main().catch((e: unknown) => { console.error(e); process.exit(1); });
EOF
cat >testing.test.mjs <<'EOF'
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createClient } from "@holdfast/sdk";
import { startServer } from "@holdfast/sdk/testing";

let server;
before(async () => { server = await startServer(); });
after(() => server.stop());

test("a lock against the helper's own server", async () => {
  const client = createClient(server.address);
  const guard = await client.lock("release/npm/testing").ttl("5s").acquire();
  assert.ok(guard.fencingToken() > 0n);
  await guard.unlock();
  await client.close();
});
EOF

node esm.mjs
node cjs.cjs
npx tsc -p ts
node ts/out/app.mjs
node ts/out/app.cjs
# The helper finds holdfast on PATH, as in a user's project.
PATH="$HOLDFAST_BIN_DIR:$PATH" node --test testing.test.mjs
echo "test-npm: ESM, CommonJS, TypeScript (lib ES2022, no skipLibCheck; ESM and CommonJS) and @holdfast/sdk/testing all took a lock"
