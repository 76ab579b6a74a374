#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Static checks of action/action.yml and examples/agent-fix.yml (an actionlint-like sanity pass).

usage: check-action-yml.py SRC_DIR     (TAP on stdout; exit 1 on any failure)

- action.yml parses; it is a composite action; every run step has a shell and calls run.sh with a subcommand
  run.sh has; no run script holds an expression (${{ ... }}): inputs reach the scripts through env only (no
  script injection); every input is used and every ${{ inputs.X }} names an input; every TKA_* variable the
  action sets is read by run.sh and the other way round; every output maps to a step id and an output run.sh
  writes; every `uses:` is pinned to a full commit.
- the example has three jobs: the first two hold only read permissions and persist no credentials, only the last
  can write, the test job references no secret, the write job runs no repository code, and no run script
  interpolates an expression of untrusted text.
- control: the same checks on an action.yml with `${{ inputs.prompt }}` put into a run script fail.
"""
import copy
import re
import sys

import yaml

SRC = sys.argv[1] if len(sys.argv) > 1 else "."
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
n = 0
failed = 0


def check(name, cond, detail=""):
    global n, failed
    n += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (n, name))
    if not cond:
        failed += 1
        if detail:
            print("#   " + str(detail))


def run_sh_facts():
    text = open(SRC + "/action/run.sh").read()
    subs = set(re.findall(r"^([a-z-]+)\) cmd_", text, re.M))
    outs = set(re.findall(r'out_set ([a-z-]+) ', text))
    reads = set(re.findall(r"\bTKA_[A-Z_]+\b", text))
    return subs, outs, reads


def action_problems(a, subs, outs, reads):
    """The list of problems of one parsed action.yml (empty when it passes)."""
    p = []
    if a.get("runs", {}).get("using") != "composite":
        p.append("runs.using is not composite")
    steps = a["runs"].get("steps", [])
    ids = {s["id"] for s in steps if "id" in s}
    inputs = set(a.get("inputs", {}))
    used_inputs, set_vars = set(), set()
    for i, s in enumerate(steps):
        where = "step %d (%s)" % (i, s.get("name", "?"))
        if "run" in s:
            if s.get("shell") != "bash":
                p.append(where + ": no shell: bash")
            if EXPR.search(s["run"]):
                p.append(where + ": an expression in the run script: " + EXPR.search(s["run"]).group(0))
            m = re.fullmatch(r'"\$GITHUB_ACTION_PATH/run\.sh" ([a-z-]+)', s["run"].strip())
            if not m or m.group(1) not in subs:
                p.append(where + ": does not call run.sh with one of its subcommands")
        elif "uses" in s:
            if not re.search(r"@[0-9a-f]{40}$", s["uses"]):
                p.append(where + ": uses is not pinned to a commit: " + s["uses"])
        else:
            p.append(where + ": neither run nor uses")
        for k, v in (s.get("env") or {}).items():
            set_vars.add(k)
            for e in EXPR.findall(str(v)):
                if not re.fullmatch(r"inputs\.[a-z-]+", e):
                    p.append(where + ": env %s is not one input: %s" % (k, e))
        texts = [str(v) for v in list((s.get("env") or {}).values()) + list((s.get("with") or {}).values())]
        exprs = [e for t in texts for e in EXPR.findall(t)] + [str(s.get("if", ""))]
        if True:
            for e in exprs:
                for m in re.findall(r"inputs\.([a-z-]+)", e):
                    used_inputs.add(m)
                    if m not in inputs:
                        p.append(where + ": inputs.%s is not an input" % m)
    unused = inputs - used_inputs
    if unused:
        p.append("inputs never used: %s" % sorted(unused))
    tka = {v for v in set_vars if v.startswith("TKA_")}
    if tka - reads:
        p.append("TKA_ variables set but never read by run.sh: %s" % sorted(tka - reads))
    internal = {"TKA_BIN_DIR", "TKA_DIR", "TKA_ACCEL", "TKA_SECRET_VARS"}
    if reads - tka - internal:
        p.append("TKA_ variables run.sh reads that the action never sets: %s" % sorted(reads - tka - internal))
    for name, o in (a.get("outputs") or {}).items():
        m = re.fullmatch(r"\$\{\{ steps\.([a-z-]+)\.outputs\.([a-z-]+) \}\}", str(o.get("value", "")))
        if not m or m.group(1) not in ids or m.group(2) not in outs:
            p.append("output %s: not a step output run.sh writes: %s" % (name, o.get("value")))
    return p


def main():
    subs, outs, reads = run_sh_facts()
    check("run.sh has the nine subcommands",
          subs == {"setup-kvm", "install", "start", "run", "stop", "apply", "export", "summary", "cleanup"}, subs)
    a = yaml.safe_load(open(SRC + "/action/action.yml"))
    check("action.yml parses", isinstance(a, dict))
    probs = action_problems(a, subs, outs, reads)
    check("action.yml: composite, shells, run.sh calls, env-only inputs, pinned uses, outputs", not probs,
          "; ".join(probs))
    want_out = {"bundle", "trust", "verdict", "assurance", "isolation", "applied", "files"}
    check("action.yml has the outputs bundle, trust, verdict, assurance, isolation, applied, files",
          want_out <= set(a.get("outputs", {})), sorted(a.get("outputs", {})))
    want_in = {"command", "agent", "prompt", "image", "allow", "secrets", "workspace", "timeout", "apply",
               "artifact-name"}
    check("action.yml has the inputs " + ", ".join(sorted(want_in)), want_in <= set(a.get("inputs", {})))
    names = [s.get("uses", "") for s in a["runs"]["steps"]]
    check("the bundle is uploaded with actions/upload-artifact", any("actions/upload-artifact@" in u for u in names))
    # Control: one injected expression, one unpinned action, each found.
    bad = copy.deepcopy(a)
    bad["runs"]["steps"][3]["run"] = 'echo "${{ inputs.prompt }}"; ' + bad["runs"]["steps"][3]["run"]
    check("control: an ${{ inputs.prompt }} in a run script is found",
          any("expression in the run script" in x for x in action_problems(bad, subs, outs, reads)))
    bad = copy.deepcopy(a)
    for s in bad["runs"]["steps"]:
        if "uses" in s:
            s["uses"] = "actions/upload-artifact@v4"
    check("control: an unpinned uses is found",
          any("not pinned" in x for x in action_problems(bad, subs, outs, reads)))

    w = yaml.safe_load(open(SRC + "/examples/agent-fix.yml"))
    jobs = w.get("jobs", {})
    check("example: three jobs agent, test, pr", list(jobs) == ["agent", "test", "pr"], list(jobs))
    check("example: no default permissions for the workflow", w.get("permissions") == {})
    for j in ("agent", "test"):
        perms = jobs[j].get("permissions", {})
        check("example: job %s can only read" % j, perms and all(v in ("read", "none") for v in perms.values()),
              perms)
    for j in jobs:
        cos = [s for s in jobs[j]["steps"] if s.get("uses", "").startswith("actions/checkout@")]
        check("example: job %s checks out without persisting credentials" % j,
              cos and all(s.get("with", {}).get("persist-credentials") is False for s in cos))
        for s in jobs[j]["steps"]:
            if "run" in s:
                exprs = EXPR.findall(s["run"])
                check("example: job %s step %r interpolates nothing into its script" % (j, s.get("name", s["run"][:30])),
                      not exprs, exprs)
            if "uses" in s and not s["uses"].startswith("Cygnux-Labs/"):
                check("example: %s pinned to a commit" % s["uses"], re.search(r"@[0-9a-f]{40}$", s["uses"]))
    check("example: only the pr job can write", jobs["pr"]["permissions"].get("contents") == "write")
    check("example: the test job references no secret", "secrets." not in yaml.safe_dump(jobs["test"]))
    pr_runs = " ".join(s.get("run", "") for s in jobs["pr"]["steps"])
    check("example: the pr job runs no repository code (no make, npm, ./, sh script)",
          not re.search(r"\b(make|npm|npx|yarn|pip|python|node)\b|\./|\bsh \S+\.sh", pr_runs), pr_runs)
    check("example: the pr job's git runs no hooks", pr_runs.count("core.hooksPath=/dev/null") >= 2)
    print("1..%d" % n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
