#!/bin/bash
# make demo: the most real end-to-end run the code can do today.
# usage: tests/demo.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

step "$build/tkbox" --version
step "$build/tkbox-signer" --version
step "$build/tkbox-guest-linux-amd64" --version
