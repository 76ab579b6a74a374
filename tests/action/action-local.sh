#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The GitHub Action's steps (action/run.sh) run locally, one at a time as the runner would, with a simulated
# runner environment (a temp RUNNER_TEMP, GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, GITHUB_WORKSPACE = a small git
# checkout, GITHUB_ACTION_PATH), a real dev signer, daemon and one busybox box; the install step is replaced by
# TKA_BIN_DIR (this build's binaries). The "agent" prints workflow commands (::error::, ::add-mask::,
# ::set-output::, the v1 ##[...] form, an indented one, one on stderr, a guessed resume token, its own
# stop-commands) and writes files. tests/action/runner-sim.py applies GitHub's workflow-command semantics to each
# step's captured log and the test checks that none of the agent's commands took effect, that the resume came,
# and (controls) that the same lines do take effect without the stop, so the check can fail.
#
# usage: tests/action/action-local.sh BUILD SCENARIO
#   clean      the agent writes x.txt and exits 0: applied to GITHUB_WORKSPACE (applied=true, files=1)
#   sensitive  it also writes .github/workflows/x.yml: nothing applied, the checkout unchanged
#   fail       it writes x.txt and exits 7: resume still printed, nothing applied, the summary step fails
#   cancel     SIGINT to the run step's process group while the agent runs (as the runner cancels a step): the
#              resume is the log's last line, nothing applied, the bundle still verifies
#   denied     a policy (input policy) denies Write of denied.txt; the agent writes x.txt and denied.txt and exits
#              0: the dry run passes, the apply is refused by the signer and writes nothing (not even x.txt)
# shellcheck disable=SC2015,SC2016,SC2154 # && chains bail; the agent's lines are for the box's shell; pass/fail come from lib.sh
set -uo pipefail
BUILD=${1:?usage: action-local.sh BUILD SCENARIO}
SCEN=${2:?usage: action-local.sh BUILD SCENARIO}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/daemon/lib.sh
source "$HERE/../daemon/lib.sh"
T0=$(t)
PY=/usr/bin/python3

RT=$WORK/runner-temp
TKA=$RT/tkbox-action
export RUNNER_TEMP=$RT
export GITHUB_WORKSPACE=$WORK/checkout
export GITHUB_OUTPUT=$WORK/github-output
export GITHUB_STEP_SUMMARY=$WORK/step-summary.md
export GITHUB_ACTION_PATH=$SRC/action
export GITHUB_RUN_ID=4242
export TKA_BIN_DIR=$BUILD
unset GITHUB_ENV GITHUB_PATH RUNNER_ENVIRONMENT

cleanup() {
	bash "$GITHUB_ACTION_PATH/run.sh" cleanup >>"$WORK/step-cleanup.log" 2>&1
	[ -s "$TKA/state/accel-probe" ] && cp "$TKA/state/accel-probe" "$PROBE" 2>/dev/null
	lib_cleanup
}
trap cleanup EXIT
bail() {
	echo "Bail out! $*"
	for f in "$WORK"/step-*.log "$TKA/daemon.log"; do
		[ -f "$f" ] && { echo "# --- $f"; tail -15 "$f" | sed 's/^/#   /'; }
	done
	exit 1
}

# The checkout (the box's /workspace, and where apply writes).
mkdir -p "$GITHUB_WORKSPACE" && (cd "$GITHUB_WORKSPACE" && git init -q -b main . && printf '# project\n' >README.md &&
	git add README.md && git -c user.name=t -c user.email=t@test.invalid commit -qm init) || bail "git checkout"
: >"$GITHUB_OUTPUT"
: >"$GITHUB_STEP_SUMMARY"
IMG=$(image_path) || bail "no busybox image"
# The state dir seeded as tests/daemon/lib.sh does: the shared guest-kernel cache and accelerator verdict.
mkdir -p "$TKA" && mkdir -m 0700 "$TKA/state" && mkdir -p "$TKA/state/images" "$ASSETS" &&
	ln -s "$ASSETS" "$TKA/state/images/assets" || bail "state dir"
[ -s "$PROBE" ] && cp "$PROBE" "$TKA/state/accel-probe"

GUESS=0123456789abcdef0123456789abcdef
# The agent (a generic one: agent-command, prompt on stdin, agent-install). Its lines are the attack.
AGENT_CMD='p=$(cat); echo "prompt: $p"
echo "::error::pwned"
echo "::add-mask::secret-ish"
echo "::set-output name=x::y"
echo "   ::warning::indented-pwned"
echo "##[add-mask]v1-secret"
echo "text before ##[error]mid-line-pwned"
echo "::error::stderr-pwned" >&2
echo "::stop-commands::agenttoken"; echo "::error::after-own-stop"; echo "::agenttoken::"
echo "::'"$GUESS"'::"
echo "::error::after-guess"
printf "carriage\r::error::cr-pwned\n"
echo hi > /workspace/x.txt'
case "$SCEN" in
clean)
	# A secret through the secrets input: the box sees a placeholder; the value appears nowhere.
	export TEST_TOKEN=tka-test-value-$RANDOM$RANDOM$RANDOM
	export TKA_SECRETS=$'# a comment\n  TOKEN=TEST_TOKEN@api.example.invalid  \n'
	AGENT_CMD+=$'\necho "secret: $TOKEN"; printf "::error::no-newline-pwned"; exit 0'
	;;
sensitive) AGENT_CMD+=$'\nmkdir -p /workspace/.github/workflows && echo "on: push" > /workspace/.github/workflows/x.yml; exit 0' ;;
fail) AGENT_CMD+=$'\nprintf "::error::no-newline-pwned"; exit 7' ;;
cancel) AGENT_CMD+=$'\necho "::error::before-cancel-pwned"; echo AGENT-WAITING; exec sleep 120' ;;
denied)
	AGENT_CMD+=$'\necho no > /workspace/denied.txt; exit 0'
	cat >"$WORK/policy.yaml" <<'EOF'
version: 'tkbox-action-local-1'
description: 'action-local: the signer denies one file'
deny:
  - id: AL-DENY
    tool: Write
    field: path
    pattern: '/denied\.txt$'
    reason: 'action-local: a file the signer denies'
ask: []
flag: []
EOF
	export TKA_POLICY=$WORK/policy.yaml
	;;
*) bail "unknown scenario $SCEN" ;;
esac
export TKA_AGENT=sim TKA_AGENT_COMMAND=$AGENT_CMD TKA_AGENT_INSTALL='echo "::add-mask::install-pwned"'
export TKA_PROMPT='fix it; $(touch /workspace/pwned) `touch /workspace/pwned2` "'"'"
export TKA_IMAGE=$IMG TKA_MEMORY=256M TKA_CPUS=1 TKA_TIMEOUT=60s TKA_WORKSPACE=. TKA_APPLY=true

step() { # SUB: run one step as the runner would (stdout and stderr to one log), record its exit status
	bash "$GITHUB_ACTION_PATH/run.sh" "$1" >"$WORK/step-$1.log" 2>&1
	echo $? >"$WORK/step-$1.rc"
}
for s in setup-kvm install start; do
	step $s
	[ "$(cat "$WORK/step-$s.rc")" = 0 ] || bail "step $s failed"
done
if [ "$SCEN" = cancel ]; then
	# As the runner cancels a step: SIGINT to the step's process group (bash and tkbox exec) while the agent runs.
	# (A background job of a script starts with SIGINT ignored; a runner's step does not: reset it.)
	setsid "$PY" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' bash "$GITHUB_ACTION_PATH/run.sh" run >"$WORK/step-run.log" 2>&1 &
	rpid=$!
	for _ in $(seq 600); do grep -q AGENT-WAITING "$WORK/step-run.log" && break; sleep 0.1; done
	grep -q AGENT-WAITING "$WORK/step-run.log" || bail "the agent did not start"
	kill -INT -- -"$rpid"
	wait "$rpid"
	echo $? >"$WORK/step-run.rc"
	for s in stop apply export cleanup summary; do step $s; done
else
	for s in run stop apply export cleanup summary; do step $s; done
fi
echo "# steps done in $(elapsed "$T0") s"

sim() { "$PY" "$HERE/runner-sim.py" "$1"; }
jqs() { sim "$1" | jq -r "$2"; }
outs() { # NAME: a step output as the runner reads GITHUB_OUTPUT (NAME<<DELIM ... DELIM, or NAME=VALUE)
	"$PY" - "$GITHUB_OUTPUT" "$1" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
out, i = {}, 0
while i < len(lines):
    l = lines[i]
    if "<<" in l and ("=" not in l or l.index("<<") < l.index("=")):
        k, d = l.split("<<", 1)
        j = lines.index(d, i + 1)
        out[k] = "\n".join(lines[i + 1:j])
        i = j + 1
    else:
        if "=" in l:
            k, v = l.split("=", 1)
            out[k] = v
        i += 1
print(out.get(sys.argv[2], "<unset>"))
PY
}

RUNLOG=$WORK/step-run.log
# --- the agent ran and its lines reached the log -------------------------------------------------------------------
check "the agent's ::error::pwned line is in the run step's log" grep -qF '::error::pwned' "$RUNLOG"
check "its ::add-mask:: and ::set-output:: lines too" grep -qF '::set-output name=x::y' "$RUNLOG"
check "its stderr line too (stderr joined to stdout)" grep -qF '::error::stderr-pwned' "$RUNLOG"
check "the prompt reached the agent on stdin, unexpanded" grep -qF 'prompt: fix it; $(touch /workspace/pwned)' "$RUNLOG"

# --- the runner emulator: nothing the agent printed took effect ---------------------------------------------------
E=$WORK/run.effects.json
sim "$RUNLOG" >"$E"
token=$(jq -r '.stops[0] // ""' "$E")
check "one stop-commands with a 32-hex random token (got '$token')" \
	test "$(jq '.stops | length' "$E")" = 1 -a "${#token}" = 32
check "the guessed token is not the token" test "$token" != "$GUESS"
check "commands resumed with that token, not stopped at the step's end" \
	test "$(jq -r '.resumes | join(",")' "$E")" = "$token" -a "$(jq .stopped_at_end "$E")" = false
check "the agent's commands were read as commands and ignored (>= 10)" test "$(jq .ignored_while_stopped "$E")" -ge 10
bad=$(jq -r '[.annotations[] | select(.message | test("pwned|after-guess|after-own-stop"))] | length' "$E")
check "no annotation of the agent's (::error::, ::warning::, v1, stderr, after a guessed resume)" test "$bad" = 0
check "no mask of the agent's (::add-mask::, ##[add-mask], the install command's)" \
	test "$(jq '[.masks[] | select(test("secret-ish|v1-secret|install-pwned"))] | length' "$E")" = 0
check "no step output, env or path set from the log" \
	test "$(jq '(.outputs | length) + (.env | length) + (.paths | length)' "$E")" = 0
# Controls: the same log with the stop line removed, or with the agent's guess being the real token.
grep -vF "::stop-commands::$token" "$RUNLOG" >"$WORK/control1.log"
check "control: without the stop, the emulator finds the agent's error, mask and output" \
	test "$(jqs "$WORK/control1.log" '[(.annotations[] | select(.message == "pwned")), (.masks[] | select(. == "secret-ish")), (.outputs.x // empty)] | length')" = 3
sed "s/::$GUESS::/::$token::/" "$RUNLOG" >"$WORK/control2.log"
check "control: had the agent guessed the token, its later ::error:: would count" \
	test "$(jqs "$WORK/control2.log" '[.annotations[] | select(.message == "after-guess")] | length')" = 1
for s in stop apply export; do
	sim "$WORK/step-$s.log" >"$WORK/$s.effects.json"
	check "step $s: every stop resumed, nothing of the log's took effect but run.sh's own lines" test \
		"$(jq '(.stops | length) == (.resumes | length) and (.stopped_at_end | not) and (.outputs | length) == 0 and ([.annotations[] | select(.message | test("pwned"))] | length) == 0' \
			"$WORK/$s.effects.json")" = true
done
check "the box's file names (x.txt) reached the stop step's log (tkbox diff --stat), inside its stopped region" \
	grep -qF 'x.txt' "$WORK/step-stop.log"

# --- outputs, bundle, summary ------------------------------------------------------------------------------------------
bundle=$(outs bundle)
check "GITHUB_OUTPUT: bundle is a file ($bundle)" test -s "$bundle"
check "GITHUB_OUTPUT: verdict VERIFIED" test "$(outs verdict)" = VERIFIED
check "GITHUB_OUTPUT: assurance is dev ($(outs assurance | cut -c1-40)...)" grep -q '^dev;' <<<"$(outs assurance)"
iso=$(outs isolation)
check "GITHUB_OUTPUT: isolation is the box's (kvm or emulated: $iso)" grep -qxE 'kvm|emulated' <<<"$iso"
check "GITHUB_OUTPUT: no output x" test "$(outs x)" = "<unset>"
verifies() { "$BUILD/tkbox" verify "$1" --trust "$2" >"$WORK/verify.out" 2>&1; }
check "the bundle verifies with its trust file" verifies "$bundle" "$(outs trust)"
check "the artifact dir holds the bundle, trust file and patch" \
	test -s "$(outs artifact-dir)/$(basename "$bundle")" -a -s "$(outs artifact-dir)/patch.diff"
check "the summary names the verdict and isolation" grep -q "verdict | VERIFIED" "$GITHUB_STEP_SUMMARY"
if [ "$iso" = emulated ]; then
	check "isolation emulated: the summary says so" grep -qF '**isolation: emulated**' "$GITHUB_STEP_SUMMARY"
fi
sim "$WORK/step-summary.log" >"$WORK/summary.effects.json"
case "$SCEN" in
clean)
	check "clean: exit-code 0" test "$(outs exit-code)" = 0
	check "clean: the secrets input gave the box a placeholder for TOKEN" grep -qE '^secret: tkbox_TOKEN_[0-9a-f]{32}$' "$RUNLOG"
	mkdir -p "$WORK/bundle-x" && "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
		"$bundle" "$WORK/bundle-x"
	check "clean: the secret's value is in no log, output, summary, patch or bundle (extracted)" test -s \
		"$WORK/bundle-x/manifest.json" -a -z "$(grep -rlF "$TEST_TOKEN" "$WORK"/step-*.log "$GITHUB_OUTPUT" \
		"$GITHUB_STEP_SUMMARY" "$TKA/out" "$WORK/bundle-x" 2>/dev/null)"
	check "clean: applied=true, files=1" test "$(outs applied)/$(outs files)" = true/1
	check "clean: x.txt written into GITHUB_WORKSPACE" test "$(cat "$GITHUB_WORKSPACE/x.txt" 2>/dev/null)" = hi
	check "clean: the checkout holds only that new file" \
		test "$(git -C "$GITHUB_WORKSPACE" status --porcelain | tr '\n' ' ')" = "?? x.txt "
	check "clean: the summary step passes and its notice counts (commands are not stopped there)" \
		test "$(cat "$WORK/step-summary.rc")" = 0 -a "$(jq '[.annotations[] | select(.level == "notice")] | length' \
			"$WORK/summary.effects.json")" = 1
	;;
sensitive)
	check "sensitive: the dry run's refusal naming the file reached the apply step's log" \
		grep -qF '.github/workflows/x.yml' "$WORK/step-apply.log"
	check "sensitive: applied=false" test "$(outs applied)/$(outs files)" = false/0
	check "sensitive: the checkout is unchanged" test -z "$(git -C "$GITHUB_WORKSPACE" status --porcelain --ignored)"
	check "sensitive: the summary says why (the dry run refused it, rule sensitive)" grep -q 'rule sensitive' "$GITHUB_STEP_SUMMARY"
	check "sensitive: the patch names the workflow file, HTML-escaped in the summary" \
		grep -qF '.github/workflows/x.yml' "$GITHUB_STEP_SUMMARY"
	;;
fail)
	check "fail: exit-code 7" test "$(outs exit-code)" = 7
	check "fail: applied=false, the checkout unchanged" \
		test "$(outs applied)" = false -a -z "$(git -C "$GITHUB_WORKSPACE" status --porcelain --ignored)"
	check "fail: run.sh's own ::error:: after the resume counts (the resume worked)" \
		test "$(jq '[.annotations[] | select(.message | test("exited with status 7"))] | length' "$E")" = 1
	check "fail: the summary step fails" test "$(cat "$WORK/step-summary.rc")" = 1
	;;
cancel)
	# tkbox exec forwards the SIGINT to the command and exits 130; bash, which got the SIGINT too, then runs its
	# INT trap: the resume, exit-code 130 (action-trap covers an agent that dies of the signal itself).
	check "cancel: the run step ended with 130 (its INT trap)" test "$(cat "$WORK/step-run.rc")" = 130
	check "cancel: the agent's command ended by the SIGINT (exit-code $(outs exit-code))" test "$(outs exit-code)" = 130
	check "cancel: the resume comes after the agent's last line" test "$(grep -nxF "::$token::" "$RUNLOG" |
		cut -d: -f1)" -gt "$(grep -nF AGENT-WAITING "$RUNLOG" | tail -1 | cut -d: -f1)"
	check "cancel: nothing applied, the checkout unchanged" \
		test "$(outs applied)" = false -a -z "$(git -C "$GITHUB_WORKSPACE" status --porcelain --ignored)"
	check "cancel: the summary step fails" test "$(cat "$WORK/step-summary.rc")" = 1
	;;
denied)
	check "denied: the dry run passed and the apply ran: the signer's refusal is in the apply step's log" \
		grep -q 'AL-DENY' "$WORK/step-apply.log"
	check "denied: applied=false, files=0" test "$(outs applied)/$(outs files)" = false/0
	check "denied: nothing written, not even the allowed x.txt" \
		test -z "$(git -C "$GITHUB_WORKSPACE" status --porcelain --ignored)"
	writes=$("$PY" - "$bundle" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
ev = [json.loads(l)["event"] for n in z.namelist() if n.startswith("runs/") for l in z.read(n).decode().splitlines()]
w = [e["data"] for e in ev if e.get("type") == "policy.decision" and e["data"].get("tool") == "Write"]
print(" ".join(sorted("%s:%s" % (d.get("decision"), ",".join(d.get("rule_ids") or [])) for d in w)))
PY
)
	check "denied: the bundle holds the signer's deny of a Write (AL-DENY) ($writes)" grep -q 'deny:AL-DENY' <<<"$writes"
	check "denied: the summary step passes (the agent succeeded, the bundle verifies; nothing applied is no failure)" \
		test "$(cat "$WORK/step-summary.rc")" = 0
	;;
esac
dpid=$(cat "$TKA/daemon.pid" 2>/dev/null)
check "the cleanup step stopped the daemon (pid $dpid) and the signer" test -n "$dpid" -a -z "$(pgrep -f \
	"tkbox(-signer)? .*$(basename "$WORK")/runner-temp" || true)"
check "no QEMU left after cleanup" test -z "$(pgrep -f "qemu-system.*$(basename "$WORK")" || true)"
echo "# action-local $SCEN: $(elapsed "$T0") s in all"
echo "1..$((pass + fail))"
[ "$fail" = 0 ]
