#!/usr/bin/env bash
# What make test-ops (the operators' artifacts) needs, installed if missing:
#   - podman and runc from Debian, to run the container image (rootful;
#     runc because crun refuses this kind of machine's hybrid cgroups);
#   - systemd-nspawn and debootstrap, and a minimal Debian to boot, to start
#     the package's unit under a real systemd;
#   - the pinned Go tools, built into bin/ from the Go module proxy:
#     holdfast-image (tools/ops, our go-containerregistry image builder),
#     nfpm and kustomize (tools/ops), kubectl-validate (tools/kubectl-validate:
#     Kubernetes' own schemas, embedded, offline) and promtool
#     (tools/promtool). Each of the last two is a module of its own, so their
#     Kubernetes and Prometheus dependencies never move anyone else's.
# Idempotent: a tool already built from its pinned version is left alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 ||
	! command -v systemd-nspawn >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
	export DEBIAN_FRONTEND=noninteractive
	pkgs=(podman runc netavark aardvark-dns iptables uidmap slirp4netns systemd-container debootstrap)
	install() { $SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}"; }
	if ! install; then
		$SUDO apt-get update -q
		install
	fi
fi

# A minimal Debian of this machine's release with systemd, booted under
# systemd-nspawn by the package's test: this machine's PID 1 is not
# systemd, so that is where the unit runs under a real one. Made once per
# machine (about 250 MB, a minute); tests boot it with --volatile=overlay,
# so they never change it.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
nspawn_root=${HOLDFAST_OPS_NSPAWN_ROOT:-/var/cache/holdfast/nspawn-$codename}
if [ ! -e "$nspawn_root/.holdfast-ready" ]; then
	mirror=$(awk '$1 == "URIs:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
	echo "debootstrap $codename into $nspawn_root (${mirror:-http://deb.debian.org/debian})"
	$SUDO rm -rf "$nspawn_root.tmp"
	$SUDO mkdir -p "$(dirname "$nspawn_root")"
	$SUDO debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus "$codename" "$nspawn_root.tmp" "${mirror:-http://deb.debian.org/debian}"
	$SUDO touch "$nspawn_root.tmp/.holdfast-ready"
	$SUDO mv "$nspawn_root.tmp" "$nspawn_root"
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
