# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The patch door's end-to-end harness (issue 14), on top of tests/daemon/lib.sh (its dev signer, daemon, busybox
# image, TAP helpers ok/notok/check and bundle_counts). Source it with BUILD set; the script sets
# `trap pt_cleanup EXIT`. Used by tests/patch/patch-e2e.sh and patch-crash.sh (and free for the other patch suites).
#
#   pt_git ARGS...          git with a fixed identity and branch, no hooks, no pager (for the test's own checkouts)
#   pt_checkout DIR         a git checkout, everything committed: text files (one without a final newline), a
#                           script, a binary file, a symlink, subdirectories
#   pt_policy FLAG_YAML     the signer's policy.yaml (call after signer_init, before signer_start): nothing denied,
#                           nothing asked, FLAG_YAML (rule items, two-space indented) as the flag list: a flag
#                           rule's id lands in the decision's rule_ids, which is how the tests see a Write
#                           decision's arguments (the bundle holds only their commitment)
#   pt_flag ID FIELD PATTERN  one flag rule for tool Write on FIELD (a YAML item for pt_policy)
#   pt_start                image (IMG), signer (after pt_policy), daemon (its args: "$@"); bails out on failure
#   pt_box NAME CHECKOUT [ARGS...]   tkbox run the busybox image with --workspace CHECKOUT
#   pt_manifest DIR         one line per file or symlink under DIR, sorted, any path with a .git segment (any case)
#                           left out: {"path", "type": "file"|"link", "mode": "100644"|"100755"|"120000",
#                           "sha256": of the bytes or of the link target}
#   pt_snapshot DIR         pt_manifest of everything, .git included, plus directories (for "nothing was written")
#   pt_box_tree BOX DEST    the box's /workspace as it is now (tar through tkbox exec), extracted into DEST
#   pt_sha256 PATH          sha256 of a file's bytes, or of a symlink's target (what a Write decision names)
#   pt_descendants PID      every process below PID, one pid a line
#   pt_writer_pid           the `tkbox-host apply write` child of this test's daemon (none: empty)
#   pt_proc_state PID       the state letter of /proc/PID/stat (R, S, T, Z...), empty when gone
#   pt_bundle_writes FILE   one JSON line per Write decision of the bundle: {"decision_id", "decision", "rule_ids",
#                           "result": {"ok", "written_paths", "error"} | null}
#   pt_bundle_events FILE   every record of the bundle's run as {"type", "data"} (one a line)

: "${BUILD:?BUILD must name the build directory}"
PT_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../daemon/lib.sh
source "$PT_HERE/../daemon/lib.sh"
# shellcheck disable=SC2034 # used by the scripts that source this file (patch-hostile.sh)
HOSTBIN=$BUILD/tkbox-host
PT_KILL=() # pids this test must end itself (a writer it left stopped)

pt_cleanup() {
	local p
	for p in "${PT_KILL[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	lib_cleanup
}

pt_bail() {
	echo "Bail out! $*"
	[ -s "$WORK/daemon.log" ] && tail -20 "$WORK/daemon.log" | sed 's/^/#   /'
	exit 1
}

pt_git() {
	GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git -c user.name=pt -c user.email=pt@test.example \
		-c init.defaultBranch=main -c core.hooksPath=/dev/null -c core.pager=cat "$@"
}

pt_checkout() {
	local d=$1 i
	mkdir -p "$d" && (
		set -e
		cd "$d"
		pt_git init -q .
		for i in $(seq 1 20); do echo "line $i"; done >README.md
		echo "this file is deleted in the box" >old.txt
		mkdir -p tools src docs data
		printf '#!/bin/sh\necho build\n' >tools/build.sh
		chmod 0644 tools/build.sh
		printf '#!/bin/sh\necho run\n' >tools/run.sh
		chmod 0755 tools/run.sh
		printf 'int main(void) { return 0; }\n' >src/main.c
		printf 'int other(void) { return 1; }\n' >src/other.c
		printf 'a\nb' >src/nonl.txt
		printf '# Guide\n\nRead the README.\n' >docs/guide.md
		printf 'LOGO\0\1\2\3\0\377\376 first version\n' >data/logo.bin
		ln -s src/main.c link
		pt_git add -A
		pt_git commit -qm init
	)
}

pt_flag() {
	printf "  - id: %s\n    tool: Write\n    field: %s\n    pattern: '%s'\n    reason: 'patch tests: %s'\n" \
		"$1" "$2" "$3" "$1"
}

pt_policy() {
	{
		echo "version: 'tkbox-patch-tests-1'"
		echo "description: 'the patch door tests: everything allowed, Write arguments flagged by rule'"
		echo "deny: []"
		echo "ask: []"
		if [ -n "${1:-}" ]; then
			echo "flag:"
			printf '%s\n' "$1"
		else
			echo "flag: []"
		fi
	} >"$WORK/signer/policy.yaml"
}

pt_start() {
	IMG=$(image_path) || pt_bail "no image"
	signer_start || pt_bail "no signer"
	daemon_start "$@" || pt_bail "no daemon"
}

pt_box() {
	local name=$1 co=$2
	shift 2
	timeout --kill-after=10 900 "$TKBOX" run --image "$IMG" --name "$name" --workspace "$co" --memory 512M \
		--disk 256M "$@" </dev/null >"$WORK/run-$name.out" 2>"$WORK/run-$name.err"
}

pt_manifest() {
	python3 - "$1" "${2:-}" <<'PY'
import hashlib, json, os, stat, sys
root, everything = sys.argv[1], sys.argv[2] == "all"
out = []
for d, dirs, files in os.walk(root):
    rel_d = os.path.relpath(d, root)
    for n in sorted(dirs + files):
        p = os.path.join(d, n)
        rel = os.path.normpath(os.path.join(rel_d, n))
        if not everything and any(s.lower() == ".git" for s in rel.split(os.sep)):
            continue
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            t = os.readlink(p).encode("utf-8", "surrogateescape")
            out.append({"path": rel, "type": "link", "mode": "120000", "sha256": hashlib.sha256(t).hexdigest()})
        elif stat.S_ISREG(st.st_mode):
            with open(p, "rb") as f:
                h = hashlib.sha256(f.read()).hexdigest()
            e = {"path": rel, "type": "file", "mode": "100755" if st.st_mode & 0o100 else "100644", "sha256": h}
            if everything:
                e["perm"] = oct(st.st_mode & 0o7777)
            out.append(e)
        elif stat.S_ISDIR(st.st_mode):
            if everything:
                out.append({"path": rel, "type": "dir", "perm": oct(st.st_mode & 0o7777)})
        else:
            out.append({"path": rel, "type": "other"})
for e in sorted(out, key=lambda e: e["path"].encode("utf-8", "surrogateescape")):
    print(json.dumps(e, sort_keys=True))
PY
}

pt_snapshot() { pt_manifest "$1" all; }

pt_box_tree() {
	local box=$1 dest=$2
	mkdir -p "$dest" &&
		"$TKBOX" exec "$box" -- tar -C /workspace -cf - . >"$WORK/tree-$box.tar" 2>"$WORK/tree-$box.err" &&
		tar -C "$dest" --no-same-owner -xpf "$WORK/tree-$box.tar"
}

pt_sha256() {
	if [ -L "$1" ]; then
		printf '%s' "$(readlink "$1")" | sha256sum | cut -d' ' -f1
	else
		sha256sum <"$1" | cut -d' ' -f1
	fi
}

pt_descendants() {
	ps -e -o pid=,ppid= | awk -v root="$1" '
		{ parent[$1] = $2; pids[NR] = $1 }
		END {
			for (i = 1; i <= NR; i++) {
				p = pids[i]
				for (q = parent[p]; q > 1; q = parent[q]) if (q == root) { print p; break }
			}
		}'
}

pt_writer_pid() {
	local p cmd
	for p in $(pt_descendants "$DAEMON_PID"); do
		cmd=$({ tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null) || continue
		case "$cmd" in
		*" apply write"* | *" apply-write"*)
			echo "$p"
			return 0
			;;
		esac
	done
	return 1
}

pt_proc_state() { sed -n 's/^.*) \([A-Za-z]\).*$/\1/p' "/proc/$1/stat" 2>/dev/null; }

pt_bundle_events() {
	python3 - "$1" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in sorted(z.namelist()):
    if not n.startswith("runs/"):
        continue
    for line in z.read(n).decode().splitlines():
        e = json.loads(line)["event"]
        print(json.dumps({"type": e.get("type"), "data": e.get("data", {})}, sort_keys=True))
PY
}

pt_bundle_writes() {
	python3 - "$1" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
decs, res = [], {}
for n in sorted(z.namelist()):
    if not n.startswith("runs/"):
        continue
    for line in z.read(n).decode().splitlines():
        e = json.loads(line)["event"]
        t, d = e.get("type"), e.get("data", {})
        if t == "policy.decision" and d.get("tool") == "Write":
            decs.append(d)
        elif t == "tool.result":
            v = d.get("output", {}).get("value", {})
            res[d.get("decision_id")] = {"ok": d.get("ok"), "written_paths": v.get("written_paths"),
                                         "error": v.get("error"), "status": v.get("status")}
for d in decs:
    print(json.dumps({"decision_id": d.get("decision_id"), "decision": d.get("decision"),
                      "rule_ids": d.get("rule_ids") or [], "result": res.get(d.get("decision_id"))}, sort_keys=True))
PY
}
