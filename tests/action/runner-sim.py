#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A GitHub Actions runner's workflow-command processing, applied to a captured step log.

usage: runner-sim.py LOG [--allow-unsecure]  -> one JSON object on stdout (the effects)

Follows the runner's ActionCommandManager and ActionCommand parsers (actions/runner, src/Runner.Worker):
- the log is split into lines as .NET's StreamReader.ReadLine does: at \\r\\n, \\n or \\r;
- a line is a command when, after leading white space is trimmed, it is `::NAME[ PROPS]::DATA` (v2), or when it
  holds `##[NAME[ PROPS]]DATA` anywhere (the older form: the runner looks for `##[` with IndexOf), NAME one of
  the registered commands, compared case-insensitively as the runner's HashSet does; PROPS `k=v` split at `,`
  (v2) or `;` (v1), values and data unescaped (%25 %0D %0A %3A %2C, and %5D %3B for v1);
- `stop-commands` with a TOKEN stops processing (a TOKEN that is itself a command name is refused, as the runner
  does unless ACTIONS_ALLOW_UNSECURE_STOPCOMMAND_TOKENS is set); while stopped, only a command whose NAME equals
  TOKEN is processed, and it resumes; everything else is plain text;
- set-output, set-env, add-path, add-mask, save-state, error/warning/notice, debug, echo, group/endgroup,
  add-matcher/remove-matcher are recorded as effects. set-env and add-path count even though the runner
  refuses them without ACTIONS_ALLOW_UNSECURE_COMMANDS (again: err towards effects).
"""
import json
import re
import sys

COMMANDS = {"stop-commands", "set-output", "set-env", "add-path", "add-mask", "save-state", "error", "warning",
            "notice", "debug", "echo", "group", "endgroup", "add-matcher", "remove-matcher"}


def unescape_data(s):
    return s.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def unescape_prop(s):
    return (s.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",")
            .replace("%25", "%"))


def parse_v2(line, registered):
    m = line.lstrip()
    if not m.startswith("::"):
        return None
    end = m.find("::", 2)
    if end < 0:
        return None
    info = m[2:end]
    sp = info.find(" ")
    name = info if sp < 0 else info[:sp]
    if name.lower() not in registered:
        return None
    props = {}
    if sp > 0:
        for p in info[sp + 1:].strip().split(","):
            if not p:
                continue
            kv = p.split("=", 1)
            if len(kv) == 2 and kv[0] and kv[1]:
                props[kv[0]] = unescape_prop(kv[1])
    return name.lower(), props, unescape_data(m[end + 2:])


def parse_v1(line, registered):
    # The older form is found anywhere in the line, not only at its start (the runner's IndexOf("##[")).
    start = line.find("##[")
    if start < 0:
        return None
    m = line[start:]
    end = m.find("]", 3)
    if end < 0:
        return None
    info = m[3:end]
    sp = info.find(" ")
    name = info if sp < 0 else info[:sp]
    if name.lower() not in registered:
        return None
    props = {}
    if sp > 0:
        for p in info[sp + 1:].split(";"):
            kv = p.split("=", 1)
            if len(kv) == 2 and kv[0] and kv[1]:
                props[kv[0]] = unescape_prop(kv[1]).replace("%5D", "]").replace("%3B", ";")
    return name.lower(), props, unescape_data(m[end + 1:])


def run(text, allow_unsecure=False):
    registered = set(COMMANDS)
    eff = {"annotations": [], "masks": [], "outputs": {}, "env": {}, "paths": [], "state": {}, "debug": [],
           "groups": 0, "matchers": 0, "stops": [], "resumes": [], "refused_stop_tokens": [],
           "ignored_while_stopped": 0, "stopped_at_end": False, "lines": 0}
    stop_token = None
    for line in re.split(r"\r\n|\n|\r", text):
        eff["lines"] += 1
        cmd = parse_v2(line, registered) or parse_v1(line, registered)
        if cmd is None:
            continue
        name, props, data = cmd
        if stop_token is not None:
            if name == stop_token.lower():
                registered.discard(stop_token.lower())
                eff["resumes"].append(stop_token)
                stop_token = None
            else:
                eff["ignored_while_stopped"] += 1
            continue
        if name == "stop-commands":
            if not data or (data.lower() in COMMANDS and not allow_unsecure):
                eff["refused_stop_tokens"].append(data)
                continue
            stop_token = data
            registered.add(data.lower())
            eff["stops"].append(data)
        elif name == "set-output":
            eff["outputs"][props.get("name", "")] = data
        elif name == "set-env":
            eff["env"][props.get("name", "")] = data
        elif name == "add-path":
            eff["paths"].append(data)
        elif name == "add-mask":
            eff["masks"].append(data)
        elif name == "save-state":
            eff["state"][props.get("name", "")] = data
        elif name in ("error", "warning", "notice"):
            eff["annotations"].append({"level": name, "message": data, "props": props})
        elif name == "debug":
            eff["debug"].append(data)
        elif name in ("group", "endgroup"):
            eff["groups"] += 1
        elif name in ("add-matcher", "remove-matcher"):
            eff["matchers"] += 1
    eff["stopped_at_end"] = stop_token is not None
    return eff


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    json.dump(run(text, "--allow-unsecure" in sys.argv[2:]), sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
