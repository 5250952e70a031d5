#!/bin/sh
# An independent verdict on our output: ONNX's own checker with full shape
# inference (Debian's python3-onnx) over every repaired testdata model. Its
# opset tables stop at 17, so newer models are left to ONNX Runtime
# (tests/repair.sh). MOE_ALLOW_NO_ORT=1 skips when python3-onnx is missing.
. "$top_srcdir/tests/lib.sh"
py=${PYTHON_ONNX:-/usr/bin/python3}
if ! "$py" -c 'import onnx' 2>/dev/null; then
	[ "${MOE_ALLOW_NO_ORT:-}" = 1 ] && { echo "SKIP: python3-onnx missing"; exit 77; }
	echo "FAIL: python3-onnx missing: apt-get install python3-onnx (tools/setup-debian does)" >&2
	exit 1
fi
for dir in "$top_srcdir"/testdata/*/; do
	[ -f "$dir/broken.onnx" ] || continue
	name=$(basename "$dir")
	expect 0 "$name: repair" -- "$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/$name.onnx" ||
		continue
	if "$py" - "$T/$name.onnx" >"$T/out" 2>&1 <<'PY'
import sys, onnx
m = onnx.load(sys.argv[1])
v = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
if v > 17:
    print("opset", v, "newer than python3-onnx knows")
else:
    onnx.checker.check_model(m, full_check=True)
    print("checker and shape inference pass")
PY
	then
		ok "$name: $(tail -n 1 "$T/out")"
	else
		fail "$name: onnx.checker: $(tail -n 1 "$T/out")"
	fi
done
finish
