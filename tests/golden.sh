#!/bin/sh
# Golden files: the repaired graph of a few bundled cases, node by node
# (tests/golden/CASE.txt). A change in what the repair emits shows up as a
# diff to read, not only as a numeric drift. After an intended change:
#   UPDATE_GOLDEN=1 make check TESTS=tests/golden.sh
. "$top_srcdir/tests/lib.sh"
node=${NODE:-node}
command -v "$node" >/dev/null || { echo "FAIL: node missing (tools/setup-debian installs it)" >&2; exit 1; }
# example: traced, opset 17; detector_k1: three layers at opset 11 (attribute
# axes); scripted_if: If-gated experts; dynbatch: dynamic batch.
for name in example detector_k1 scripted_if dynbatch; do
	dir=$top_srcdir/testdata/$name
	gold=$top_srcdir/tests/golden/$name.txt
	expect 0 "$name: repair" -- "$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/$name.onnx" ||
		continue
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
