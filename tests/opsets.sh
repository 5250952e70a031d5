#!/bin/sh
# Newer opsets: YOLO-Master's exporter asks torch for its newest opset
# minus one, 19 to 22 with torch >= 2.4 (IR 9 and 10), past the IR 8 proto
# this tool is built from. Every corpus case at opset 13 or later is taken
# up to one of 19..23 in turn (tests/gen/opset_up.py: the declared opset
# and IR version, and the two op forms that changed on the way), then
# diagnosed, repaired dense and sparse from its experts.yaml, checked
# against the eager references, and the repair must keep the new opset.
# The copy is checked too: the dense export's copy must still match the
# references. Cases below opset 13 are listed, not repaired: their
# Squeeze/Unsqueeze/ReduceSum/Split axes are attributes, and opset 13
# changed Softmax's meaning, which a declared version cannot carry.
. "$top_srcdir/tests/lib.sh"
py=/usr/bin/python3
needs_onnx_ort "to make copies at newer opsets"

# The IR version each opset came with, as opset_up.py declares it.
python_ir() { case $1 in 19 | 20) echo 9 ;; 21 | 22) echo 10 ;; *) echo 11 ;; esac; }

# A repair keeps the opset and IR version of the copy (opset $o).
keeps_opset() {
	got=$("$py" -c 'import onnx, sys
m = onnx.load(sys.argv[1])
print(m.ir_version, *(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")))' "$1")
	[ "$got" = "$(python_ir $o) $o" ] || fail "$name@$o: $2 repair declares IR and opset '$got', want '$(python_ir $o) $o'"
}

i=0
newer() {
	dir=$1 name=$2
	v=$("$py" -c 'import onnx, sys
print(next(o.version for o in onnx.load(sys.argv[1], load_external_data=False).opset_import if o.domain in ("", "ai.onnx")))' "$dir/broken.onnx")
	if [ "$v" -lt 13 ]; then
		echo "# $name: opset $v, below 13: not taken up"
		return
	fi
	o=$((19 + i % 5))
	i=$((i + 1))
	"$py" "$top_srcdir/tests/gen/opset_up.py" "$dir/broken.onnx" "$T/$name.onnx" $o ||
		{ fail "$name: opset_up.py to $o"; return; }
	if [ -f "$dir/dense.onnx" ]; then
		"$py" "$top_srcdir/tests/gen/opset_up.py" "$dir/dense.onnx" "$T/dense.onnx" $o &&
			"$node" "$cmp" "$T/dense.onnx" "$dir" --right >"$T/ort" 2>&1 ||
			{ fail "$name: the dense export at opset $o does not match eager PyTorch: $(tail -n 1 "$T/ort")"; return; }
	fi
	repair_copy "$dir" "$name@$o" "$T/$name.onnx" keeps_opset
}
each_case newer
[ "$i" -ge 10 ] || fail "only $i cases at opset 13 or later"

# Past the ceiling: refused with its line, nothing written.
"$py" "$top_srcdir/tests/gen/opset_up.py" "$top_srcdir/testdata/example/broken.onnx" "$T/o23.onnx" 23 &&
	"$py" -c 'import onnx, sys
m = onnx.load(sys.argv[1]); m.opset_import[0].version = 24; onnx.save(m, sys.argv[2])' "$T/o23.onnx" "$T/o24.onnx" || fail "opset 24 copy"
expect 2 "opset 24 is refused" -- "$BIN" -q "$T/o24.onnx" --experts "$top_srcdir/testdata/example/experts.yaml" -o "$T/o24.out.onnx"
one_line_err "opset 24"
grep -q 'opset 24 is newer than opset 23' "$T/err" || fail "opset 24: $(cat "$T/err")"
[ ! -e "$T/o24.out.onnx" ] || fail "opset 24: a model was written"
finish
