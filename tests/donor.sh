#!/bin/sh
# A dense export as the weights: every corpus case that has one
# (dense.onnx) is repaired with --weights dense.onnx alone and matches the
# eager references in ONNX Runtime. The tracer leaves most of such a
# donor's parameters unnamed where it folded them ("onnx::Mul_3540", a
# BatchNorm folded into its Conv, a norm's scale) or exported equal ones
# once with Identity nodes for the others; before those were found under
# the module of the node reading them, 33 of these 36 cases were refused.
. "$top_srcdir/tests/lib.sh"
needs_onnx_ort "by the ONNX Runtime comparison"
n=0
for dir in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/corpus/*/*/ "$top_srcdir"/../shared/yolo-master/*/; do
	[ -f "$dir/broken.onnx" ] && [ -f "$dir/dense.onnx" ] || continue
	dir=${dir%/}
	name=$(basename "$(dirname "$dir")")_$(basename "$dir")
	n=$((n + 1))
	rm -f "$T/out.onnx"
	expect 0 "$name: repair with the dense export as weights" -- \
		"$BIN" -q "$dir/broken.onnx" --weights "$dir/dense.onnx" -o "$T/out.onnx" || continue
	"$node" "$cmp" "$T/out.onnx" "$dir" --right >"$T/ort" 2>&1 &&
		ok "$name: right in ONNX Runtime" || fail "$name: $(tail -n 1 "$T/ort")"
done
[ "$n" -ge 20 ] || fail "only $n cases have a dense.onnx"
finish
