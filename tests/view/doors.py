#!/usr/bin/env python3
"""The doors of docs/cli.md "tkbox view", counted from a bundle's run file independently of the renderer (C).
As a program: prints {"cmd": n, ..., "refused": n, "all": n} for BUNDLE.tkb. usage: doors.py BUNDLE.tkb"""
import json, sys, zipfile

REVIEWERS = {"tkbox.box": "run", "tkbox.egress": "net", "tkbox.approval": "appr", "tkbox.secret.use": "sec",
             "tkbox.secret.leak": "sec", "tkbox.model.call": "model", "tkbox.patch": "files"}
TOOLS = {"Bash": "cmd", "WebFetch": "net", "Write": "files"}
DOORS = ["cmd", "net", "files", "appr", "sec", "model", "gap", "run", "other"]


def door_of(t, d, decisions):
    if t in ("policy.decision", "tool.call"):
        door = TOOLS.get(d.get("tool"), "other")
        decisions[d.get("decision_id")] = door
        return door
    if t == "tool.result":
        return decisions.get(d.get("decision_id"), "other")
    if t == "approval" or t.startswith("approval."):
        return "appr"
    if t == "capture.gap":
        return "gap"
    if t.startswith("run."):
        return "run"
    if t == "review":
        return REVIEWERS.get(d.get("reviewer"), "other")
    return "other"


def refused(t, d):
    v = d.get("verdict") if isinstance(d.get("verdict"), dict) else {}
    return (t == "policy.decision" and d.get("decision") == "deny") or \
        (t == "approval" and d.get("decision") == "reject") or \
        t in ("approval.expired", "approval.refused", "approval.binding_mismatch") or \
        (t == "review" and d.get("reviewer") in ("tkbox.egress", "tkbox.secret.leak")) or \
        (t == "review" and d.get("reviewer") == "tkbox.approval" and v.get("decision") != "approved")


def counts(bundle):
    n = {k: 0 for k in DOORS + ["refused", "all"]}
    decisions = {}
    z = zipfile.ZipFile(bundle)
    for name in z.namelist():
        if not name.startswith("runs/"):
            continue
        for line in z.read(name).decode().splitlines():
            e = json.loads(line)["event"]
            t, d = e["type"], e["data"]
            n[door_of(t, d, decisions)] += 1
            n["all"] += 1
            n["refused"] += refused(t, d)
    return n


if __name__ == "__main__":
    print(json.dumps(counts(sys.argv[1])))
