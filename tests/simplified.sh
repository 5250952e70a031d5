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
py=/usr/bin/python3
needs_onnx_ort "to make simplified copies"

# The traced dispatch is gone from a repair.
no_dispatch_left() {
	for op in NonZero ScatterElements Scatter If; do
		[ "$(opcount "$1" $op)" = 0 ] || fail "$name: $op left in the $2 repair"
	done
}

# One case: its simplified copy, diagnosed and repaired both ways.
simplified() {
	dir=$1 name=$2
	"$py" "$top_srcdir/tests/gen/simplify.py" "$dir/broken.onnx" "$T/$name.onnx" || { fail "$name: simplify.py"; return; }
	if [ -f "$dir/dense.onnx" ]; then
		"$py" "$top_srcdir/tests/gen/simplify.py" "$dir/dense.onnx" "$T/dense.onnx" &&
			"$node" "$cmp" "$T/dense.onnx" "$dir" --right >"$T/ort" 2>&1 ||
			{ fail "$name: the simplified dense export does not match eager PyTorch: $(tail -n 1 "$T/ort")"; return; }
	fi
	repair_copy "$dir" "$name" "$T/$name.onnx" no_dispatch_left
}
each_case simplified
finish
