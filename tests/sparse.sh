#!/bin/sh
# --dispatch sparse, end to end, on every corpus case (testdata/ and, when
# present, ../shared/corpus and ../shared/yolo-master): the repaired model
# matches the eager references in ONNX Runtime (batch 1, batch 2 static in
# testdata/batch2, the dynamic-batch cases at their batch of 3; real
# exports within their own float32 noise, see compare.js --right), every
# layer got the sparse dispatch (the report says so), it keeps no If, Loop,
# NonZero, ScatterElements nor the dense form's GatherElements, is no
# larger than the dense repair (the stacked weights replace the experts'
# own), passes --check and diagnosis, and repairing it again changes
# nothing. Then generated experts with ops the corpus lacks; what falls
# back: a dynamic batch over 3x3 experts stays dense, says why, and is still
# right; and external data in and out.
. "$top_srcdir/tests/lib.sh"
py=/usr/bin/python3
if ! (cd "$top_srcdir" && "$node" -e "require.resolve('onnxruntime-node')") >/dev/null 2>&1; then
	[ "${MOE_ALLOW_NO_ORT:-}" = 1 ] && { echo "SKIP: onnxruntime-node missing"; exit 77; }
	echo "FAIL: onnxruntime-node missing: run npm install --ignore-scripts in $top_srcdir" >&2
	exit 1
fi

# dispatches REPORT: one line per layer, "dispatch fallback-reason".
dispatches() { "$node" -e "for (const m of JSON.parse(require('fs').readFileSync(process.argv[1])).models)
	for (const l of m.layers) console.log(l.dispatch + ' ' + (l.sparse_fallback || '-'))" "$1"; }
size() { wc -c <"$1" | tr -d ' '; }

n=0
for dir in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/corpus/*/*/ "$top_srcdir"/../shared/yolo-master/*/; do
	[ -f "$dir/broken.onnx" ] && [ -f "$dir/experts.yaml" ] || continue
	dir=${dir%/}
	name=$(basename "$(dirname "$dir")")_$(basename "$dir")
	n=$((n + 1))
	out=$T/$name.onnx
	expect 0 "$name: sparse repair" -- "$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$out" \
		--dispatch sparse --report "$T/$name.json" || continue
	if "$node" "$cmp" "$out" "$dir" --right >"$T/ort" 2>&1; then
		ok "$name: matches eager PyTorch ($(tail -n 1 "$T/ort" | sed 's/.*max abs diff \([^:]*\):.*/\1/'))"
	else
		fail "$name: ONNX Runtime: $(tail -n 1 "$T/ort")"
	fi
	dispatches "$T/$name.json" >"$T/disp"
	# A case whose routing the sparse form cannot express says so in
	# sparse.fallback: every layer must fall back to dense with that reason.
	if [ -f "$dir/sparse.fallback" ]; then
		want="dense $(cat "$dir/sparse.fallback")"
		if grep -qvxF -- "$want" "$T/disp"; then
			fail "$name: want every layer '$want': $(grep -vxF -- "$want" "$T/disp" | head -n 1)"
		else
			ok "$name: $(wc -l <"$T/disp" | tr -d ' ') layer(s) dense, as sparse.fallback says"
		fi
		for op in If Loop NonZero ScatterElements Scatter ScatterND; do
			[ "$(opcount "$out" $op)" = 0 ] || fail "$name: $op in the repaired model"
		done
		continue
	fi
	if grep -qv '^sparse -$' "$T/disp"; then
		fail "$name: a layer is not sparse: $(grep -v '^sparse -$' "$T/disp" | head -n 1)"
	else
		ok "$name: $(wc -l <"$T/disp" | tr -d ' ') layer(s) sparse"
	fi
	for op in If Loop NonZero ScatterElements Scatter; do
		[ "$(opcount "$out" $op)" = 0 ] || fail "$name: $op in the sparse model"
	done
	[ "$(opcount "$out" GatherElements)" -le "$(opcount "$dir/broken.onnx" GatherElements)" ] ||
		fail "$name: the sparse model has the dense form's GatherElements"
	expect 0 "$name: dense repair" -- "$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/dense.onnx" &&
		{ [ "$(size "$out")" -le "$(size "$T/dense.onnx")" ] &&
			ok "$name: sparse $(size "$out") bytes, dense $(size "$T/dense.onnx")" ||
			fail "$name: the sparse model ($(size "$out") bytes) is larger than the dense one ($(size "$T/dense.onnx"))"; }
	expect 0 "$name: --check passes on the sparse model" -- \
		"$BIN" -q "$out" --check --experts "$dir/experts.yaml"
	expect 0 "$name: diagnosis without YAML passes the sparse model" -- "$BIN" -q "$out"
	expect 0 "$name: repair of the sparse model" -- \
		"$BIN" -q "$out" --experts "$dir/experts.yaml" -o "$T/again.onnx" --dispatch sparse &&
		{ cmp -s "$out" "$T/again.onnx" && ok "$name: second repair is byte-identical" ||
			fail "$name: repairing a sparse model changed it"; }
done
[ "$n" -gt 0 ] || fail "no corpus case found"

# The summary names the dispatch and the expert FLOPs against dense.
d=$top_srcdir/testdata/detector_k2
"$BIN" "$d/broken.onnx" --experts "$d/experts.yaml" -o "$T/s.onnx" --dispatch sparse 2>"$T/err"
grep -q 'model.5: .*; sparse dispatch, expert FLOPs per input .* vs .* dense (0.125x)$' "$T/err" &&
	ok "summary: sparse dispatch and FLOPs per layer" || fail "summary lacks the dispatch line: $(cat "$T/err")"
# Linear experts count too: token_onehot's SwiGLU expert is three 16x32
# MatMuls, 2*3*512 = 3072 FLOPs a token.
d2=$top_srcdir/testdata/token_onehot
"$BIN" -q "$d2/broken.onnx" --experts "$d2/experts.yaml" -o "$T/t.onnx" --report "$T/t.json" &&
	"$node" -e "for (const l of JSON.parse(require('fs').readFileSync(process.argv[1])).models[0].layers)
		if (l.expert_flops !== 3072) process.exit(1)" "$T/t.json" &&
	ok "expert FLOPs of Linear experts" || fail "expert FLOPs of Linear experts: $(cat "$T/t.json")"
expect 2 "--dispatch takes dense or sparse" -- "$BIN" "$d/broken.onnx" --experts "$d/experts.yaml" --dispatch fast
one_line_err "--dispatch fast"

if ! "$py" -c 'import onnx' 2>/dev/null; then
	echo "SKIP: $py with the onnx module (Debian python3-onnx) is needed for the fallback and external data cases"
	finish
fi

# A dynamic batch leaves no static group count: 3x3 (and depthwise) experts
# stay dense, each with its reason, and the model stays right at batch 1.
d=$top_srcdir/testdata/convkinds
"$py" - "$d/broken.onnx" "$T/dyn.onnx" <<'PY'
import sys
import onnx
m = onnx.load(sys.argv[1])
for v in list(m.graph.input) + list(m.graph.output):
    v.type.tensor_type.shape.dim[0].dim_param = "batch"
onnx.save(m, sys.argv[2])
PY
expect 0 "dynamic batch, 3x3 experts: sparse repair" -- "$BIN" "$T/dyn.onnx" --experts "$d/experts.yaml" \
	-o "$T/dyn.out.onnx" --dispatch sparse --report "$T/dyn.json"
grep -q 'model.4: .*dense dispatch (sparse not possible: the batch is dynamic and Conv .* is not a 1x1' "$T/err" &&
	ok "dynamic batch: the summary says why the 3x3 layer stays dense" ||
	fail "dynamic batch: no fallback reason in the summary: $(cat "$T/err")"
dispatches "$T/dyn.json" >"$T/disp"
[ "$(grep -c '^dense the batch is dynamic' "$T/disp")" = 3 ] &&
	ok "dynamic batch: the report gives each of the 3 layers its reason" ||
	fail "dynamic batch: report dispatches: $(cat "$T/disp")"
"$node" "$cmp" "$T/dyn.out.onnx" "$d" --right >"$T/ort" 2>&1 && ok "dynamic batch: the dense fallback is right" ||
	fail "dynamic batch fallback: $(tail -n 1 "$T/ort")"

# Expert ops the corpus lacks, checked against NumPy references
# (bench/gen.py): unfolded BatchNormalization, Clip with constant bounds,
# MaxPool, a per-channel scale from the checkpoint and a residual Add of the
# expert's input, at static batches of 1 and 3; GhostNet's channel Concat
# and Slice at batch 3; plain experts at batch 4.
for args in "--expert mixed" "--expert mixed --batch 3" "--batch 4" "--expert ghost --batch 3"; do
	gen=$T/gen
	rm -rf "$gen"
	gw="generated ($args)"
	"$py" "$top_srcdir/bench/gen.py" "$gen" --layers 2 --channels 16 --experts 8 --hw 8 --ref 2 $args >/dev/null ||
		{ fail "$gw: bench/gen.py"; continue; }
	expect 0 "$gw: sparse repair" -- "$BIN" -q "$gen/broken.onnx" --experts "$gen/experts.yaml" -o "$gen/out.onnx" \
		--dispatch sparse --report "$gen/r.json" || continue
	"$node" "$cmp" "$gen/out.onnx" "$gen" --max 1e-4 >"$T/ort" 2>&1 && ok "$gw: right" ||
		fail "$gw: $(tail -n 1 "$T/ort")"
	dispatches "$gen/r.json" >"$T/disp"
	grep -qv '^sparse -$' "$T/disp" && fail "$gw: a layer is not sparse: $(head -n 1 "$T/disp")" ||
		ok "$gw: both layers sparse"
done

# The ghost model (the loop's last) with its batch declared dynamic: its first layer takes the
# 1x1 layout (batched MatMul, Concat and Slice on the channel axis 2) and is
# still right at batch 3.
"$py" - "$gen/broken.onnx" "$T/ghostdyn.onnx" <<'PY'
import sys
import onnx
m = onnx.load(sys.argv[1])
for v in list(m.graph.input) + list(m.graph.output):
    v.type.tensor_type.shape.dim[0].dim_param = "batch"
onnx.save(m, sys.argv[2])
PY
expect 0 "ghost, dynamic batch: sparse repair" -- "$BIN" -q "$T/ghostdyn.onnx" --experts "$gen/experts.yaml" \
	-o "$T/ghostdyn.out.onnx" --dispatch sparse
[ "$(opcount "$T/ghostdyn.out.onnx" MatMul)" -gt 0 ] && ok "ghost, dynamic batch: the 1x1 layout (MatMul)" ||
	fail "ghost, dynamic batch: no MatMul, the 1x1 layout was not taken"
"$node" "$cmp" "$T/ghostdyn.out.onnx" "$gen" --max 1e-4 >"$T/ort" 2>&1 && ok "ghost, dynamic batch: right at batch 3" ||
	fail "ghost, dynamic batch: $(tail -n 1 "$T/ort")"

# External data: weights read from the input's data file, the stacked
# tensors written to --external-data, once.
gen=$T/ext
"$py" "$top_srcdir/bench/gen.py" "$gen" --layers 2 --channels 32 --experts 8 --hw 8 --external --ref 2 >/dev/null ||
	fail "bench/gen.py --external"
expect 0 "external data: sparse repair" -- "$BIN" -q "$gen/broken.onnx" --experts "$gen/experts.yaml" \
	-o "$gen/out.onnx" --external-data out.onnx.data --dispatch sparse
"$node" "$cmp" "$gen/out.onnx" "$gen" --max 1e-4 >"$T/ort" 2>&1 && ok "external data: sparse model right" ||
	fail "external data: $(tail -n 1 "$T/ort")"
expect 0 "external data: dense repair" -- "$BIN" -q "$gen/broken.onnx" --experts "$gen/experts.yaml" \
	-o "$gen/dense.onnx" --external-data dense.onnx.data
# Float weight bytes each model references, inline or external: the
# experts once (integer shapes and indices aside).
wbytes() { "$py" - "$1" <<'PY'
import sys
import numpy as np
import onnx
from onnx import mapping
m = onnx.load(sys.argv[1], load_external_data=False)
print(sum(int(np.prod(t.dims)) * np.dtype(mapping.TENSOR_TYPE_TO_NP_TYPE[t.data_type]).itemsize
	  for t in m.graph.initializer if t.data_type in (1, 10, 11, 16)))
PY
}
s=$(wbytes "$gen/out.onnx") dn=$(wbytes "$gen/dense.onnx")
[ "$s" -le "$dn" ] && ok "external data: the sparse model holds $s bytes of weights, the dense one $dn" ||
	fail "external data: the sparse model holds $s bytes of weights, more than the dense one's $dn"
[ -s "$gen/out.onnx.data" ] && ok "external data: stacked weights in out.onnx.data" ||
	fail "external data: out.onnx.data missing or empty"
finish
