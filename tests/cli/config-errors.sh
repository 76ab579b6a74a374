#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tkbox run's refusals of a bad tkbox.yaml, as a user sees them (no daemon, no VM: each is refused before the
# CLI asks the daemon anything): FILE:LINE:COL for an unknown key (with the known keys), a duplicate key and a
# wrong type, a secret's value written in the file (never shown), --config/--no-config, a missing or oversized
# file, an unset env: source.
#   tests/cli/config-errors.sh TKBOX
set -u
TKBOX=${1:?usage: config-errors.sh TKBOX}
TKBOX=$(cd "$(dirname "$TKBOX")" && pwd)/$(basename "$TKBOX")
W=$(mktemp -d /tmp/tkbox-cfgerr.XXXXXX)
trap 'rm -rf "$W"' EXIT
export TKBOX_STATE_DIR=$W/no-daemon
unset TKBOX_SOCKET
pass=0 fail=0
# expect NAME EXIT-STATUS TEXT -- ARGS... (run in $W/d)
expect() {
	name=$1 want_rc=$2 want=$3
	shift 4
	(cd "$W/d" && "$TKBOX" run "$@" >"$W/out" 2>"$W/err")
	rc=$?
	if [ "$rc" -eq "$want_rc" ] && grep -qF -- "$want" "$W/err"; then
		echo "ok - $name"
		pass=$((pass + 1))
	else
		echo "not ok - $name"
		echo "#   exit $rc (want $want_rc); stderr: $(head -c 600 "$W/err")"
		echo "#   want: $want"
		fail=$((fail + 1))
	fi
}
mkdir -p "$W/d"

printf 'version: 1\nimage: busybox\nimgae: x\n' >"$W/d/tkbox.yaml"
expect "./tkbox.yaml is read: an unknown key with line:col and the known keys" 2 \
	'tkbox run: tkbox.yaml:3:1: unknown key "imgae"; the known keys are: version, image, name, workspace, inspect, allow, secrets, env, limits, mcp' --
expect "--no-config ignores ./tkbox.yaml (then --image is needed)" 2 \
	'tkbox run: no image: give --image IMG or image: in tkbox.yaml' -- --no-config
expect "--config and --no-config together are refused" 2 'usage: tkbox run' -- --config x.yaml --no-config
rm "$W/d/tkbox.yaml"

printf 'version: 1\nimage: busybox\nimage: alpine\n' >"$W/d/dup.yaml"
expect "a duplicate key" 2 'tkbox run: dup.yaml:3:1: image is given twice (duplicate key)' -- --config dup.yaml
printf 'version: 1\nlimits: 2G\n' >"$W/d/type.yaml"
expect "a wrong type" 2 'tkbox run: type.yaml:2:9: limits: expected a mapping of memory, cpus, disk, timeout, exec_timeout, found a scalar' \
	-- --config type.yaml
printf 'version: 1\nlimits:\n  cpus: many\n' >"$W/d/range.yaml"
expect "a value the flag's parser refuses" 2 'range.yaml:3:9: limits.cpus: not a valid value' -- --config range.yaml
printf 'version: 1\nimage: &i busybox\n' >"$W/d/anchor.yaml"
expect "an anchor" 2 'anchor.yaml:2:8: anchors (&name) are not accepted' -- --config anchor.yaml
printf 'version: 1\nsecrets:\n  GH: ghp_literal0value0in0the0file@api.github.com\n' >"$W/d/lit.yaml"
expect "a secret's value in the file is refused" 2 \
	'lit.yaml:3:7: secrets.GH: the source must be env:VAR, file:PATH or stdin; a secret'"'"'s value is never written in tkbox.yaml (the text given is not shown)' \
	-- --config lit.yaml
if ! grep -q "is never written" "$W/err" || grep -q literal0value "$W/err"; then
	echo "not ok - the refusal quotes the value"
	fail=$((fail + 1))
else
	echo "ok - the refusal does not quote the value"
	pass=$((pass + 1))
fi
printf 'version: 1\nimage: busybox\nsecrets:\n  GH: {source: env:TKBOX_TEST_UNSET_VAR, hosts: [api.github.com]}\n' \
	>"$W/d/unset.yaml"
expect "an env: source that is not set" 2 \
	'--secret GH: the variable named after env: is not set (secrets.GH in '"$W"'/d/unset.yaml)' -- --config unset.yaml
expect "a missing --config file" 2 'tkbox run: missing.yaml: No such file or directory' -- --config missing.yaml
{ printf 'version: 1\n'; head -c 65536 /dev/zero | tr '\0' '#'; } >"$W/d/big.yaml"
expect "a file over CONFIG_FILE_MAX" 2 'tkbox run: big.yaml: more than 65536 bytes (CONFIG_FILE_MAX)' -- --config big.yaml
echo "# $pass passed, $fail failed"
[ "$fail" -eq 0 ]
