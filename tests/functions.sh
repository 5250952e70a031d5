#!/bin/sh
# Exports whose modules are ONNX functions (tests/gen/functions.py:
# export_modules_as_functions over testdata/example's network). The tracer
# drops the missing experts inside the MoE function, where no analysis of
# the graph used to look: diagnosis said "no MoE router found" (exit 0).
# Calls are now inlined before the analyses: diagnosis flags the broken
# exports, the repairs (experts.yaml dense and sparse, --weights alone)
# match testdata/example's eager references, hold no function and pass
# ONNX's checker and diagnosis; the dense export, healthy, is copied as it
# came, functions and all.
. "$top_srcdir/tests/lib.sh"
needs_onnx_ort "to judge the exports with functions"

D=$top_srcdir/tests/functions
E=$top_srcdir/testdata/example
py=/usr/bin/python3
for case in broken nested; do
	m=$D/$case.onnx
	[ -f "$m" ] || { fail "no $m"; continue; }
	expect 1 "$case: diagnosis flags it" -- "$BIN" "$m" &&
		{ grep -q "missing 1,2" "$T/err" && grep -q "calls of model-local functions looked into" "$T/err" ||
			fail "$case: diagnosis: $(cat "$T/err")"; }
	"$node" "$cmp" "$m" "$E" --wrong >"$T/ort" 2>&1 && ok "$case: the export is wrong" ||
		fail "$case: the export is not wrong: $(tail -n 1 "$T/ort")"
	for run in dense sparse weights; do
		out=$T/$case-$run.onnx
		if [ $run = weights ]; then
			expect 0 "$case: repair from --weights" -- "$BIN" -q "$m" --weights "$E/model.safetensors" -o "$out" || continue
		else
			expect 0 "$case: $run repair" -- "$BIN" -q "$m" --experts "$E/experts.yaml" --dispatch $run -o "$out" || continue
		fi
		"$node" "$cmp" "$out" "$E" --right >"$T/ort" 2>&1 && ok "$case: $run repair matches eager PyTorch" ||
			fail "$case: $run repair: $(tail -n 1 "$T/ort")"
		"$py" -c 'import onnx, sys
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
assert not m.functions, "functions left"
assert all(o.domain in ("", "ai.onnx") for o in m.opset_import), "an unused domain left"' "$out" 2>"$T/py" &&
			ok "$case: $run repair passes ONNX's checker, no function left" ||
			fail "$case: $run repair: $(tail -n 1 "$T/py")"
		expect 0 "$case: $run repair passes diagnosis" -- "$BIN" -q "$out"
	done
done
expect 0 "the dense export passes diagnosis" -- "$BIN" -q "$D/dense.onnx"
expect 0 "the dense export with --weights" -- "$BIN" -q "$D/dense.onnx" --weights "$E/model.safetensors" -o "$T/copy.onnx" &&
	{ cmp -s "$D/dense.onnx" "$T/copy.onnx" && ok "the dense export is copied as it came" ||
		fail "the dense export's copy differs from it"; }
finish
