#!/bin/sh
# Simplified exports: the ultralytics exporter (YOLO-Master's too) runs
# onnxslim by default, which turns Constant nodes into initializers, merges
# equal tensors and equal nodes, drops Identity and sorts nodes of constants
# first. A copy of every corpus case so simplified (tests/gen/simplify.py)
# repairs, dense and sparse, with the case's experts.yaml to a model that
# matches the eager references and keeps no NonZero/ScatterElements/If;
# diagnosis flags the copy and passes the repair. The dense export's copy
# must still match the references: the simplification keeps the function.
. "$top_srcdir/tests/lib.sh"
node=${NODE:-node}
cmp="$top_srcdir/tests/ort/compare.js"
ops="$top_srcdir/tests/ort/ops.js"
py=/usr/bin/python3
needs_onnx_ort "to make simplified copies"
opcount() { "$node" -e "const c=JSON.parse(process.argv[1]);console.log(c[process.argv[2]]||0)" \
	"$("$node" "$ops" "$1")" "$2"; }

n=0
for dir in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/corpus/*/*/ "$top_srcdir"/../shared/yolo-master/*/; do
	[ -f "$dir/broken.onnx" ] && [ -f "$dir/experts.yaml" ] || continue
	dir=${dir%/}
	name=$(basename "$(dirname "$dir")")_$(basename "$dir")
	n=$((n + 1))
	"$py" "$top_srcdir/tests/gen/simplify.py" "$dir/broken.onnx" "$T/$name.onnx" || { fail "$name: simplify.py"; continue; }
	if [ -f "$dir/dense.onnx" ]; then
		"$py" "$top_srcdir/tests/gen/simplify.py" "$dir/dense.onnx" "$T/dense.onnx" &&
			"$node" "$cmp" "$T/dense.onnx" "$dir" --right >"$T/ort" 2>&1 ||
			{ fail "$name: the simplified dense export does not match eager PyTorch: $(tail -n 1 "$T/ort")"; continue; }
	fi
	expect 1 "$name: diagnosis flags the simplified copy" -- "$BIN" -q "$T/$name.onnx"
	for d in dense sparse; do
		out=$T/$name.$d.onnx
		expect 0 "$name: $d repair of the simplified copy" -- \
			"$BIN" -q "$T/$name.onnx" --experts "$dir/experts.yaml" --dispatch $d -o "$out" || continue
		"$node" "$cmp" "$out" "$dir" --right >"$T/ort" 2>&1 && ok "$name: $d repair matches eager PyTorch" ||
			fail "$name: $d repair: ONNX Runtime: $(tail -n 1 "$T/ort")"
		for op in NonZero ScatterElements If; do
			[ "$(opcount "$out" $op)" = 0 ] || fail "$name: $op left in the $d repair"
		done
		expect 0 "$name: diagnosis passes the $d repair" -- "$BIN" -q "$out"
	done
done
[ "$n" -gt 0 ] || fail "no corpus case found"
finish
