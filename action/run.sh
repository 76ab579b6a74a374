#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The steps of the tkbox GitHub Action (action/action.yml), one subcommand each, so that every step also runs
# outside GitHub (tests/action/action-local.sh runs them with a simulated runner environment):
#
#   run.sh setup-kvm   the udev rule for /dev/kvm (GitHub-hosted runners), a KVM probe; TCG fallback in the summary
#   run.sh install     make deps + make build from the action's own checkout (skipped with TKA_BIN_DIR)
#   run.sh start       a dev signer and the daemon, state under $RUNNER_TEMP/tkbox-action
#   run.sh run         a box with the workspace; the agent (or the command) in it
#   run.sh stop        stop the box (saves its patch), write the patch to a file
#   run.sh apply       write the patch into the workspace when every file may be written (see below)
#   run.sh export      export the bundle and verify it against the signer's trust file
#   run.sh summary     the step summary; fails when the agent, the apply or the verify failed
#   run.sh cleanup     stop the daemon and the signer
#
# Inputs come from the environment only (action.yml maps each input to a TKA_* variable; nothing is
# interpolated into a script). Outputs go to $GITHUB_OUTPUT, the summary to $GITHUB_STEP_SUMMARY.
#
# Workflow commands: everything tkbox prints that the agent or the repository can shape (the agent's output,
# the file names stop, diff and apply print, tkbox's messages) is printed between `::stop-commands::TOKEN` and
# `::TOKEN::` (TOKEN: 128 random bits, a new one each time, never in the box), with stderr joined to stdout so the
# runner reads one ordered stream, and the resume is printed by a trap on every exit path (normal, error, INT,
# TERM, HUP). The runner's output, env and path files are files on the host: the agent runs in the VM and cannot
# reach them; run.sh alone writes them.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/.." && pwd)
: "${RUNNER_TEMP:?RUNNER_TEMP must be set (a GitHub runner sets it)}"
A=${TKA_DIR:-$RUNNER_TEMP/tkbox-action}
STATE_FILE=$A/state.env
OUT=$A/out
export TKBOX_STATE_DIR=$A/state
export TKBOX_SOCKET=$A/state/api/tkbox.sock
export TKBOX_SIGNER_SOCKET=$A/signer/run/signer.sock

die() {
	echo "tkbox action: $*" >&2
	exit 1
}

# ---- state shared between steps (each step is a new process) ----------------------------------------------------
st_set() { # KEY VALUE: KEY=VALUE in the state file, quoted for `source`
	[[ $1 =~ ^[A-Z_][A-Z0-9_]*$ ]] || die "bad state key"
	mkdir -p "$A"
	local tmp=$STATE_FILE.tmp
	{ [ -f "$STATE_FILE" ] && grep -v "^$1=" "$STATE_FILE"; printf '%s=%q\n' "$1" "$2"; } >"$tmp"
	mv "$tmp" "$STATE_FILE"
}
st_load() {
	# shellcheck disable=SC1090 # written by st_set only, every value %q-quoted
	[ -f "$STATE_FILE" ] && source "$STATE_FILE"
	return 0
}

# ---- the runner's files ---------------------------------------------------------------------------------------------
out_set() { # NAME VALUE: a step output (the heredoc form with a random delimiter; the value is one line)
	local v=${2//$'\n'/ } d
	v=${v//$'\r'/ }
	d=tka_$(openssl rand -hex 16)
	[ -n "${GITHUB_OUTPUT:-}" ] && printf '%s<<%s\n%s\n%s\n' "$1" "$d" "$v" "$d" >>"$GITHUB_OUTPUT"
	return 0
}
summary() { [ -n "${GITHUB_STEP_SUMMARY:-}" ] && printf '%s\n' "$@" >>"$GITHUB_STEP_SUMMARY"; return 0; }
# Text for the summary from bytes the agent or the repository chose: every byte but [A-Za-z0-9._/ -] as an
# HTML entity ([, <, `, |, * and & among them), so no markdown, HTML, link or table cell survives.
html_text() {
	LC_ALL=C python3 -c 'import sys
s = sys.argv[1]
print("".join(c if c.isascii() and (c.isalnum() or c in "._/ -;:,()=+@") else "&#%d;" % ord(c) for c in s))' "$1"
}

# ---- workflow commands stopped --------------------------------------------------------------------------------------
QUIET_TOKEN=
quiet_begin() {
	QUIET_TOKEN=$(openssl rand -hex 16) || die "openssl rand failed: workflow commands cannot be stopped"
	[[ $QUIET_TOKEN =~ ^[0-9a-f]{32}$ ]] || die "openssl rand gave no token"
	exec 2>&1
	trap quiet_end EXIT
	trap 'on_signal 130' INT
	trap 'on_signal 143' TERM
	trap 'on_signal 129' HUP
	printf '::stop-commands::%s\n' "$QUIET_TOKEN"
}
# A signal (the runner cancelling the step) ends the step: resume first, then note what the run step knows.
on_signal() {
	quiet_end
	if [ "$sub" = run ] && [ -n "${BOX:-}" ]; then
		st_set AGENT_RC "$1"
		out_set exit-code "$1"
		box_facts
	fi
	exit "$1"
}
quiet_end() {
	# The newline first: the agent's last line may lack one, and a resume must start a line.
	[ -n "$QUIET_TOKEN" ] && printf '\n::%s::\n' "$QUIET_TOKEN"
	QUIET_TOKEN=
	return 0
}

# ---- privileges: the daemon and signer run as root (each box's QEMU then gets a uid of its own) --------------------
as_root() {
	if [ "$(id -u)" = 0 ]; then
		"$@"
	else
		sudo --preserve-env="TKBOX_STATE_DIR,TKBOX_SOCKET,TKBOX_SIGNER_SOCKET${TKA_SECRET_VARS:+,$TKA_SECRET_VARS}" -- "$@"
	fi
}
tk() { as_root "$BIN/tkbox" "$@"; }
# Files the tkbox CLI wrote as root (0600): make them the runner user's, for the steps and the artifact.
mine() {
	[ "$(id -u)" = 0 ] || as_root chown "$(id -u):$(id -g)" -- "$@" 2>/dev/null
	return 0
}

need_bin() {
	st_load
	if [ -z "${BIN:-}" ] || [ ! -x "$BIN/tkbox" ]; then
		die "no tkbox build: run the install step first"
	fi
}

# ---- setup-kvm ------------------------------------------------------------------------------------------------------
# KVM_GET_API_VERSION and KVM_CREATE_VM on /dev/kvm: "kvm" when both work, else "tcg: WHY". Nested KVM can pass
# this and still not boot; the daemon's own probe boot (--accel auto) decides, and the box's isolation says what ran.
kvm_probe() {
	as_root python3 - <<'PY'
import fcntl, os, sys
try:
    fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
except OSError as e:
    print("tcg: /dev/kvm: %s" % e.strerror); sys.exit(0)
try:
    v = fcntl.ioctl(fd, 0xAE00)  # KVM_GET_API_VERSION
    if v != 12:
        print("tcg: KVM API version %d, not 12" % v); sys.exit(0)
    vm = fcntl.ioctl(fd, 0xAE01, 0)  # KVM_CREATE_VM
    os.close(vm)
    print("kvm")
except OSError as e:
    print("tcg: /dev/kvm opens but KVM_CREATE_VM fails: %s" % e.strerror)
PY
}

cmd_setup_kvm() {
	local probe accel
	# GitHub-hosted runners ship /dev/kvm without a rule that lets QEMU open it: add the usual one. Elsewhere the
	# host's owner has decided how /dev/kvm is shared; leave it.
	if [ "${RUNNER_ENVIRONMENT:-}" = github-hosted ] && [ -e /dev/kvm ] && command -v udevadm >/dev/null; then
		echo 'KERNEL=="kvm", GROUP="kvm", MODE="0666", OPTIONS+="static_node=kvm"' |
			as_root tee /etc/udev/rules.d/99-tkbox-kvm.rules >/dev/null &&
			as_root udevadm control --reload-rules && as_root udevadm trigger --name-match=kvm ||
			echo "tkbox action: could not install the udev rule for /dev/kvm; probing anyway"
	fi
	probe=$(kvm_probe 2>&1) || probe="tcg: the probe did not run: ${probe:-no output}"
	probe=${probe%%$'\n'*}
	if [ "$probe" = kvm ]; then
		accel=auto
		echo "tkbox action: /dev/kvm works (KVM_CREATE_VM); the daemon's probe boot confirms it"
	else
		accel=tcg
		echo "::warning title=tkbox: no KVM::${probe#tcg: }; boxes run under TCG emulation (isolation: emulated)"
		summary "### tkbox: KVM is not usable" "" \
			"\`${probe#tcg: }\`: boxes run under QEMU's TCG emulation, **isolation: emulated** (QEMU does not treat TCG as a security boundary)." \
			"The action's signer is a dev signer, so the bundle's assurance is **dev** (no witness)." ""
	fi
	st_set ACCEL "$accel"
	st_set KVM_PROBE "$probe"
	out_set kvm "$probe"
}

# ---- install --------------------------------------------------------------------------------------------------------
cmd_install() {
	local build=$A/build
	if [ -n "${TKA_BIN_DIR:-}" ]; then
		for b in tkbox tkbox-host tkbox-signer tkbox-guest-linux-amd64; do
			[ -x "$TKA_BIN_DIR/$b" ] || die "TKA_BIN_DIR: $TKA_BIN_DIR/$b is missing"
		done
		st_set BIN "$(cd "$TKA_BIN_DIR" && pwd)"
		echo "tkbox action: using the prebuilt binaries in $TKA_BIN_DIR"
		return 0
	fi
	as_root make -C "$SRC" deps || die "make deps failed"
	# The build goes under RUNNER_TEMP: never into the checkout (the box's workspace when the action is `uses: ./`).
	make -C "$SRC" build BUILD="$build" || die "make build failed"
	st_set BIN "$build"
}

# ---- start ----------------------------------------------------------------------------------------------------------
cmd_start() {
	local pid accel
	need_bin
	accel=${TKA_ACCEL:-${ACCEL:-auto}}
	mkdir -p "$A" "$OUT"
	as_root "$BIN/tkbox-signer" init --dev --dir "$A/signer" >/dev/null || die "tkbox-signer init --dev failed"
	# A policy of the workflow's (input policy): the signer's deny/ask/flag rules for this job, replacing the
	# default pack (docs/policy.md). Checked by the signer when it starts.
	if [ -n "${TKA_POLICY:-}" ]; then
		local pol=$TKA_POLICY
		[[ $pol = /* ]] || pol=${GITHUB_WORKSPACE:?}/$pol
		[ -f "$pol" ] || die "policy: $pol is not a file"
		as_root install -m 0600 "$pol" "$A/signer/policy.yaml" || die "policy: cannot install $pol"
	fi
	# The signer wants its socket in a directory only its uid can enter.
	as_root install -d -m 0700 "$(dirname "$TKBOX_SIGNER_SOCKET")" || die "cannot make the signer's socket directory"
	as_root "$BIN/tkbox-signer" up --wait --dir "$A/signer" --socket "$TKBOX_SIGNER_SOCKET" >>"$A/signer.log" 2>&1 ||
		die "the signer did not start: $(tail -3 "$A/signer.log")"
	st_set SIGNER_UP 1
	[ -d "$TKBOX_STATE_DIR" ] || as_root mkdir -m 0700 "$TKBOX_STATE_DIR"
	# In a session of its own, its output in a file and its pid from the shell that started it (under sudo, a
	# pid of ours would be sudo's, and sudo may hold a pty).
	rm -f "$A/daemon.pid"
	# shellcheck disable=SC2016 # expanded by that shell
	as_root sh -c 'log=$1 pidf=$2; shift 2; setsid "$@" </dev/null >>"$log" 2>&1 & echo $! >"$pidf"' sh \
		"$A/daemon.log" "$A/daemon.pid" "$BIN/tkbox" daemon --accel "$accel" --state-dir "$TKBOX_STATE_DIR" \
		--signer "$TKBOX_SIGNER_SOCKET" || die "cannot start the daemon"
	pid=$(cat "$A/daemon.pid" 2>/dev/null)
	[[ $pid =~ ^[0-9]+$ ]] || die "the daemon's pid is unknown"
	st_set DAEMON_PID "$pid"
	for _ in $(seq 300); do
		tk ls >/dev/null 2>&1 && { echo "tkbox action: daemon up (accel $accel), signer up"; return 0; }
		as_root kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	tail -20 "$A/daemon.log" >&2
	die "the daemon did not start (log above)"
}

# ---- run ------------------------------------------------------------------------------------------------------------
# A known agent: its install command, its command line (reads the prompt from stdin), its allow entries, its
# secret (ENV@HOST[:Header]) and box env. TKA_AGENT_INSTALL and TKA_AGENT_COMMAND override the first two.
# shellcheck disable=SC2016 # the command lines are for the box's shell
agent_profile() {
	case "$1" in
	claude-code)
		P_INSTALL='npm install -g --no-fund --no-audit @anthropic-ai/claude-code'
		# commands run as root in the box; Claude Code accepts skipping its prompts as root only in a sandbox
		P_CMD='p=$(cat) && exec claude -p "$p" --dangerously-skip-permissions'
		P_ALLOW='claude-code npm'
		P_SECRET='ANTHROPIC_API_KEY@api.anthropic.com:x-api-key'
		P_ENV='IS_SANDBOX=1'
		;;
	codex)
		P_INSTALL='npm install -g --no-fund --no-audit @openai/codex'
		P_CMD='p=$(cat) && exec codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$p"'
		P_ALLOW='openai npm'
		P_SECRET='OPENAI_API_KEY@api.openai.com'
		P_ENV=
		;;
	*)
		# Any other name: the agent is what agent-command says (agent-install installs it); the prompt is its stdin.
		[ -n "${TKA_AGENT_COMMAND:-}" ] || return 1
		P_INSTALL='' P_CMD='' P_ALLOW='' P_SECRET='' P_ENV=''
		;;
	esac
}

# Seconds of a duration (N, Ns, Nm, Nh, Nd).
dur_s() {
	[[ $1 =~ ^([0-9]{1,7})([smhd]?)$ ]] || return 1
	local n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]}
	case "$u" in m) n=$((n * 60)) ;; h) n=$((n * 3600)) ;; d) n=$((n * 86400)) ;; esac
	echo "$n"
}

# One `--secret` from a line NAME@HOSTS[:Header] (the value from env NAME) or NAME=VAR@HOSTS[:Header].
secret_arg() {
	local line=$1 name var rest
	[[ $line =~ ^([A-Z_][A-Z0-9_]{0,63})(=([A-Za-z_][A-Za-z0-9_]{0,127}))?@([A-Za-z0-9.,:-]+)$ ]] ||
		die "secrets: each line is NAME@HOST[,HOST][:Header] or NAME=ENVVAR@HOST...: not that form (the line is not shown)"
	name=${BASH_REMATCH[1]} var=${BASH_REMATCH[3]:-${BASH_REMATCH[1]}} rest=${BASH_REMATCH[4]}
	[ -n "${!var:-}" ] || { echo "tkbox action: secret $name: \$$var is empty or unset; left out"; return 0; }
	SECRET_ARGS+=(--secret "$name=env:$var@$rest")
	SECRET_VARS+=("$var")
}

cmd_run() {
	local ws image name t ts box_t cmd install prompt rc=0 e w
	local -a args=() SECRET_ARGS=() SECRET_VARS=()
	need_bin
	ws=${TKA_WORKSPACE:-${GITHUB_WORKSPACE:?GITHUB_WORKSPACE is not set}}
	[[ $ws = /* ]] || ws=${GITHUB_WORKSPACE:?}/$ws
	ws=$(cd "$ws" && pwd) || die "workspace $ws is not a directory"
	image=${TKA_IMAGE:-node:22-bookworm-slim}
	t=${TKA_TIMEOUT:-30m}
	ts=$(dur_s "$t") || die "timeout: $t is not N, Ns, Nm, Nh or Nd"
	box_t=$((ts + 600))s
	name=gha-$(printf '%s' "${GITHUB_RUN_ID:-local}" | tr -cd '0-9a-z' | cut -c1-20)-$(openssl rand -hex 4)
	P_INSTALL='' P_CMD='' P_ALLOW='' P_SECRET='' P_ENV=''
	if [ -n "${TKA_AGENT:-}" ]; then
		agent_profile "$TKA_AGENT" || die "agent: $TKA_AGENT is not claude-code or codex, and no agent-command says what runs"
		[ -n "${TKA_COMMAND:-}" ] && die "give agent or command, not both"
	elif [ -z "${TKA_COMMAND:-}" ]; then
		die "give agent (with prompt) or command"
	fi
	install=${TKA_AGENT_INSTALL:-$P_INSTALL}
	cmd=${TKA_AGENT_COMMAND:-$P_CMD}
	[ -n "${TKA_COMMAND:-}" ] && cmd=$TKA_COMMAND
	for e in $P_ALLOW ${TKA_ALLOW:+${TKA_ALLOW//,/ }}; do args+=(--allow "$e"); done
	[ -n "$P_SECRET" ] && secret_arg "$P_SECRET"
	while IFS= read -r w; do
		w=${w#"${w%%[![:space:]]*}"}
		w=${w%"${w##*[![:space:]]}"}
		[ -z "$w" ] || [[ $w = \#* ]] || secret_arg "$w"
	done <<<"${TKA_SECRETS:-}"
	for e in $P_ENV; do args+=(--env "$e"); done
	[ -n "${TKA_MEMORY:-}" ] && args+=(--memory "$TKA_MEMORY")
	[ -n "${TKA_CPUS:-}" ] && args+=(--cpus "$TKA_CPUS")
	TKA_SECRET_VARS=$(IFS=,; echo "${SECRET_VARS[*]}")
	BOX=$name
	st_set BOX "$name"
	st_set WORKSPACE "$ws"
	out_set box "$name"

	quiet_begin
	echo "tkbox action: box $name, image $image, workspace $ws, timeout $t"
	if ! tk run --image "$image" --name "$name" --workspace "$ws" --timeout "$box_t" --exec-timeout "${ts}s" \
		"${args[@]}" "${SECRET_ARGS[@]}"; then
		st_set AGENT_RC 125
		st_set RUN_ERROR "the box did not start"
		quiet_end
		echo "::error title=tkbox::the box did not start (see the log above)"
		return 0
	fi
	tk ls --json >"$A/ls.json" 2>/dev/null || true
	if [ -n "$install" ] && [ -z "${TKA_COMMAND:-}" ]; then
		echo "tkbox action: installing the agent: $install"
		tk exec --timeout "${ts}s" "$name" -- sh -c "$install" </dev/null
		rc=$?
	fi
	if [ "$rc" -eq 0 ]; then
		if [ -n "${TKA_COMMAND:-}" ]; then
			tk exec --cwd /workspace --timeout "${ts}s" "$name" -- sh -c "$cmd" </dev/null
		else
			# The prompt is the exec's stdin: decided and recorded with it, never parsed by a shell.
			prompt=${TKA_PROMPT:-}
			printf '%s' "$prompt" | tk exec -i --cwd /workspace --timeout "${ts}s" "$name" -- sh -c "$cmd"
		fi
		rc=$?
	fi
	st_set AGENT_RC "$rc"
	quiet_end
	box_facts
	out_set exit-code "$rc"
	if [ "$ISO" = emulated ]; then
		echo "::warning title=tkbox: isolation emulated::box $BOX ran under TCG (no usable KVM): QEMU does not treat TCG as a security boundary"
	fi
	if [ "$rc" -ne 0 ]; then
		echo "::error title=tkbox::the agent's command exited with status $rc"
	fi
	return 0
}

# The box's accelerator and isolation, as the daemon reports them.
box_facts() {
	local iso accel
	iso=$(jq -r --arg n "$BOX" '(if type == "array" then . else .boxes end)[] | select(.name == $n) | .isolation // empty' \
		"$A/ls.json" 2>/dev/null | head -1)
	accel=$(jq -r --arg n "$BOX" '(if type == "array" then . else .boxes end)[] | select(.name == $n) | .accel // empty' \
		"$A/ls.json" 2>/dev/null | head -1)
	[[ $iso =~ ^[a-z0-9-]{1,32}$ ]] || iso=unknown
	[[ $accel =~ ^[a-z0-9-]{1,32}$ ]] || accel=unknown
	ISO=$iso
	st_set ISOLATION "$iso"
	st_set BOX_ACCEL "$accel"
	out_set isolation "$iso"
}

# ---- stop -----------------------------------------------------------------------------------------------------------
cmd_stop() {
	need_bin
	[ -n "${BOX:-}" ] || { echo "tkbox action: no box to stop"; return 0; }
	mkdir -p "$OUT"
	quiet_begin
	tk stop "$BOX"
	st_set STOP_RC $?
	rm -f "$OUT/patch.diff"
	if tk diff "$BOX" -o "$OUT/patch.diff" && mine "$OUT/patch.diff" && tk diff "$BOX" --json >"$OUT/patch.json"; then
		tk diff "$BOX" --stat
		st_set PATCH "$OUT/patch.diff"
	fi
	quiet_end
	[ -s "$OUT/patch.json" ] && st_set PATCH_FILES "$(jq '.files | length' "$OUT/patch.json")"
	[ -f "$OUT/patch.diff" ] && out_set patch "$OUT/patch.diff"
	return 0
}

# ---- apply ----------------------------------------------------------------------------------------------------------
# Only when the agent succeeded, and only if nothing is sensitive: the dry run (`tkbox apply --dry-run --json`)
# runs the prepare step, which refuses a patch touching a Table 6 file without --allow-sensitive (this action
# never passes it) and reports each file's kind. The dry run decides nothing, so it cannot tell whether the
# signer allows every file; the apply itself asks the signer about every file before writing any, and the first
# refusal stops it with nothing written (docs/patch.md, "How it works"). So the checkout gets every file or none,
# except when a write fails part way (exit 3: the files written are named; the action fails).
no_apply() {
	# Printed with workflow commands on: only letters, digits and plain punctuation (no "::", no "##[").
	set -- "$(printf '%s' "$1" | tr -cd 'A-Za-z0-9 _.,();=-')"
	st_set APPLIED false
	st_set APPLY_WHY "$1"
	out_set applied false
	out_set files 0
	echo "tkbox action: nothing applied: $1"
}

cmd_apply() {
	local rc why
	need_bin
	[ "${TKA_APPLY:-true}" = true ] || { no_apply "apply is false"; return 0; }
	[ -n "${BOX:-}" ] || { no_apply "no box"; return 0; }
	[ "${AGENT_RC:-1}" = 0 ] || { no_apply "the agent's command failed (exit ${AGENT_RC:-?})"; return 0; }
	[ -n "${PATCH:-}" ] || { no_apply "no patch was saved at stop"; return 0; }
	[ "${PATCH_FILES:-0}" -gt 0 ] || { no_apply "the patch is empty"; return 0; }
	quiet_begin
	tk apply "$BOX" --checkout "$WORKSPACE" --dry-run --json >"$OUT/apply-dry.json"
	rc=$?
	cat "$OUT/apply-dry.json"
	why=
	if [ "$rc" -ne 0 ]; then
		why="the dry run refused the patch ($(jq -r '.error.code // "?"' "$OUT/apply-dry.json" 2>/dev/null), rule $(jq -r '.error.rule // "-"' "$OUT/apply-dry.json" 2>/dev/null))"
	elif [ "$(jq '[.files[] | select(.sensitive != null and .sensitive != false)] | length' "$OUT/apply-dry.json")" != 0 ]; then
		why="the patch changes a sensitive file (Table 6)"
	fi
	if [ -z "$why" ]; then
		# apply_busy is refused before anything is decided: the daemon clears a dry run's busy mark only
		# after its reply, so an apply right after one can meet it. Try again.
		for _ in $(seq 20); do
			tk apply "$BOX" --checkout "$WORKSPACE" --json >"$OUT/apply.json"
			rc=$?
			[ "$(jq -r '.error.code // ""' "$OUT/apply.json" 2>/dev/null)" = apply_busy ] || break
			sleep 0.5
		done
		cat "$OUT/apply.json"
	fi
	quiet_end
	if [ -n "$why" ]; then
		no_apply "$why"
		return 0
	fi
	case "$rc" in
	0)
		st_set APPLIED true
		st_set APPLIED_FILES "$(jq '.written | length' "$OUT/apply.json")"
		out_set applied true
		out_set files "$(jq '.written | length' "$OUT/apply.json")"
		fix_owner
		;;
	3)
		st_set APPLIED partial
		st_set APPLY_WHY "a write failed part way; the files written before it are in the log (not rolled back)"
		out_set applied partial
		out_set files "$(jq '.error.written_paths | length' "$OUT/apply.json" 2>/dev/null || echo 0)"
		fix_owner
		echo "::error title=tkbox::apply wrote part of the patch and failed; the checkout is partly changed"
		;;
	*)
		no_apply "the apply was refused ($(jq -r '.error.code // "?"' "$OUT/apply.json" 2>/dev/null), rule $(jq -r '.error.rule // "-"' "$OUT/apply.json" 2>/dev/null)); nothing was written"
		;;
	esac
	return 0
}

# The daemon ran as root, so the files it wrote belong to root: hand them to the checkout's owner.
fix_owner() {
	[ "$(id -u)" = 0 ] && return 0
	as_root chown -R -P --from=0:0 "$(stat -c %u:%g "$WORKSPACE")" -- "$WORKSPACE" || true
}

# ---- export ---------------------------------------------------------------------------------------------------------
cmd_export() {
	local b rc
	need_bin
	[ -n "${BOX:-}" ] || { echo "tkbox action: no box to export"; return 0; }
	mkdir -p "$OUT"
	b=$OUT/tkbox-$BOX.tkb
	quiet_begin
	# An export right after an apply can meet its busy mark (apply_busy, nothing done): try again.
	for _ in $(seq 20); do
		tk export "$BOX" -o "$b" >"$OUT/export.out" 2>&1
		rc=$?
		cat "$OUT/export.out"
		if [ "$rc" -eq 0 ] || ! grep -q 'being applied' "$OUT/export.out"; then
			break
		fi
		sleep 0.5
	done
	if [ "$rc" -eq 0 ]; then
		mine "$b" "${b%.tkb}.trust.json"
		"$BIN/tkbox" verify "$b" --trust "${b%.tkb}.trust.json"
		"$BIN/tkbox" verify "$b" --trust "${b%.tkb}.trust.json" --json >"$OUT/verify.json"
		st_set VERIFY_RC $?
	fi
	quiet_end
	if [ "$rc" -ne 0 ]; then
		st_set VERDICT "not exported"
		out_set verdict "not exported"
		echo "::error title=tkbox::the bundle could not be exported"
		return 0
	fi
	st_set BUNDLE "$b"
	st_set VERDICT "$(jq -r '.integrity // "FAILED"' "$OUT/verify.json" | tr -cd 'A-Z _')"
	st_set ASSURANCE "$(jq -r '.assurance // "none"' "$OUT/verify.json")"
	out_set bundle "$b"
	out_set trust "${b%.tkb}.trust.json"
	out_set verdict "$(jq -r '.integrity // "FAILED"' "$OUT/verify.json" | tr -cd 'A-Z _')"
	out_set assurance "$(jq -r '.assurance // "none"' "$OUT/verify.json")"
	# The artifact: the bundle, its trust file and the patch, in one directory.
	mkdir -p "$OUT/artifact"
	cp "$b" "${b%.tkb}.trust.json" "$OUT/artifact/"
	[ -f "$OUT/patch.diff" ] && cp "$OUT/patch.diff" "$OUT/artifact/"
	out_set artifact-dir "$OUT/artifact"
	return 0
}

# ---- summary --------------------------------------------------------------------------------------------------------
cmd_summary() {
	local fail=0 f n
	st_load
	summary "## tkbox: ${BOX:-no box}" "" \
		"| | |" "|---|---|" \
		"| agent exit status | ${AGENT_RC:-not run} |" \
		"| isolation | ${ISOLATION:-unknown} (accel ${BOX_ACCEL:-unknown}; KVM probe: $(html_text "${KVM_PROBE:-not run}")) |" \
		"| verdict | ${VERDICT:-not exported} |" \
		"| assurance | $(html_text "${ASSURANCE:-none}") |" \
		"| patch | ${PATCH_FILES:-0} file(s) |" \
		"| applied | ${APPLIED:-false} ${APPLIED_FILES:+(${APPLIED_FILES} file(s))} $(html_text "${APPLY_WHY:-}") |" ""
	if [ "${ISOLATION:-}" = emulated ]; then
		summary "**isolation: emulated**: the box ran under TCG (no usable KVM); QEMU does not treat TCG as a security boundary." ""
	fi
	summary "The signer is a dev signer made in this job, and the trust file comes from the same job: the bundle shows the record was not changed after the job, not that the runner was honest." ""
	if [ -s "$OUT/patch.json" ]; then
		summary "<details><summary>files in the patch</summary>" ""
		n=0
		while IFS= read -r f; do
			n=$((n + 1))
			[ "$n" -le 100 ] || break
			summary "- <code>$(html_text "$f")</code>"
		done < <(jq -r '.files[] | "\(.op) \(.path)"' "$OUT/patch.json")
		summary "" "</details>" ""
	fi
	[ "${AGENT_RC:-1}" = 0 ] || fail=1
	[ "${VERDICT:-}" = VERIFIED ] || fail=1
	[ "${APPLIED:-}" = partial ] && fail=1
	if [ "$fail" = 0 ]; then
		echo "::notice title=tkbox::box ${BOX}: verdict ${VERDICT}, isolation ${ISOLATION:-unknown}, applied ${APPLIED:-false}"
	else
		echo "::error title=tkbox::box ${BOX:-none}: agent exit ${AGENT_RC:-not run}, verdict ${VERDICT:-not exported}, applied ${APPLIED:-false}"
	fi
	return "$fail"
}

# ---- cleanup --------------------------------------------------------------------------------------------------------
cmd_cleanup() {
	st_load
	if [ -n "${DAEMON_PID:-}" ] && as_root kill -0 "$DAEMON_PID" 2>/dev/null; then
		as_root kill -TERM "$DAEMON_PID" 2>/dev/null
		for _ in $(seq 150); do as_root kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.2; done
	fi
	[ -n "${SIGNER_UP:-}" ] && as_root "$BIN/tkbox-signer" down --dir "$A/signer" --socket "$TKBOX_SIGNER_SOCKET" >/dev/null 2>&1
	st_set DAEMON_PID ""
	st_set SIGNER_UP ""
	return 0
}

sub=${1:-}
case "$sub" in
setup-kvm) cmd_setup_kvm ;;
install) cmd_install ;;
start) cmd_start ;;
run) cmd_run ;;
stop) cmd_stop ;;
apply) cmd_apply ;;
export) cmd_export ;;
summary) cmd_summary ;;
cleanup) cmd_cleanup ;;
*)
	echo "usage: run.sh setup-kvm|install|start|run|stop|apply|export|summary|cleanup" >&2
	exit 2
	;;
esac
