#!/usr/bin/env python3
# Validate every event of one or more .tkb bundles (runs/*.jsonl and keys/records.jsonl) against Tracekit's event
# schema v2 (tests/verify/vectors/tracekit.event.v2.json, Draft 2020-12) with python3-jsonschema: an independent
# check, by a general JSON Schema implementation, of what tkbox-signer writes.
# usage: schema-check.py SCHEMA BUNDLE... ; prints one line per bundle; exit 1 on any invalid event.
import json
import sys
import zipfile

try:
    import jsonschema
except ImportError:
    print("schema-check: python3-jsonschema is not installed (make deps installs it)", file=sys.stderr)
    sys.exit(2)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    bad = 0
    for path in sys.argv[2:]:
        counts = {}
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if not (name.startswith("runs/") or name == "keys/records.jsonl"):
                    continue
                for n, line in enumerate(z.read(name).decode("utf-8").splitlines()):
                    event = json.loads(line)["event"]
                    errors = sorted(validator.iter_errors(event), key=lambda e: list(e.absolute_path))
                    for e in errors:
                        where = ".".join(str(p) for p in e.absolute_path) or "(event)"
                        print(f"{path}: {name} line {n} ({event.get('type')}): {where}: {e.message[:300]}")
                    bad += bool(errors)
                    counts[event.get("type")] = counts.get(event.get("type"), 0) + 1
        print(f"{path}: {sum(counts.values())} events checked against the schema: "
              + ", ".join(f"{t} {c}" for t, c in sorted(counts.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
