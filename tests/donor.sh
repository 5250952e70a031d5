#!/bin/sh
# A dense export as the weights: every corpus case that has one
# (dense.onnx) is repaired with --weights dense.onnx alone and matches the
# eager references in ONNX Runtime. The tracer leaves most of such a
# donor's parameters unnamed where it folded them ("onnx::Mul_3540", a
# BatchNorm folded into its Conv, a norm's scale) or exported equal ones
# once with Identity nodes for the others; before those were found under
# the module of the node reading them, 33 of these 36 cases were refused.
# A donor with external data is read from its data file.
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

# A donor saved with external data (as one past 2 GiB must be) reads its
# tensors from there: the same repair as from the inline donor. Its
# locations are held to the model's rules: a '..' is refused.
ex=$top_srcdir/testdata/example
mkdir "$T/d"
/usr/bin/python3 - "$ex/dense.onnx" "$T/d/dense.onnx" "$T/up.onnx" <<'PYEOF' || fail "could not write the donors with external data"
import sys, onnx
m = onnx.load(sys.argv[1])
onnx.save(m, sys.argv[2], save_as_external_data=True, all_tensors_to_one_file=True,
	  location="dense.bin", size_threshold=0)
m = onnx.load(sys.argv[2], load_external_data=False)
for t in m.graph.initializer:
	for kv in t.external_data:
		if kv.key == "location":
			kv.value = "../dense.bin"
onnx.save(m, sys.argv[3])
PYEOF
"$BIN" -q "$ex/broken.onnx" --weights "$ex/dense.onnx" -o "$T/inline.onnx" || fail "repair with the inline donor"
expect 0 "donor with external data" -- "$BIN" -q "$ex/broken.onnx" --weights "$T/d/dense.onnx" -o "$T/ext.onnx" &&
	{ cmp -s "$T/inline.onnx" "$T/ext.onnx" && ok "donor with external data: the inline donor's repair" ||
		fail "donor with external data repairs differently"; }
mkdir "$T/sub" && cp "$T/d/dense.bin" "$T/dense.bin" && mv "$T/up.onnx" "$T/sub/up.onnx"
expect 2 "donor with a '..' location" -- "$BIN" -q "$ex/broken.onnx" --weights "$T/sub/up.onnx" -o "$T/up.out.onnx" &&
	one_line_err "donor '..'"
grep -q "'\.\.' component" "$T/err" || fail "donor '..': $(cat "$T/err")"
finish
