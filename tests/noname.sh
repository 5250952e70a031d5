#!/bin/sh
# Name-free exports (PyTorch <= 1.12 names nodes Conv_12 and values by
# number; renaming tools do the same): a copy of every corpus case with
# every node and intermediate value renamed (tests/gen/strip_names.py)
# repairs with the named case's experts.yaml to a model that matches the
# eager references, holds the dense export's Conv count, keeps no
# NonZero/ScatterElements/If, names the re-inserted experts by their module
# path, and passes diagnosis; diagnosis flags the name-free broken copy.
. "$top_srcdir/tests/lib.sh"
py=/usr/bin/python3
needs_onnx_ort "to make name-free copies"

n=0
for dir in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/corpus/*/*/ "$top_srcdir"/../shared/yolo-master/*/; do
	[ -f "$dir/broken.onnx" ] && [ -f "$dir/experts.yaml" ] || continue
	dir=${dir%/}
	name=$(basename "$(dirname "$dir")")_$(basename "$dir")
	n=$((n + 1))
	"$py" "$top_srcdir/tests/gen/strip_names.py" "$dir/broken.onnx" "$T/$name.onnx" || { fail "$name: strip_names.py"; continue; }
	expect 1 "$name: diagnosis flags the name-free copy" -- "$BIN" -q "$T/$name.onnx"
	out=$T/$name.repaired.onnx
	expect 0 "$name: name-free repair" -- "$BIN" -q "$T/$name.onnx" --experts "$dir/experts.yaml" -o "$out" \
		--report "$T/$name.json" || continue
	"$node" "$cmp" "$out" "$dir" --right >"$T/ort" 2>&1 && ok "$name: matches eager PyTorch" ||
		fail "$name: ONNX Runtime: $(tail -n 1 "$T/ort")"
	for op in NonZero ScatterElements Scatter If; do
		[ "$(opcount "$out" $op)" = 0 ] || fail "$name: $op left in the repaired model"
	done
	want=
	[ -f "$dir/dense.onnx" ] && want=$(opcount "$dir/dense.onnx" Conv)
	[ -f "$dir/ref.json" ] && want=$("$node" -e "console.log(JSON.parse(require('fs').readFileSync(process.argv[1])).dense_conv)" "$dir/ref.json")
	[ -z "$want" ] || [ "$(opcount "$out" Conv)" = "$want" ] || fail "$name: $(opcount "$out" Conv) Conv nodes, the dense export has $want"
	expect 0 "$name: diagnosis passes the repaired copy" -- "$BIN" -q "$out"
	# Re-inserted experts carry the module path experts.yaml gives them.
	if "$py" - "$out" "$T/$name.json" <<'PY'; then
import json, sys
import onnx
rep = json.load(open(sys.argv[2]))
names = [n.name for n in onnx.load(sys.argv[1], load_external_data=False).graph.node]
for l in rep["models"][0]["layers"]:
    pre = "/" + l["scope"] + "/" if l["scope"] else "/"
    for i in l["inserted"]:
        if not any(n.startswith(pre) and ("%d/" % i) in n and "/dense/" not in n for n in names):
            sys.exit("layer %s: no node named for re-inserted expert %d" % (l["scope"], i))
PY
		ok "$name: re-inserted experts are named by their module path"
	else
		fail "$name: re-inserted experts are not named by their module path"
	fi
done
[ "$n" -gt 0 ] || fail "no corpus case found"
finish
