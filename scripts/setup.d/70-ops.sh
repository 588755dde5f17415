#!/usr/bin/env bash
# What make test-ops (the operators' artifacts) needs, installed if missing:
#   - podman and runc from Debian, to run the container image (rootful;
#     runc because crun refuses this kind of machine's hybrid cgroups);
#   - the pinned Go tools, built into bin/ from the Go module proxy:
#     holdfast-image (tools/ops, our go-containerregistry image builder),
#     nfpm and kustomize (tools/ops), kubectl-validate (tools/kubectl-validate:
#     Kubernetes' own schemas, embedded, offline) and promtool
#     (tools/promtool). Each of the last two is a module of its own, so their
#     Kubernetes and Prometheus dependencies never move anyone else's.
# Idempotent: a tool already built from its pinned version is left alone.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
	export DEBIAN_FRONTEND=noninteractive
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
	pkgs=(podman runc netavark aardvark-dns iptables uidmap slirp4netns)
	install() { $SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}"; }
	if ! install; then
		$SUDO apt-get update -q
		install
	fi
fi

mkdir -p bin
# built MODULE_DIR BINARY MODULE: true when bin/BINARY was built from the
# version of MODULE that MODULE_DIR/go.mod pins.
built() {
	local want have
	want=$(awk -v m="$3" '$1 == m { print $2; exit }' "$1/go.mod")
	[ -x "bin/$2" ] || return 1
	have=$(go version -m "bin/$2" 2>/dev/null | awk -v m="$3" '($1 == "mod" || $1 == "dep") && $2 == m { print $3; exit }')
	[ -n "$want" ] && [ "$have" = "$want" ]
}
tool() { # MODULE_DIR BINARY MODULE PACKAGE
	if built "$1" "$2" "$3"; then
		echo "$2 $(awk -v m="$3" '$1 == m { print $2; exit }' "$1/go.mod") already in bin/"
		return
	fi
	echo "building $2 ($4, pinned in $1/go.mod)"
	(cd "$1" && GOWORK=off go build -o "../../bin/$2" "$4")
}
(cd tools/ops && GOWORK=off go build -o ../../bin/holdfast-image ./cmd/holdfast-image)
tool tools/ops nfpm github.com/goreleaser/nfpm/v2 github.com/goreleaser/nfpm/v2/cmd/nfpm
tool tools/ops kustomize sigs.k8s.io/kustomize/kustomize/v5 sigs.k8s.io/kustomize/kustomize/v5
tool tools/kubectl-validate kubectl-validate sigs.k8s.io/kubectl-validate sigs.k8s.io/kubectl-validate
tool tools/promtool promtool github.com/prometheus/prometheus github.com/prometheus/prometheus/cmd/promtool
