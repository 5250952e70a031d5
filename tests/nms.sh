#!/bin/sh
# An nms=True export (tests/gen/nms.py: the exporter's NMS wrapper around a
# detector with two MoE layers): the post-processing's NonZero (the score
# threshold), NonMaxSuppression, Pad and ScatterND sit behind the routed
# layers and are not dispatch. The tracer bakes the dummy's detection count
# into the pad, so the export does not follow eager PyTorch; the dense
# export, run in ONNX Runtime, is the reference. Diagnosis and --check flag
# the broken export and pass the dense one; the repairs (experts.yaml dense
# and sparse, --weights alone) match the dense export, keep its Conv count
# and the NMS, and pass diagnosis.
. "$top_srcdir/tests/lib.sh"
needs_onnx_ort "to judge the nms=True export"

D=$top_srcdir/tests/nms
[ -f "$D/broken.onnx" ] && [ -f "$D/dense.onnx" ] || { fail "no tests/nms case"; finish; }
expect 1 "diagnosis flags the broken export" -- "$BIN" -q "$D/broken.onnx"
expect 1 "--check flags the broken export" -- "$BIN" --check -q "$D/broken.onnx"
expect 0 "diagnosis passes the dense export" -- "$BIN" -q "$D/dense.onnx"
expect 0 "--check passes the dense export" -- "$BIN" --check -q "$D/dense.onnx"

# The dense export's outputs are the references.
mkdir "$T/ref" && cp "$D"/in_*.npy "$T/ref/" || exit 99
"$node" "$cmp" "$D/dense.onnx" "$T/ref" --dump "$T/ref" >"$T/ort" 2>&1 ||
	{ fail "the dense export does not run: $(tail -n 1 "$T/ort")"; finish; }
for f in "$T"/ref/got_*.npy; do
	mv "$f" "$T/ref/out_${f##*/got_}" || exit 99
done
"$node" "$cmp" "$D/broken.onnx" "$T/ref" --min 1e-2 >"$T/ort" 2>&1 && ok "the broken export is wrong" ||
	fail "the broken export is not wrong: $(tail -n 1 "$T/ort")"

convs=$(opcount "$D/dense.onnx" Conv)
for run in dense sparse weights; do
	out=$T/$run.onnx
	if [ $run = weights ]; then
		expect 0 "repair from --weights" -- "$BIN" -q "$D/broken.onnx" --weights "$D/model.safetensors" -o "$out" || continue
	else
		expect 0 "$run repair" -- "$BIN" -q "$D/broken.onnx" --experts "$D/experts.yaml" --dispatch $run -o "$out" || continue
	fi
	"$node" "$cmp" "$out" "$T/ref" --max 1e-4 >"$T/ort" 2>&1 && ok "$run repair matches the dense export" ||
		fail "$run repair: $(tail -n 1 "$T/ort")"
	[ "$run" = sparse ] || [ "$(opcount "$out" Conv)" = "$convs" ] ||
		fail "$run repair: $(opcount "$out" Conv) Conv nodes, the dense export has $convs"
	[ "$(opcount "$out" NonMaxSuppression)" = 1 ] || fail "$run repair: the NMS is gone"
	[ "$(opcount "$out" If)" = 0 ] || fail "$run repair: If left"
	expect 0 "$run repair passes diagnosis" -- "$BIN" -q "$out"
done
finish
