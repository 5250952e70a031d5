#!/usr/bin/python3
"""ONNX's own checker (check_model with full shape inference) over models.

    onnx-check.py MODEL...

One line per model: "ok: MODEL", "newer opset: MODEL" when the installed
onnx does not know the model's opset (ONNX Runtime checks those: tests/onnx-checker.sh),
or "FAIL: MODEL: reason". Exit 0 iff no model failed.
"""
import sys

import onnx

bad = 0
for p in sys.argv[1:]:
    try:
        m = onnx.load(p)
        v = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
        if v > onnx.defs.onnx_opset_version():
            print("newer opset: %s" % p)
            continue
        onnx.checker.check_model(m, full_check=True)
        print("ok: %s" % p)
    except Exception as e:  # any refusal is the verdict, whatever its type
        bad += 1
        msg = str(e).strip().splitlines()
        print("FAIL: %s: %s" % (p, msg[0] if msg else type(e).__name__))
sys.exit(1 if bad else 0)
