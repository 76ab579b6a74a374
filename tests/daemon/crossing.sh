#!/bin/sh
# The crossing engine against a real dev signer: init and serve one in a
# temporary directory, then run the engine's test with its socket and pid
# (the last test kills the signer on purpose).
# usage: crossing.sh BUILD_DIR
set -eu
build=$1
work=$(mktemp -d)
pid=
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || :; fi; rm -rf "$work"' EXIT
"$build/tkbox-signer" init --dev --dir "$work/signer" >/dev/null
"$build/tkbox-signer" serve --dir "$work/signer" --socket "$work/signer.sock" >"$work/signer.log" 2>&1 &
pid=$!
i=0
until [ -S "$work/signer.sock" ] && "$build/tkbox-signer" status --dir "$work/signer" --socket "$work/signer.sock" \
	>/dev/null 2>&1; do
	i=$((i + 1))
	if [ "$i" -gt 100 ]; then
		echo "the signer did not start:" >&2
		cat "$work/signer.log" >&2
		exit 1
	fi
	sleep 0.1
done
"$build/tests/daemon/test-daemon-crossing" "$work/signer.sock" "$pid"
