#!/bin/sh
# Real exports that need no repair (tests/healthy/, see its README): every
# expert is in the graph and nothing is dispatched on data. With the
# experts.yaml a user writes, the repair says so and writes the same bytes,
# in either dispatch form, and with names stripped; --check and diagnosis
# pass them; and they match the eager references in ONNX Runtime, so
# "nothing to repair" is true.
. "$top_srcdir/tests/lib.sh"
py=/usr/bin/python3
ncase=0
for dir in "$top_srcdir"/tests/healthy/*/; do
	[ -f "$dir/model.onnx" ] || continue
	dir=${dir%/}
	name=$(basename "$dir")
	ncase=$((ncase + 1))
	"$node" "$cmp" "$dir/model.onnx" "$dir" --max 1e-4 >"$T/ort" 2>&1 &&
		ok "$name: the export matches eager PyTorch" || fail "$name: ONNX Runtime: $(tail -n 1 "$T/ort")"
	for form in dense sparse; do
		rm -f "$T/out.onnx"
		expect 0 "$name: repair ($form) with experts.yaml" -- \
			"$BIN" "$dir/model.onnx" --experts "$dir/experts.yaml" --dispatch $form -o "$T/out.onnx" || continue
		grep -q 'nothing to repair' "$T/err" || fail "$name: the repair does not say there is nothing to repair: $(cat "$T/err")"
		cmp -s "$dir/model.onnx" "$T/out.onnx" && ok "$name: written unchanged ($form)" ||
			fail "$name: a model that needs no repair was changed ($form)"
	done
	expect 0 "$name: --check with experts.yaml passes" -- "$BIN" -q "$dir/model.onnx" --check --experts "$dir/experts.yaml"
	# Name-free, the layer binds to its router by width and K alone.
	if "$py" "$top_srcdir/tests/gen/strip_names.py" "$dir/model.onnx" "$T/noname.onnx"; then
		expect 0 "$name: name-free copy, repair with experts.yaml" -- \
			"$BIN" -q "$T/noname.onnx" --experts "$dir/experts.yaml" -o "$T/out.onnx" &&
			{ cmp -s "$T/noname.onnx" "$T/out.onnx" && ok "$name: name-free copy written unchanged" ||
				fail "$name: a name-free model that needs no repair was changed"; }
	else
		fail "$name: strip_names.py needs $py with the onnx module (Debian python3-onnx)"
	fi
	expect 0 "$name: diagnosis without YAML passes" -- "$BIN" -q "$dir/model.onnx"
done
[ "$ncase" -ge 3 ] || fail "only $ncase healthy cases found"
finish
