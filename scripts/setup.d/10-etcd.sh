#!/usr/bin/env bash
# etcd for the tests, pinned to one version: the server is built from the Go
# module proxy (tools/etcd pins go.etcd.io/etcd/server/v3 with a `tool` line;
# that module stays out of go.work so etcd's dependencies never move ours).
# Building from source works offline-from-GitHub: only the module proxy is
# needed. Idempotent: does nothing when bin/etcd already is that version.
set -euo pipefail
cd "$(dirname "$0")/../.."
want=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2 }' tools/etcd/go.mod)
want=${want#v}
# Capture the version first: a consumer that stops reading early (grep -q,
# head) would SIGPIPE etcd and, under pipefail, fail the step at random.
have=$( [ -x bin/etcd ] && bin/etcd --version 2>/dev/null || true)
if grep -qx "etcd Version: $want" <<<"$have"; then
	echo "etcd $want already in bin/"
	exit 0
fi
mkdir -p bin
(cd tools/etcd && GOWORK=off go build -o ../../bin/etcd go.etcd.io/etcd/server/v3)
version=$(bin/etcd --version)
echo "${version%%$'\n'*}"
