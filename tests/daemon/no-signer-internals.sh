#!/bin/sh
# The daemon's binary carries no signer internals: `tkbox` (CLI, daemon and
# supervisor) links the signer's client library only (client.c, paths.c), never
# its keys, store, policy engine or RPC service. Checked on the symbol table.
# usage: no-signer-internals.sh TKBOX_BINARY
set -eu
bin=${1:?usage: no-signer-internals.sh TKBOX_BINARY}
command -v nm >/dev/null || { echo "SKIP: nm not found"; exit 77; }
syms=$(nm --defined-only "$bin") || { echo "FAIL: nm $bin"; exit 1; }
# The client must be there, or this test looks at the wrong binary.
echo "$syms" | grep -q ' signer_client_open$' || { echo "FAIL: $bin has no signer_client_open"; exit 1; }
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
