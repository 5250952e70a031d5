#!/bin/sh
# The repair, end to end, on every corpus case (testdata/ and, when present,
# ../shared/corpus and ../shared/yolo-master): the repaired model matches the
# eager references in ONNX Runtime (within 1e-4, or for real exports with a
# ref.json within their own float32 noise, see compare.js --right), holds
# every expert (Conv count equal to the dense export's), keeps no
# NonZero/ScatterElements/If, passes --check, and repairing it again changes
# nothing, byte for byte. The input is untouched. The references are shown
# to tell experts apart: with the re-inserted weights rotated among experts
# (tests/rotate-experts.py), the repaired model must fail them.
. "$top_srcdir/tests/lib.sh"
if ! (cd "$top_srcdir" && "$node" -e "require.resolve('onnxruntime-node')") >/dev/null 2>&1; then
	[ "${MOE_ALLOW_NO_ORT:-}" = 1 ] && { echo "SKIP: onnxruntime-node missing"; exit 77; }
	echo "FAIL: onnxruntime-node missing: run npm install --ignore-scripts in $top_srcdir" >&2
	exit 1
fi
py=${PYTHON_ONNX:-/usr/bin/python3}
if ! "$py" -c 'import onnx' 2>/dev/null; then
	[ "${MOE_ALLOW_NO_ORT:-}" = 1 ] && { echo "SKIP: python3-onnx missing"; exit 77; }
	echo "FAIL: $py lacks the onnx module: apt-get install python3-onnx (tools/setup-debian does)" >&2
	exit 1
fi

n=0
for dir in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/corpus/*/ "$top_srcdir"/../shared/corpus/*/*/ \
	"$top_srcdir"/../shared/yolo-master/*/; do
	[ -f "$dir/broken.onnx" ] && [ -f "$dir/experts.yaml" ] || continue
	dir=${dir%/}
	name=$(basename "$dir")
	n=$((n + 1))
	before=$(sum "$dir/broken.onnx")
	out=$T/$name.onnx
	expect 0 "$name: repair" -- "$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$out" || continue
	[ "$(sum "$dir/broken.onnx")" = "$before" ] || fail "$name: input modified"
	if "$node" "$cmp" "$out" "$dir" --right >"$T/ort" 2>&1; then
		ok "$name: matches eager PyTorch ($(tail -n 1 "$T/ort" | sed 's/.*max abs diff \([^:]*\):.*/\1/'))"
	else
		fail "$name: ONNX Runtime: $(tail -n 1 "$T/ort")"
	fi
	# The references must tell experts apart: with the re-inserted weights
	# moved to the wrong experts, the verdict above must turn to wrong.
	if ! moved=$("$py" "$top_srcdir/tests/rotate-experts.py" "$out" "$dir/broken.onnx" "$T/rot.onnx"); then
		fail "$name: rotate-experts.py failed"
	elif [ "$moved" = 0 ]; then
		ok "$name: no expert re-inserted, none to misplace"
	elif "$node" "$cmp" "$T/rot.onnx" "$dir" --right >/dev/null 2>&1; then
		fail "$name: the references pass the repair with its $moved re-inserted tensors misplaced"
	else
		ok "$name: the references catch the $moved re-inserted tensors misplaced"
	fi
	for op in NonZero ScatterElements Scatter If; do
		[ "$(opcount "$out" $op)" = 0 ] || fail "$name: $op left in the repaired model"
	done
	want=
	if [ -f "$dir/ref.json" ]; then
		want=$("$node" -e "console.log(JSON.parse(require('fs').readFileSync(process.argv[1])).dense_conv)" "$dir/ref.json")
	elif [ -f "$dir/dense.onnx" ]; then
		want=$(opcount "$dir/dense.onnx" Conv)
	fi
	if [ -n "$want" ]; then
		got=$(opcount "$out" Conv)
		[ "$got" = "$want" ] && ok "$name: Conv $(opcount "$dir/broken.onnx" Conv) -> $got (dense: $want)" ||
			fail "$name: $got Conv nodes, the dense export has $want"
	fi
	expect 0 "$name: --check passes on the repaired model" -- \
		"$BIN" -q "$out" --check --experts "$dir/experts.yaml"
	expect 1 "$name: --check flags the broken model" -- \
		"$BIN" -q "$dir/broken.onnx" --check --experts "$dir/experts.yaml"
	expect 1 "$name: diagnosis without YAML flags the broken model" -- "$BIN" -q "$dir/broken.onnx"
	expect 0 "$name: diagnosis without YAML passes the repaired model" -- "$BIN" -q "$out"
	expect 0 "$name: repair of the repaired model" -- \
		"$BIN" -q "$out" --experts "$dir/experts.yaml" -o "$T/again.onnx" &&
		{ cmp -s "$out" "$T/again.onnx" && ok "$name: second repair is byte-identical" ||
			fail "$name: repairing a repaired model changed it"; }
	if [ -f "$dir/model.pt" ] && grep -q '^weights: model.safetensors$' "$dir/experts.yaml"; then
		sed "s|^weights: model.safetensors\$|weights: $dir/model.pt|" "$dir/experts.yaml" >"$T/pt.yaml"
		expect 0 "$name: repair with weights: model.pt" -- \
			"$BIN" -q "$dir/broken.onnx" --experts "$T/pt.yaml" -o "$T/pt.onnx" &&
			{ cmp -s "$out" "$T/pt.onnx" && ok "$name: model.pt gives the same model as safetensors" ||
				fail "$name: model.pt and model.safetensors repairs differ"; }
	fi
	if [ -f "$dir/dense.onnx" ]; then
		expect 0 "$name: repair of the dense export" -- \
			"$BIN" -q "$dir/dense.onnx" --experts "$dir/experts.yaml" -o "$T/dense.onnx" &&
			"$node" "$cmp" "$T/dense.onnx" "$dir" --right >/dev/null 2>&1 &&
			[ "$(opcount "$T/dense.onnx" If)" = 0 ] && ok "$name: dense export comes out If-free and right" ||
			fail "$name: dense export after repair: If left or wrong"
		# Nothing to repair (no shape guard): the same bytes come out.
		if [ "$(opcount "$dir/dense.onnx" If)" = 0 ]; then
			cmp -s "$dir/dense.onnx" "$T/dense.onnx" && ok "$name: dense export unchanged, byte for byte" ||
				fail "$name: a dense export that needs no repair was changed"
		fi
	fi
done
[ "$n" -gt 0 ] || fail "no corpus case found"
finish
