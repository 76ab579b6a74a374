#!/usr/bin/env python3
# Differential test of tkbox's per-type event rules (src/verify/schema.c, through tkb-schema) against
# python3-jsonschema and the schema they both encode (tests/verify/vectors/tracekit.event.v2.json @687a96c).
# Sample events: every event of the given bundles plus a few of types and fields tkbox-signer does not write (among
# them what Tracekit's own signer writes: policy.external from decision_import, the import and gateway sources,
# span_id, run.final coverage, a certified record key). Each is mutated
# (every key dropped, an unknown key added to every object, every value replaced by values of other types and by
# strings of lengths around the schema's bounds, arrays grown past theirs) and both must agree on every variant.
# usage: schema-diff.py SCHEMA TKB-SCHEMA BUNDLE...   exit 1 on any disagreement.
import copy
import json
import subprocess
import sys
import zipfile

try:
    import jsonschema
except ImportError:
    print("schema-diff: python3-jsonschema is not installed (make deps installs it)", file=sys.stderr)
    sys.exit(2)

H = "sha256:" + "ab" * 32
C = "hmac-sha256:" + "cd" * 32
TS = "2026-11-29T08:00:00.000000Z"
OTHERS = [
    ("tool.call", {"tool_use_id": "c", "name": "Bash", "input": {"command": {"value": "ls", "redacted": False}}}),
    ("model.exchange", {"exchange_id": "x", "phase": "response", "streamed": True, "added_latency_ms": 1.5,
                        "usage": {"input_tokens": 1, "output_tokens": 2},
                        "tool_uses": [{"id": "u", "name": "n", "args_unparseable": True}],
                        "response": {"hash": C, "size": 3, "redacted": False}}),
    ("state.write", {"store": "s", "key": "k", "prev_digest": None, "digest": C}),
    ("approval.refused", {"tool_use_id": "c", "rule_ids": ["TK-X"], "reason": "r"}),
    ("approval.binding_mismatch", {"approval_id": "a", "tool_use_id": "c", "approved_commitment": C,
                                   "args_commitment": C}),
    ("refusal.summary", {"code": "forbidden", "count": 1, "from_ts": TS, "to_ts": TS}),
    ("reconcile.fabricated", {"layers": ["L1"], "detail": "d"}),
    ("trace.tamper", {"path": "p", "before": {"hash": H, "length": 1}, "after": {"hash": None}, "kind": "edited"}),
    ("run.start", {"agent": {"name": "a"}, "host": "h", "os_user": "u", "fail_mode": "open",
                   "policy": {"version": "1", "hash": H}, "capture_sources": ["hook"], "sandbox": "none",
                   "content_capture": "full", "signer_isolation": "same-user",
                   "harness": {"name": "n", "exe": "e", "pid": 1, "attested": True}}),
    ("checkpoint", {"head_seq": 1, "head_hash": "ab" * 32, "kid": "k", "witnesses": ["w"]}),
    ("log.closed", {"final_seq": 3}),
    ("key.retire", {"kid": H, "last_seq": 3}),
    ("policy.external", {"system": "aws-agentcore-policy", "decision": "deny", "tool_use_id": "tc-1",
                         "tool": "RefundTarget___process_refund", "rule_ids": ["refund-limit-1000"],
                         "reason": "a forbid policy matched", "signature": "unverified",
                         "record": {"hash": C, "size": 3},
                         "identity": {"scheme": "mtls", "subject": "spiffe://acme/pdp", "attested": True},
                         "salt_id": "s-1"}, {"source": "import", "tier": "T3", "span_id": "00f067aa0ba902b7"}),
    ("model.exchange", {"exchange_id": "x", "phase": "request", "streamed": False, "salt_id": "s-2"},
     {"source": "gateway", "tier": "T2"}),
    ("capture.gap", {"tenant_level": False, "reason": "other-pdp decided ask; the signer decided allow",
                     "kind": "decision_mismatch"}, {}),
    ("run.final", {"head_run_seq": 3, "head_hash": H,
                   "coverage": {"layers": ["L1", "L3"], "reconciled": 2, "unreconciled": {
                       "hook_missing": 1, "fabricated": 1, "args_mismatch": 2, "args_unparseable": 1,
                       "result_without_call": 1}}}, {}),
    ("run.registered", {"agent": {"name": "a", "version": "1"},
                        "identity": {"scheme": "oidc", "subject": "s", "attested": True, "person": "p"},
                        "signer_isolation": "remote", "fidelity": "none", "analyzes": "run-0",
                        "harness": {"name": "claude", "exe": "/usr/bin/claude", "pid": 7, "start_time": None,
                                    "attested": True}}, {}),
    ("approval", {"tool_use_id": "c", "decision": "approve", "approver": "a", "channel": "slack", "person": "p",
                  "groups": ["ops"], "via": {"scheme": "token", "subject": "slack-bridge", "attested": True},
                  "approver_identity": {"scheme": "oidc", "subject": "s", "attested": True, "person": "p"}}, {}),
    ("signer.epoch", {"keys": [{"kid": H, "alg": "ed25519", "spki": "AAAA", "cert": {
        "certificate": {"cert": {"kid": H, "spki": "AAAA", "log_id": "0" * 32, "tenants": ["acme"], "not_before": 0,
                                 "not_after": 9, "serial": "0a"}, "sig": "AAAA=="},
        "index": 0, "inclusion": ["AAAA"], "checkpoint": "c"}}]}, {}),
    ("tool.result", {"tool_use_id": "c", "ok": True, "output": {"value": "x", "redacted": False}, "salt_id": "s-3"},
     {}),
    ("trace.tamper", {"tenant_level": True, "path": "p", "before": {}, "after": {}}, {}),
]
LENGTHS = (0, 1, 24, 25, 27, 28, 32, 33, 64, 65, 71, 72, 76, 77, 128, 129, 200, 201, 256, 257, 1024, 1025, 4096, 4097)
VALUES = [None, True, False, 0, -1, 1, 2, 9007199254740991, 9007199254740992, 1.5, [], {}, "x", "run-1", "a b",
          H, C, TS, "0" * 32, "0" * 16, "0" * 17, "ed25519:" + "0" * 16, "AAAA==", "é" * 256, "é" * 257, "tkbox@1",
          "L1", "T2", "raw", "import", "gateway"]


def paths(v, p=()):
    yield p, v
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths(x, p + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from paths(x, p + (i,))


def at(root, p):
    for k in p:
        root = root[k]
    return root


def variants(ev):
    for p, v in list(paths(ev)):
        if p:
            parent = at(ev, p[:-1])
            if isinstance(parent, dict):
                e = copy.deepcopy(ev)
                del at(e, p[:-1])[p[-1]]
                yield e
            repl = list(VALUES) + ["s" * n for n in LENGTHS]
            if isinstance(v, str) and v:
                repl += [v + "x", v[:-1], v.upper(), v + " "]
            for r in repl:
                e = copy.deepcopy(ev)
                at(e, p[:-1])[p[-1]] = r
                yield e
        if isinstance(v, dict):
            e = copy.deepcopy(ev)
            at(e, p)["zz_unknown"] = 1
            yield e
        if isinstance(v, list):
            for n in (7, 17, 33, 65, 1025):
                e = copy.deepcopy(ev)
                at(e, p).extend([v[0] if v else "x"] * n)
                yield e


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    validator = jsonschema.Draft202012Validator(schema)
    samples, base = {}, None
    for path in sys.argv[3:]:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name.startswith("runs/") or name == "keys/records.jsonl":
                    for line in z.read(name).decode().splitlines():
                        ev = json.loads(line)["event"]
                        samples.setdefault(ev["type"], ev)
                        base = base or ev
    extra = []
    for typ, data, *top in OTHERS:
        ev = copy.deepcopy(base)
        ev["type"], ev["data"] = typ, data
        if top:   # always a sample, beside the bundle's event of that type
            ev.update(top[0])
            extra.append(ev)
        else:
            samples.setdefault(typ, ev)
    for ev in extra:   # the samples themselves are valid, so their mutations probe each rule from the valid side
        errs = [e.message[:200] for e in validator.iter_errors(ev)]
        assert not errs, (ev["type"], errs)
    events = []
    for ev in list(samples.values()) + extra:
        events.append(ev)
        events.extend(variants(ev))
    text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events)
    out = subprocess.run([sys.argv[2]], input=text.encode(), capture_output=True, check=True).stdout.decode()
    verdicts = out.splitlines()
    assert len(verdicts) == len(events), (len(verdicts), len(events))
    disagree, valid, unparsed = 0, 0, 0
    for ev, c in zip(events, verdicts):
        if c == "unparsed":   # refused before any schema rule, as Tracekit's strict parser does (2^53 and above)
            unparsed += 1
            continue
        py = validator.is_valid(ev)
        valid += py
        if py != (c == "ok"):
            disagree += 1
            if disagree <= 10:
                errs = [e.message[:120] for e in validator.iter_errors(ev)][:2]
                print(f"DISAGREE {ev['type']}: jsonschema {'valid' if py else errs}, tkbox {c}")
                print("   ", json.dumps(ev)[:600])
    types = set(samples) | {ev["type"] for ev in extra}
    print(f"schema-diff: {len(events)} events ({len(samples) + len(extra)} samples of {len(types)} types, {valid} "
          f"valid, {unparsed} refused by the strict parser first), {disagree} disagreement(s)")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
