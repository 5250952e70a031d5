#!/bin/sh
# Half-precision exports: YOLO-Master's exporter converts a CPU export to
# float16 for quantize=16 (onnxruntime's float16 tool, inputs and outputs
# kept float32), which leaves TopK in float32 between Casts and appends its
# Casts out of topological order. A copy of every corpus case with a dense
# export so converted (tests/gen/to_fp16.py) is diagnosed, repaired dense
# and sparse from its experts.yaml (the float32 checkpoint), and must match
# the eager references as closely as the converted dense export does
# (float16 noise: within 1.5 times its difference, or one float16 step at
# the largest reference, at least 1e-4: a weight folded by the repair and
# by the exporter may differ in its last float32 bit, and where the dense
# export happens to round well that one bit can flip an output's last
# float16 bit). The converted dense export must load and run: the
# conversion is checked too. A case whose meta.json says why its float16
# copy cannot be repaired (half_refused: testdata/dead_bn, whose present
# experts were never trained) must be refused, saying the checkpoint
# cannot tell.
. "$top_srcdir/tests/lib.sh"
py=/usr/bin/python3
needs_onnx_ort "to make float16 copies"

n=0
half() {
	dir=$1 name=$2
	[ -f "$dir/dense.onnx" ] || return
	n=$((n + 1))
	"$py" "$top_srcdir/tests/gen/to_fp16.py" "$dir/broken.onnx" "$T/$name.onnx" &&
		"$py" "$top_srcdir/tests/gen/to_fp16.py" "$dir/dense.onnx" "$T/dense.onnx" ||
		{ fail "$name: to_fp16.py"; return; }
	"$node" "$cmp" "$T/dense.onnx" "$dir" >"$T/ort" 2>&1 ||
		{ fail "$name: the float16 dense export does not run: $(tail -n 1 "$T/ort")"; return; }
	# A case whose float16 copy no checkpoint value can settle must be
	# refused, not repaired by a guess.
	why=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("half_refused", ""))' "$dir/meta.json" 2>/dev/null)
	if [ -n "$why" ]; then
		expect 1 "$name: diagnosis flags the float16 copy" -- "$BIN" -q "$T/$name.onnx"
		expect 2 "$name: the float16 copy is refused ($why)" -- "$BIN" -q "$T/$name.onnx" \
			--experts "$dir/experts.yaml" -o "$T/$name.out.onnx" &&
			{ grep -q "cannot tell them apart" "$T/err" && ok "$name: the refusal says the checkpoint cannot tell" ||
				fail "$name: refused for another reason: $(cat "$T/err")"; }
		return
	fi
	d=$(sed -n 's/.*over [0-9]* pairs: max abs diff \([^ ]*\)$/\1/p' "$T/ort")
	[ -n "$d" ] || { fail "$name: no difference read from: $(tail -n 1 "$T/ort")"; return; }
	ulp=$("$py" -c 'import glob, sys, numpy as np
print(float(np.spacing(np.float16(max(float(np.abs(np.load(f)).max()) for f in glob.glob(sys.argv[1] + "/out_*.npy"))))))' "$dir") ||
		{ fail "$name: no references read"; return; }
	tol=$(awk -v d="$d" -v u="$ulp" 'BEGIN { t = 1.5 * d; t = t > u ? t : u; printf "%g", (t > 1e-4 ? t : 1e-4) }')
	copy_judge="--max $tol" repair_copy "$dir" "$name" "$T/$name.onnx"
}
each_case half
[ "$n" -ge 10 ] || fail "only $n cases with a dense export"
finish
