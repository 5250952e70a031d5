#!/usr/bin/python3
"""Validates onnx-moe-repair reports against schema/report.schema.json.

    report-check.py SCHEMA FILE [EXPR]        a --report FILE.json document
    report-check.py SCHEMA --lines FILE [EXPR] --report - output (JSON Lines)

Beyond the schema, the rules its descriptions state: a document's
exit_status is the highest of its entries' (error 2; damaged 1 outside
repair mode; else 0), and a document-wide error is every entry's. EXPR, a
Python expression over d (the document, or the list of records), must be
true too. Prints what is wrong; exit 0 iff nothing is. Needs Debian's
python3-jsonschema (tests that use it say SKIP without it).
"""
import json
import sys

import jsonschema


def main():
    args = sys.argv[1:]
    lines = "--lines" in args
    if lines:
        args.remove("--lines")
    if len(args) not in (2, 3):
        sys.exit(__doc__)
    schema = json.load(open(args[0]))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    errors = []

    def validate(value, sub, where):
        # A part of the schema, with its $defs beside it for the $refs.
        v = cls(dict(sub, **{"$defs": schema["$defs"]}))
        for e in sorted(v.iter_errors(value), key=lambda e: list(e.path)):
            errors.append("%s%s: %s" % (where, "".join("[%r]" % p for p in e.path), e.message))

    text = open(args[1], encoding="utf-8").read()
    if lines:
        if text and not text.endswith("\n"):
            errors.append("the last record does not end with a newline")
        d = []
        for i, line in enumerate(text.splitlines(), 1):
            try:
                rec = json.loads(line)
            except ValueError as e:
                errors.append("line %d is not one JSON value: %s: %r" % (i, e, line[:200]))
                continue
            validate(rec, {"$ref": "#/$defs/model"}, "line %d" % i)
            d.append(rec)
    else:
        try:
            d = json.loads(text)
        except ValueError as e:
            print("%s: not one JSON document: %s" % (args[1], e))
            sys.exit(1)
        validate(d, schema, "document")
        if not errors:
            code = {"error": 2, "damaged": 1}
            want = max([code.get(m["status"], 0) if d["mode"] != "repair" or m["status"] == "error" else 0
                        for m in d["models"]] + [2 if d["error"] else 0])
            if d["exit_status"] != want:
                errors.append("exit_status %d, but the entries make it %d" % (d["exit_status"], want))
            if d["error"] and any(m.get("error") != d["error"] for m in d["models"]):
                errors.append("a document-wide error must be every entry's")
    if not errors and len(args) == 3 and not eval(args[2], {"d": d}):
        errors.append("does not hold: %s" % args[2])
    for e in errors:
        print("%s: %s" % (args[1], e))
    sys.exit(1 if errors else 0)


main()
