#!/usr/bin/env bash
# Go modules for every module in the workspace and the pinned tools.
set -euo pipefail
go mod download
(cd tools && GOWORK=off go mod download)
