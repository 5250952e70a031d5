#!/bin/sh
# Golden files: the repaired graph of a few bundled cases, node by node
# (tests/golden/CASE.txt). A change in what the repair emits shows up as a
# diff to read, not only as a numeric drift. A golden file is the tool's
# own output frozen, so it proves nothing alone: each repaired model must
# also match the eager references in ONNX Runtime (1e-4), and without
# onnxruntime-node this test fails (or, with MOE_ALLOW_NO_ORT=1, says SKIP)
# rather than pass on the frozen graph. After an intended change:
#   UPDATE_GOLDEN=1 make check TESTS=tests/golden.sh
# which refreshes only graphs that are numerically right.
. "$top_srcdir/tests/lib.sh"
node=${NODE:-node}
command -v "$node" >/dev/null || { echo "FAIL: node missing (tools/setup-debian installs it)" >&2; exit 1; }
if ! (cd "$top_srcdir" && "$node" -e "require.resolve('onnxruntime-node')") >/dev/null 2>&1; then
	[ "${MOE_ALLOW_NO_ORT:-}" = 1 ] && { echo "SKIP: onnxruntime-node missing: the golden graphs cannot be checked numerically"; exit 77; }
	echo "FAIL: onnxruntime-node missing: run npm install --ignore-scripts in $top_srcdir" >&2
	exit 1
fi
# example: traced, opset 17; detector_k1: three layers at opset 11 (attribute
# axes); scripted_if: If-gated experts; dynbatch: dynamic batch.
for name in example detector_k1 scripted_if dynbatch; do
	dir=$top_srcdir/testdata/$name
	gold=$top_srcdir/tests/golden/$name.txt
	expect 0 "$name: repair" -- "$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/$name.onnx" ||
		continue
	if "$node" "$top_srcdir/tests/ort/compare.js" "$T/$name.onnx" "$dir" --max 1e-4 >"$T/ort" 2>&1; then
		ok "$name: repaired model matches the references ($(tail -n 1 "$T/ort" | sed 's/.*: max abs diff \([^:]*\):.*/\1/'))"
	else
		fail "$name: repaired model is wrong in ONNX Runtime, golden file not consulted: $(tail -n 1 "$T/ort")"
		continue
	fi
	"$node" "$top_srcdir/tests/ort/ops.js" "$T/$name.onnx" --list >"$T/$name.txt"
	if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
		cp "$T/$name.txt" "$gold" && ok "$name: golden file updated"
	elif diff -u "$gold" "$T/$name.txt" >"$T/diff"; then
		ok "$name: graph matches tests/golden/$name.txt"
	else
		fail "$name: graph differs from tests/golden/$name.txt:
$(head -n 40 "$T/diff")"
	fi
done
finish
