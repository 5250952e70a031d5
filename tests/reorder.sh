#!/bin/sh
# Node order is not structure: every corpus case, its main graph's nodes
# put in another valid topological order (tests/gen/reorder.py; a seed per
# case, so the suite sees many orders), is diagnosed and repaired, dense
# and sparse, with its experts.yaml to a model that matches the eager
# references. Before experts were listed by their data flow, such an
# order made two experts built alike "differ in structure" (exit 2 for 10
# of the 38 cases with these seeds) when an expert's branches, or a
# Constant node moved above the dispatch, came in another order; and
# before an expert that runs on the whole input in the main graph
# (testdata/traced_masksum) was bounded by data flow, not by the
# dispatch's position, every reordered copy of that case was refused.
. "$top_srcdir/tests/lib.sh"
py=/usr/bin/python3
needs_onnx_ort "to reorder the corpus"

seed=0
reordered() {
	dir=$1 name=$2
	seed=$((seed + 1))
	"$py" "$top_srcdir/tests/gen/reorder.py" "$dir/broken.onnx" "$T/$name.onnx" "$seed" ||
		{ fail "$name: reorder.py"; return; }
	repair_copy "$dir" "$name" "$T/$name.onnx"
}
each_case reordered

# An expert alone in its layer is bounded by the graph's order, which sets
# it apart from a stem all experts would share, unless experts.yaml names
# its input (as testdata/traced_masksum_k1's does). Without that, a
# reordered copy is repaired right or refused with the line saying so,
# never repaired wrong; these seeds put the expert above its dispatch.
lone=$top_srcdir/testdata/traced_masksum_k1
grep -v -e '^ *input:' -e '^weights:' "$lone/experts.yaml" >"$T/noinput.yaml"
refused=0
for s in 1 2 3; do
	"$py" "$top_srcdir/tests/gen/reorder.py" "$lone/broken.onnx" "$T/lone.onnx" "$s" ||
		{ fail "lone expert: reorder.py"; continue; }
	rm -f "$T/lone.out.onnx"
	if "$BIN" -q "$T/lone.onnx" --experts "$T/noinput.yaml" --weights "$lone/model.safetensors" \
		-o "$T/lone.out.onnx" 2>"$T/err"; then
		"$node" "$cmp" "$T/lone.out.onnx" "$lone" --right >"$T/ort" 2>&1 &&
			ok "lone expert, seed $s, no input: repaired right" ||
			fail "lone expert, seed $s, no input: a wrong model: $(tail -n 1 "$T/ort")"
	elif grep -q 'set `input:` in experts.yaml' "$T/err"; then
		refused=$((refused + 1))
		ok "lone expert, seed $s, no input: refused, asking for input:"
	else
		fail "lone expert, seed $s, no input: $(cat "$T/err")"
	fi
done
[ "$refused" -gt 0 ] || fail "lone expert: no seed moved it above its dispatch; pick others"
finish
