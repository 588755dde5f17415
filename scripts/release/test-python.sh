#!/usr/bin/env bash
# test-python.sh DIST_DIR: the Python release, used the way a user outside the
# repository uses it. For each of Python 3.10 and 3.11: a fresh virtualenv in
# a temporary directory installs DIST_DIR/python/holdfast-VERSION-*.whl (make
# dist-python) with its dependencies from PyPI, and takes a lock with the
# async and the blocking client (python/take_lock.py, copied out of the
# checkout) against a real `holdfast serve`, and 20 short-lived programs must
# all exit with status 0. The sdist is installed the same way once (pip builds
# it, fetching the build backend from PyPI).
#
# The server: HOLDFAST_ADDR when set, else $HOLDFAST_BIN_DIR/holdfast (default
# bin/) started on 127.0.0.1:0 by scripts/with-server.sh, which stops it by
# PID. Interpreters: python3.10 and python3.11 from PATH, else from pyenv
# ($PYENV_ROOT, default ~/.pyenv); a missing one fails the test.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIST_DIR" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dist=$(cd "$1" && pwd)

if [ -z "${HOLDFAST_ADDR:-}" ]; then
	exec "$root/scripts/with-server.sh" "$0" "$dist"
fi

if [ -f "$root/VERSION" ]; then
	version=$(tr -d '[:space:]' <"$root/VERSION")
else
	version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/sdk-python/pyproject.toml")
fi
wheel=$dist/python/holdfast-$version-py3-none-any.whl
sdist=$dist/python/holdfast-$version.tar.gz
for f in "$wheel" "$sdist"; do
	[ -f "$f" ] || { echo "test-python: $f not found: run make dist-python" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/holdfast-release-python.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/python/take_lock.py" "$root/sdk-python/tests/exit_child.py" "$work/"
# The user's environment: nothing of the checkout on the path.
unset PYTHONPATH VIRTUAL_ENV PIP_REQUIRE_VIRTUALENV
export PIP_DISABLE_PIP_VERSION_CHECK=1

step() { printf '\n== test-python: %s\n' "$*"; }
# run prints a command, as a user would type it, and runs it.
run() { printf '$ %s\n' "$*"; "$@"; }
fail() { echo "test-python: FAIL: $*" >&2; exit 1; }

# interpreter V: a python$V that runs (a pyenv shim may exist and refuse).
interpreter() {
	local v=$1 p
	for p in $(command -v "python$v") "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v"; do
		if [ -x "$p" ] && "$p" -c '' 2>/dev/null; then echo "$p"; return; fi
	done
	return 1
}

# try VENV: takes the lock with the holdfast that VENV installed.
try() {
	local venv=$1 out
	cd "$work"
	out=$(run "$venv/bin/python" take_lock.py "$version") || fail "take_lock.py failed in $venv"
	echo "$out"
	grep -q "^holdfast $version from $venv/" <<<"$out" || fail "holdfast was not imported from $venv"
}

# exits VENV N: N short-lived programs (sdk-python/tests/exit_child.py: unlock
# and exit, exit while a watchdog renews), two at a time; every exit status
# must be 0 (the SDK's own test runs 220 in its dev venv).
exits() {
	local venv=$1 n=$2 statuses
	printf '$ %s\n' "$venv/bin/python exit_child.py \$HOLDFAST_ADDR {unlock,watchdog,blocking-watchdog}  # $n runs"
	cd "$work"
	statuses=$(for i in $(seq 1 "$n"); do echo "unlock watchdog blocking-watchdog" | cut -d' ' -f$((i % 3 + 1)); done |
		xargs -P2 -I{} sh -c '"$1/bin/python" exit_child.py "$HOLDFAST_ADDR" "$2" >/dev/null 2>&1; echo $?' _ "$venv" {} | sort | uniq -c)
	echo "exit statuses (count status): $(echo $statuses)"
	[ "$(echo $statuses)" = "$n 0" ] || fail "not every program exited 0"
}

for v in 3.10 3.11; do
	py=$(interpreter "$v") || fail "python$v not found (PATH, pyenv)"
	step "Python $v ($py): a fresh venv installs the wheel"
	run "$py" -m venv "$work/venv-$v"
	run "$work/venv-$v/bin/python" -m pip install --quiet "$wheel"
	run "$work/venv-$v/bin/python" -m pip list --format=freeze
	try "$work/venv-$v"
	exits "$work/venv-$v" 20
done

step "Python 3.11: a fresh venv installs the sdist"
run "$(interpreter 3.11)" -m venv "$work/venv-sdist"
run "$work/venv-sdist/bin/python" -m pip install --quiet "$sdist"
try "$work/venv-sdist"

step "passed: the wheel on Python 3.10 and 3.11, the sdist on 3.11"
