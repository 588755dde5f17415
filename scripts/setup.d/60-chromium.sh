#!/usr/bin/env bash
# Chromium for the live view's browser test (web/, `make test-web`): Debian's
# `chromium` package at /usr/bin/chromium, driven by playwright-core with its
# executable path set. Playwright's own browser download is not used (it
# cannot reach its download hosts here, and a distro browser is what the
# machine keeps up to date). Installed only if missing; idempotent.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
install() { $SUDO apt-get install -y -q --no-install-recommends chromium fonts-liberation; }
# Refresh the package lists only when the install cannot find the package.
if ! install; then
	$SUDO apt-get update -q
	install
fi
command -v chromium >/dev/null
echo "setup: $(chromium --version 2>/dev/null || echo chromium installed)"
