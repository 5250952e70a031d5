#!/bin/sh
# Real exports whose dispatch the repair cannot express (tests/unrepairable/,
# see its README): never a written model (exit 2 with the reason in
# refuse.txt, whether experts.yaml, --weights alone, a name-free copy or
# one with its nodes in another valid order is given), and diagnosis says
# they need repair (exit 1), never that they are healthy.
. "$top_srcdir/tests/lib.sh"
py=/usr/bin/python3
ncase=0
for dir in "$top_srcdir"/tests/unrepairable/*/; do
	[ -f "$dir/broken.onnx" ] || continue
	dir=${dir%/}
	name=$(basename "$dir")
	msg=$(cat "$dir/refuse.txt")
	ncase=$((ncase + 1))
	expect 2 "$name: repair refused" -- "$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/out.onnx" &&
		one_line_err "$name" && { grep -qF -- "$msg" "$T/err" || fail "$name: want '$msg' in: $(cat "$T/err")"; }
	[ ! -e "$T/out.onnx" ] || fail "$name: an output was written"
	expect 2 "$name: repair from --weights alone refused" -- "$BIN" -q "$dir/broken.onnx" --weights "$dir/module.pt" -o "$T/out.onnx"
	[ ! -e "$T/out.onnx" ] || fail "$name: an output was written from --weights alone"
	expect 1 "$name: diagnosis says it needs repair" -- "$BIN" -q "$dir/broken.onnx"
	if "$py" -c 'import onnx' 2>/dev/null; then
		"$py" "$top_srcdir/tests/gen/strip_names.py" "$dir/broken.onnx" "$T/noname.onnx" || { fail "$name: strip_names.py"; continue; }
		expect 2 "$name: name-free copy refused" -- "$BIN" -q "$T/noname.onnx" --experts "$dir/experts.yaml" -o "$T/out.onnx"
		[ ! -e "$T/out.onnx" ] || fail "$name: an output was written from the name-free copy"
		expect 1 "$name: diagnosis of the name-free copy says it needs repair" -- "$BIN" -q "$T/noname.onnx"
		# Node order is no evidence either: a sort that put the experts'
		# input computation above the router once hid
		# diversifiedexpertmoe's per-expert stem (exit 0, a wrong model).
		for seed in 1 2 3; do
			"$py" "$top_srcdir/tests/gen/reorder.py" "$dir/broken.onnx" "$T/reordered.onnx" $seed ||
				{ fail "$name: reorder.py"; continue; }
			expect 2 "$name: reordered copy $seed refused" -- "$BIN" -q "$T/reordered.onnx" --experts "$dir/experts.yaml" -o "$T/out.onnx" &&
				{ grep -qF -- "$msg" "$T/err" || fail "$name: reordered copy $seed: want '$msg' in: $(cat "$T/err")"; }
			[ ! -e "$T/out.onnx" ] || fail "$name: an output was written from reordered copy $seed"
		done
	else
		fail "$py with the onnx module (Debian python3-onnx) is needed for the name-free copies"
	fi
done
[ "$ncase" -ge 3 ] || fail "only $ncase unrepairable cases found"
finish
