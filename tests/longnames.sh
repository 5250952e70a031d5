#!/bin/sh
# Names longer than the stack buffers the repair builds names and
# checkpoint keys in (256 bytes): node names of 300+ characters and a
# 281-character checkpoint key prefix (experts.yaml's `prefix:`) take the
# arena paths. The bundled example, so changed, repairs (dense and sparse)
# to a model that matches the eager references and names the re-inserted
# experts' tensors with the whole prefix.
. "$top_srcdir/tests/lib.sh"
node=${NODE:-node}
cmp="$top_srcdir/tests/ort/compare.js"
py=/usr/bin/python3
needs_onnx_ort "to rename the example"
dir=$top_srcdir/testdata/example
"$py" - "$dir" "$T" <<'PY' || fail "renaming the example"
import json, struct, sys
import onnx
src, out = sys.argv[1], sys.argv[2]
m = onnx.load(src + "/broken.onnx")
for n in m.graph.node:
    if n.name:
        n.name = "/" + "Q" * 300 + n.name
onnx.save(m, out + "/broken.onnx")
b = open(src + "/model.safetensors", "rb").read()
hl = struct.unpack("<Q", b[:8])[0]
pre = "P" * 280 + "."
h = {k if k == "__metadata__" else pre + k: v for k, v in json.loads(b[8:8 + hl]).items()}
hj = json.dumps(h).encode()
hj += b" " * (-len(hj) % 8)
open(out + "/model.safetensors", "wb").write(struct.pack("<Q", len(hj)) + hj + b[8 + hl:])
open(out + "/experts.yaml", "w").write(
    "weights: model.safetensors\nmoe:\n  - scope: model.0\n    experts: 4\n    top_k: 2\n    prefix: \"%s\"\n" % pre)
PY
for dispatch in dense sparse; do
	out=$T/$dispatch.onnx
	expect 0 "long names: $dispatch repair" -- "$BIN" -q "$T/broken.onnx" --experts "$T/experts.yaml" \
		--dispatch "$dispatch" -o "$out" || continue
	"$node" "$cmp" "$out" "$dir" --right >"$T/ort" 2>&1 && ok "long names, $dispatch: matches eager PyTorch" ||
		fail "long names, $dispatch: ONNX Runtime: $(tail -n 1 "$T/ort")"
	# Dense: one tensor set per re-inserted expert; sparse: stacked ones.
	"$py" - "$out" "$dispatch" <<'PY' && ok "long names, $dispatch: new tensors carry the whole prefix" ||
import sys
import onnx
names = [t.name for t in onnx.load(sys.argv[1]).graph.initializer]
pre = "P" * 280 + ".model.0.experts."
want = ["1.", "2."] if sys.argv[2] == "dense" else ["stacked."]
sys.exit(0 if all(any(n.startswith(pre + w) for n in names) for w in want) else 1)
PY
		fail "long names, $dispatch: no initializer of the re-inserted experts is named under the prefix"
done
finish
