# bash completion for tkbox.
#
# Load it with:   source <(tkbox completion bash)
# or install it:  tkbox completion bash > /etc/bash_completion.d/tkbox
#                 (or ~/.local/share/bash-completion/completions/tkbox)
#
# This file is the one source: `tkbox completion bash` prints it as it was embedded at build time
# (contrib/completion/tkbox.bash). tests/cli/completion.sh fails when a command of `tkbox-host --help`, a
# long option of a command's source (src/cli/cmd-*.c) or an --allow preset (src/egress/preset.c) is missing
# here. Box names come from `tkbox ls --json`, approval ids from `tkbox approvals --json`.

_tkbox_commands="run exec ls stop diff apply rm export approvals approve reject mcp view verify images workspace doctor completion version patch daemon"

# The long options of a command. A trailing '=' marks one that takes a value.
_tkbox_flags() {
	case $1 in
	run) echo "--image= --name= --workspace= --env= --memory= --cpus= --disk= --timeout= --exec-timeout= --platform= --registry-auth= --registry-ca= --allow= --inspect= --secret= --config= --no-config --state-dir= --help" ;;
	exec) echo "--interactive --json --env= --cwd= --timeout= --state-dir= --help" ;;
	ls) echo "--json --state-dir=" ;;
	stop) echo "--state-dir=" ;;
	diff) echo "--stat --json --output= --state-dir= --help" ;;
	apply) echo "--checkout= --allow-sensitive --dry-run --json --state-dir= --help" ;;
	rm) echo "--force --state-dir=" ;;
	export) echo "--output= --state-dir=" ;;
	approvals) echo "--json --state-dir=" ;;
	approve | reject) echo "--state-dir=" ;;
	mcp) echo "--config= --export-dir= --state-dir= --help" ;;
	view) echo "--trust= --output= --help" ;;
	verify) echo "--trust= --json --strict --help" ;;
	images) echo "--state= --platform= --registry-auth= --registry-ca= --json --help" ;;
	workspace) echo "--output= --uid= --gid= --quiet --json" ;;
	doctor) echo "--json --state-dir= --signer= --guest= --help" ;;
	completion) echo "" ;;
	version) echo "--json" ;;
	patch) echo "--git --json --help" ;;
	daemon) echo "--state-dir= --signer= --accel= --unrecorded --max-boxes= --max-execs= --signer-timeout= --guest= --kernel= --modules= --egress-block= --egress-allow-private --resolve= --egress-ca= --observe-queue= --help" ;;
	*) echo "" ;;
	esac
}

# The --allow presets (src/egress/preset.c).
_tkbox_presets="pypi npm github anthropic openai claude-code debian apt-ubuntu go-proxy"

# The subcommands of a command that has them.
_tkbox_verbs() {
	case $1 in
	images) echo "ls pull resolve rm prune" ;;
	workspace) echo "build" ;;
	patch) echo "check" ;;
	completion) echo "bash" ;;
	*) echo "" ;;
	esac
}

# Commands whose first word is a box name.
_tkbox_takes_box() {
	case $1 in
	exec | stop | diff | apply | rm | export) return 0 ;;
	*) return 1 ;;
	esac
}

# Box names the daemon knows (nothing when no daemon answers). $1: the tkbox to ask.
_tkbox_boxes() {
	"$1" ls --json 2>/dev/null | sed -n 's/^    "name": "\([A-Za-z0-9._-]*\)",\{0,1\}$/\1/p'
}

# Pending approval ids.
_tkbox_approval_ids() {
	"$1" approvals --json 2>/dev/null | sed -n 's/^ *"id": "\(ap-[0-9a-f]*\)",\{0,1\}$/\1/p'
}

# Values of an option that takes one: 0 when it completed (COMPREPLY set).
_tkbox_value() {
	local opt=$1 cur=$2
	case $opt in
	--accel) mapfile -t COMPREPLY < <(compgen -W "auto kvm tcg" -- "$cur") ;;
	--inspect) mapfile -t COMPREPLY < <(compgen -W "all none" -- "$cur") ;;
	--platform) mapfile -t COMPREPLY < <(compgen -W "linux/amd64 linux/arm64" -- "$cur") ;;
	--allow)
		# a comma-separated list: complete the last element
		local head="" last=$cur
		case $cur in *,*) head=${cur%,*}, last=${cur##*,} ;; esac
		mapfile -t COMPREPLY < <(compgen -W "$_tkbox_presets" -P "$head" -- "$last")
		;;
	--workspace | --checkout | --modules | --state-dir | --state)
		mapfile -t COMPREPLY < <(compgen -d -- "$cur")
		;;
	--export-dir) mapfile -t COMPREPLY < <(compgen -d -- "$cur") ;;
	--output | --trust | --config | --guest | --kernel | --egress-ca | --registry-auth | --registry-ca | --signer)
		mapfile -t COMPREPLY < <(compgen -f -- "$cur")
		;;
	*) COMPREPLY=() ;;
	esac
	return 0
}

_tkbox() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev="" tk=${COMP_WORDS[0]:-tkbox}
	local cmd="" cmd_i=0 i w npos=0
	COMPREPLY=()
	((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
	# --opt=value split by COMP_WORDBREAKS: complete the value of --opt
	if [[ $cur == "=" && $prev == --* ]]; then
		_tkbox_value "$prev" ""
		return 0
	fi
	if [[ $prev == "=" ]] && ((COMP_CWORD > 1)); then
		_tkbox_value "${COMP_WORDS[COMP_CWORD - 2]}" "$cur"
		return 0
	fi
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if [[ -z $cmd ]]; then
			[[ $w == -* ]] && continue
			cmd=$w
			cmd_i=$i
		fi
	done
	if [[ -z $cmd ]]; then
		mapfile -t COMPREPLY < <(compgen -W "$_tkbox_commands --help --version" -- "$cur")
		return 0
	fi
	# the previous word takes a value: complete that
	if [[ $prev == --* ]] && [[ " $(_tkbox_flags "$cmd") " == *" $prev= "* ]]; then
		_tkbox_value "$prev" "$cur"
		return 0
	fi
	if [[ $prev == -o ]]; then
		mapfile -t COMPREPLY < <(compgen -f -- "$cur")
		return 0
	fi
	if [[ $cur == -* ]]; then
		local f flags=()
		for f in $(_tkbox_flags "$cmd"); do flags+=("${f%=}"); done
		mapfile -t COMPREPLY < <(compgen -W "${flags[*]}" -- "$cur")
		return 0
	fi
	# the positional words after the command (values of options do not count)
	for ((i = cmd_i + 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if [[ $w == -* ]]; then
			[[ " $(_tkbox_flags "$cmd") " == *" $w= "* || $w == -o ]] && ((i++))
			continue
		fi
		npos=$((npos + 1))
	done
	if ((npos == 0)); then
		local verbs
		verbs=$(_tkbox_verbs "$cmd")
		if [[ -n $verbs ]]; then
			mapfile -t COMPREPLY < <(compgen -W "$verbs" -- "$cur")
		elif _tkbox_takes_box "$cmd"; then
			mapfile -t COMPREPLY < <(compgen -W "$(_tkbox_boxes "$tk")" -- "$cur")
		elif [[ $cmd == approve || $cmd == reject ]]; then
			mapfile -t COMPREPLY < <(compgen -W "$(_tkbox_approval_ids "$tk")" -- "$cur")
		elif [[ $cmd == verify || $cmd == view ]]; then
			mapfile -t COMPREPLY < <(compgen -f -X '!*.tkb' -- "$cur"; compgen -d -- "$cur")
		fi
		return 0
	fi
	# second words: the file or directory of images/workspace/patch verbs
	case $cmd in
	workspace | patch) mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
	*) ;;
	esac
	return 0
}

complete -F _tkbox tkbox tkbox-host
