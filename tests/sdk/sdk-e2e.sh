#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# sdk-e2e (issue 15): the Python SDK from a checkout, against a real signer, daemon and box.
#   1. a venv (Debian's python3 -m venv --system-site-packages, under the build dir: Debian's pytest, no index);
#      `pip install --no-build-isolation ./sdk/python` with the index pointed at a closed port (so a package index
#      it tried to reach would fail the test), then again with --no-index; the installed tkbox is the venv's copy
#      and requires nothing;
#   2. a dev signer and a daemon (tests/daemon/lib.sh), the cached busybox image;
#   3. pytest (the venv's python, Debian's pytest) over tests/sdk: test_unit.py (no daemon) and test_e2e.py (one box).
#   tests/sdk/sdk-e2e.sh BUILD_DIR        (root; about a minute under TCG)
set -u
BUILD=${1:?usage: sdk-e2e.sh BUILD_DIR}
source "$(cd "$(dirname "$0")/../daemon" && pwd)/lib.sh"
trap lib_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
export PYTHONDONTWRITEBYTECODE=1
# Nothing but the checkout: no wheel directory or index from the environment.
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_NO_INDEX

PY=/usr/bin/python3
if ! "$PY" -c 'import pytest, venv, setuptools' 2>/dev/null; then
	echo "Bail out! Debian's python3-pytest, python3-venv and python3-setuptools are needed (make deps)"
	exit 1
fi

T0=$(t)
# The venv is kept in the build dir between runs (made again when its python is not this one); the package is
# uninstalled first, so each run installs it afresh.
VENV=$BUILD/tests/sdk/venv
base=$("$VENV/bin/python" -c 'import os, sys; print(os.path.realpath(sys._base_executable))' 2>/dev/null)
if ! [ -x "$VENV/bin/pip" ] || [ "$base" != "$(realpath "$PY")" ]; then
	rm -rf "$VENV"
	mkdir -p "$(dirname "$VENV")"
	"$PY" -m venv --system-site-packages "$VENV" >"$WORK/venv.log" 2>&1 || {
		echo "Bail out! python3 -m venv failed: $(tail -3 "$WORK/venv.log")"
		exit 1
	}
fi
"$VENV/bin/pip" uninstall -q -y tkbox >/dev/null 2>&1
check "no tkbox in the venv before the install" eval "! (cd / && '$VENV/bin/python' -c 'import tkbox' 2>/dev/null)"
# setuptools builds in the tree: its build/ and egg-info (gitignored) are removed around each install so that a
# stale copy of a deleted module is never installed.
tidy() { rm -rf "$SRC/sdk/python/build" "$SRC/sdk/python/tkbox.egg-info"; }
tidy
# Exactly the documented command, from the checkout's root; an index at a closed port proves none is needed.
if (cd "$SRC" && "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation \
	--index-url http://127.0.0.1:9/simple --retries 0 ./sdk/python) >"$WORK/pip1.log" 2>&1; then
	ok "pip install --no-build-isolation ./sdk/python (no reachable index)"
else
	notok "pip install --no-build-isolation ./sdk/python" "$(tail -5 "$WORK/pip1.log")"
fi
if (cd "$SRC" && "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-index \
	--force-reinstall ./sdk/python) >"$WORK/pip2.log" 2>&1; then
	ok "pip install --no-build-isolation --no-index ./sdk/python"
else
	notok "pip install --no-build-isolation --no-index ./sdk/python" "$(tail -5 "$WORK/pip2.log")"
fi
tidy
where=$(cd / && "$VENV/bin/python" -c 'import tkbox; print(tkbox.__file__)' 2>&1)
check "the venv imports its installed copy ($where)" eval "[[ '$where' == '$VENV'/lib/python3*/site-packages/tkbox/__init__.py ]]"
requires=$(cd / && "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.requires("tkbox"))' 2>&1)
check "tkbox requires nothing but the standard library (requires: ${requires})" test "$requires" = None
echo "# venv and install in $(elapsed "$T0") s"

IMG=$(image_path) || { echo "Bail out! no image"; exit 1; }
signer_init || { echo "Bail out! no signer"; exit 1; }
# One ask rule (as tests/daemon/e2e.sh): a command line holding "ask-me" waits for a person.
sed -i "s/^ask: \[\]$/ask:\n  - id: SDK-A001\n    tool: Bash\n    field: line\n    pattern: 'ask-me'\n    reason: 'sdk: a person decides'/" \
	"$WORK/signer/policy.yaml"
grep -q SDK-A001 "$WORK/signer/policy.yaml" || { echo "Bail out! the ask rule did not go into the policy"; exit 1; }
signer_start || { echo "Bail out! no signer"; exit 1; }
# The name the approval test approves resolves here, to a private address the door refuses once it is approved:
# no lookup leaves this host, and nothing is dialled.
daemon_start --resolve approve.sdk.invalid=10.255.255.1 || { echo "Bail out! no daemon"; exit 1; }

# The client finds the socket as the CLI does: TKBOX_STATE_DIR (lib.sh set it), no TKBOX_SOCKET.
export TKBOX_SDK_IMAGE=$IMG TKBOX_SDK_TKBOX=$TKBOX TKBOX_SDK_WORK=$WORK TKBOX_SDK_SIGNER=$SIGNER
export TKBOX_SDK_SIGNER_DIR=$WORK/signer
T1=$(t)
# A hung call fails the test here, well inside meson's timeout, and the trap still stops the daemon.
(cd "$WORK" && timeout -k 10 200 "$VENV/bin/python" -m pytest -v -p no:cacheprovider --rootdir "$SRC/tests/sdk" \
	"$SRC/tests/sdk/test_unit.py" "$SRC/tests/sdk/test_e2e.py") >"$WORK/pytest.log" 2>&1
rc=$?
sed 's/^/#   | /' "$WORK/pytest.log" | grep -v '^#   | *$'
check "pytest: test_unit.py and test_e2e.py pass ($(grep -E '[0-9]+ (passed|failed)' "$WORK/pytest.log" | tail -1 | tr -d '='))" test $rc -eq 0
echo "# pytest in $(elapsed "$T1") s, all in $(elapsed "$T0") s"
if [ $rc -ne 0 ]; then
	echo "# daemon log tail:"
	tail -20 "$WORK/daemon.log" | sed 's/^/#   /'
fi

echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
