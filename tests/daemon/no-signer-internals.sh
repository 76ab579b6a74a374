#!/bin/sh
# The daemon's binary carries no signer internals: `tkbox-host` (every command:
# the daemon, the per-box supervisor, the image and workspace children) links
# the signer's client library only (client.c, paths.c), never its keys, store,
# policy engine or RPC service. Checked on the symbol table.
# With LEAN_BINARY (`tkbox`, the lean client that execs tkbox-host for the
# rest): it needs neither libcurl nor libarchive (its start-up time is the
# price of every `tkbox exec`), links no daemon, and finds its tkbox-host.
# usage: no-signer-internals.sh TKBOX_HOST_BINARY [LEAN_BINARY]
set -eu
bin=${1:?usage: no-signer-internals.sh TKBOX_HOST_BINARY [LEAN_BINARY]}
lean=${2:-}
command -v nm >/dev/null || { echo "SKIP: nm not found"; exit 77; }
syms=$(nm --defined-only "$bin") || { echo "FAIL: nm $bin"; exit 1; }
# The client and the daemon must be there, or this test looks at the wrong binary.
for s in signer_client_open daemon_run; do
	echo "$syms" | grep -q " $s\$" || { echo "FAIL: $bin has no $s"; exit 1; }
done
bad=0
for s in signer_keys_load signer_config_parse signer_init_dir policy_decide policy_load service_handle \
	service_new store_open store_commit token_mint rpc_request_parse server_run; do
	if echo "$syms" | grep -q " $s\$"; then
		echo "FAIL: $bin defines $s (signer internals linked into the daemon)"
		bad=1
	fi
done
[ "$bad" = 0 ] || exit 1
echo "PASS: no signer internals in $bin"
[ -n "$lean" ] || exit 0

command -v readelf >/dev/null || { echo "SKIP: readelf not found"; exit 77; }
needed=$(readelf -d "$lean" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p') || { echo "FAIL: readelf $lean"; exit 1; }
# A lean binary that readelf reads as needing nothing is not the one meant here.
echo "$needed" | grep -q '^libc\.so' || { echo "FAIL: $lean needs no libc: not a dynamic tkbox"; exit 1; }
for l in libcurl libarchive libseccomp libsqlite3 libyaml; do
	if echo "$needed" | grep -q "^$l\\."; then
		echo "FAIL: $lean needs $l (the lean client must not; only tkbox-host may):" $needed
		bad=1
	fi
done
lsyms=$(nm --defined-only "$lean") || { echo "FAIL: nm $lean"; exit 1; }
echo "$lsyms" | grep -q ' apiclient_connect$' || { echo "FAIL: $lean has no apiclient_connect"; exit 1; }
for s in daemon_run signer_client_open image_resolve supervisor_main; do
	if echo "$lsyms" | grep -q " $s\$"; then
		echo "FAIL: $lean defines $s (the lean client links the daemon's side)"
		bad=1
	fi
done
[ "$bad" = 0 ] || exit 1
# It runs its own tkbox-host for the commands it does not have.
out=$("$lean" --help 2>&1) || { echo "FAIL: $lean --help: $out"; exit 1; }
echo "$out" | grep -q '^  daemon ' || { echo "FAIL: $lean --help does not list daemon (tkbox-host not run?): $out"; exit 1; }
# Alone in a directory, it says so instead of running some other tkbox-host (no $PATH lookup).
alone=$(mktemp -d /tmp/tkbox-lean.XXXXXX)
trap 'rm -rf "$alone"' EXIT
cp "$lean" "$alone/tkbox"
rc=0
out=$(PATH="$(dirname "$bin"):$PATH" "$alone/tkbox" daemon --help 2>&1) || rc=$?
[ "$rc" = 125 ] && echo "$out" | grep -q "tkbox-host is missing next to $alone/tkbox: reinstall" ||
	{ echo "FAIL: $alone/tkbox without tkbox-host: exit $rc: $out"; exit 1; }
echo "PASS: $lean needs only:" $needed
