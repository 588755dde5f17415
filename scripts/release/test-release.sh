#!/usr/bin/env bash
# test-release.sh DIST_DIR: every release path, from fresh projects outside
# the repository, with only DIST_DIR and the public registries (make
# test-release). The Go path is ours (test-go.sh); the npm and Python paths
# belong to the SDK packaging (test-npm.sh, test-python.sh) and run when their
# scripts are here.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIST_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
dist=$1

ran=()
for path in go npm python; do
	script=$here/test-$path.sh
	if [ ! -f "$script" ]; then
		echo "test-release: no scripts/release/test-$path.sh yet: the $path release path is not tested"
		continue
	fi
	echo "===== test-release: $path"
	start=$SECONDS
	bash "$script" "$dist"
	echo "===== test-release: $path passed in $((SECONDS - start))s"
	ran+=("$path")
done
echo "test-release: passed: ${ran[*]}"
