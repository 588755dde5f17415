#!/usr/bin/env bash
# test-go.sh DIST_DIR: the Go release, used the way a user outside the
# repository uses it, from DIST_DIR/goproxy (make dist-goproxy) and the public
# module proxy only:
#
#   1. go install holdfast, holdfast-conformance and the example plugin
#      @vVERSION; run the conformance suite on the installed plugin; start
#      the installed `holdfast serve` and take a lock with the installed CLI;
#   2. a fresh module that `go get`s sdk-go and takes a lock (and the same
#      program built on this checkout through go.work, as README shows), and
#      one whose own test runs holdfasttest;
#   3. a fresh plugin module that `go get`s core, builds a backend with
#      Serve, passes `holdfast-conformance backend`, and passes the suite
#      from its own `go test` after `go get`ting conformance.
#
# Everything happens in a temporary directory with its own GOMODCACHE, so a
# v$VERSION cached by an earlier run can never be what is tested. Third-party
# modules come from the machine's module cache when it has them
# (file://$(go env GOMODCACHE)/cache/download, read-only) and otherwise from
# the proxy in `go env GOPROXY`.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIST_DIR" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dist=$(cd "$1" && pwd)
version=$(tr -d '[:space:]' <"$root/VERSION")
mod=github.com/holdfast/holdfast
[ -f "$dist/goproxy/$mod/server/@v/v$version.zip" ] ||
	{ echo "test-go: $dist/goproxy has no $mod/server v$version: run make dist-goproxy" >&2; exit 1; }

public=$(go env GOPROXY)
machine_cache=$(go env GOMODCACHE)/cache/download
work=$(mktemp -d "${TMPDIR:-/tmp}/holdfast-release-go.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The user's environment: nothing of the checkout (no go.work, no GOFLAGS
# from make), our modules from dist only, never checked against the public
# checksum database (they are not published there yet).
export GOWORK=off GOFLAGS=-modcacherw GOTOOLCHAIN=local
export GOPROXY="file://$dist/goproxy,file://$machine_cache,$public"
export GONOSUMDB=$mod
export GOMODCACHE=$work/modcache GOBIN=$work/bin
export PATH=$GOBIN:$PATH
unset HOLDFAST_ADDR HOLDFAST_SERVER HOLDFAST_TOKEN HOLDFAST_BIN_DIR

step() { printf '\n== test-go: %s\n' "$*"; }
# run prints a command, as a user would type it, and runs it.
run() { printf '$ %s\n' "$*"; "$@"; }
fail() { echo "test-go: FAIL: $*" >&2; exit 1; }

step "go install the release (GOPROXY=$GOPROXY)"
cd "$work"
run go install "$mod/server/cmd/holdfast@v$version"
run go install "$mod/conformance/cmd/holdfast-conformance@v$version"
run go install "$mod/plugins/example/cmd/holdfast-backend-example@v$version"
got=$(run holdfast version)
echo "$got"
[ "$(tail -1 <<<"$got")" = "$version" ] || fail "holdfast version printed '$got', want $version"
go version -m "$GOBIN/holdfast" | grep -E "^\s+mod\s+$mod/server\s+v$version\s" ||
	fail "the installed holdfast was not built from $mod/server v$version"

step "conformance suite on the installed example plugin"
run holdfast-conformance backend --plugin "$GOBIN/holdfast-backend-example" >"$work/conformance-example.log" 2>&1 ||
	{ cat "$work/conformance-example.log"; fail "holdfast-conformance backend failed on the installed example plugin"; }
grep -E '^=== holdfast conformance|passed' "$work/conformance-example.log" | tail -2

step "a fresh module that go gets sdk-go"
mkdir -p "$work/client" && cd "$work/client"
run go mod init example.com/locktest
run go get "$mod/sdk-go@v$version"
cp "$here/go/client/main.go" .
run go mod tidy
run go build -o "$work/bin/client" .
grep -E "$mod/(sdk-go|proto) " go.mod

step "a fresh module whose own test runs holdfasttest (the server in the test's process)"
mkdir -p "$work/usertest" && cd "$work/usertest"
run go mod init example.com/locktest
run go get "$mod/sdk-go/holdfasttest@v$version"
cp "$here/go/holdfasttest/loss_test.go" .
run go mod tidy
run go test -count=1 .
grep -E "$mod/sdk-go/holdfasttest " go.mod

step "a fresh module on this checkout instead of a release (README: Go from a checkout)"
# No proxy holds an unreleased checkout: go.work replaces the modules with
# their directories, and the require is written by hand (go get would ask the
# proxy for the version).
mkdir -p "$work/checkout"
(
	cd "$work/checkout"
	unset GOWORK # this project's own go.work
	run go mod init example.com/locktest
	run go work init .
	run go work edit -replace="$mod/sdk-go=$root/sdk-go" -replace="$mod/proto=$root/proto"
	run go mod edit -require="$mod/sdk-go@v$version"
	cp "$here/go/client/main.go" .
	run go build -o "$work/bin/client-checkout" .
)

step "the installed holdfast serve, the installed CLI and the fresh module's client against it"
# with-server.sh starts $HOLDFAST_BIN_DIR/holdfast on 127.0.0.1:0 and stops
# it by PID; the binary it runs is the one go install just wrote.
HOLDFAST_BIN_DIR=$GOBIN "$root/scripts/with-server.sh" bash -euo pipefail -c '
	run() { printf "\$ %s\n" "$*"; "$@"; }
	run holdfast info --server "$HOLDFAST_ADDR" | tee info.txt
	grep -Eq "^version +$0\$" info.txt || { echo "test-go: FAIL: holdfast info does not report version $0" >&2; exit 1; }
	run holdfast lock release-test/cli --server "$HOLDFAST_ADDR" --ttl 10s -- \
		sh -c "echo \"holding \$HOLDFAST_LOCK_KEY, fencing token \$HOLDFAST_FENCING_TOKEN\""
	run holdfast acquire release-test/once --server "$HOLDFAST_ADDR" --ttl 30s | tee acquire.txt
	token=$(awk "/^owner token/ {print \$3}" acquire.txt)
	[ -n "$token" ] || { echo "test-go: FAIL: no owner token in holdfast acquire output" >&2; exit 1; }
	run holdfast release release-test/once "$token" --server "$HOLDFAST_ADDR"
	run "$GOBIN/client" "$HOLDFAST_ADDR"
	run "$GOBIN/client-checkout" "$HOLDFAST_ADDR"
' "$version"

step "a fresh plugin module that go gets core"
mkdir -p "$work/plugin/store" && cd "$work/plugin"
run go mod init example.com/holdfast-backend-mine
run go get "$mod/core@v$version"
# The author's backend: the released example's code, as the guide suggests
# starting from (it imports core/backend and proto/hlc only).
run go mod download "$mod/plugins/example@v$version"
example_dir=$(go mod download -json "$mod/plugins/example@v$version" | awk -F'"' '$2 == "Dir" {print $4}')
[ -f "$example_dir/example.go" ] || fail "no example.go in the downloaded plugins/example v$version ($example_dir)"
sed 's/^package example$/package store/' "$example_dir/example.go" >store/store.go
cp "$here/go/plugin/main.go" .
run go mod tidy
grep -E "$mod/" go.mod
run go build -o "$work/bin/holdfast-backend-mine" .
run holdfast-conformance backend --plugin "$work/bin/holdfast-backend-mine" >"$work/conformance-mine.log" 2>&1 ||
	{ cat "$work/conformance-mine.log"; fail "holdfast-conformance backend failed on the fresh plugin module's backend"; }
grep -E '^=== holdfast conformance' "$work/conformance-mine.log" | tail -1

step "the same plugin module runs the suite from go test"
run go get "$mod/conformance@v$version"
cp "$here/go/plugin/conformance_test.go" .
run go mod tidy
run go test -count=1 .
grep -E "$mod/" go.mod

printf '\ntest-go: the Go release v%s works from outside the repository\n' "$version"
