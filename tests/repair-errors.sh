#!/bin/sh
# When detection or the weight mapping fails, the tool says what it found and
# which experts.yaml key would resolve it, in one line, exit 2, and writes
# nothing; --check with the weights stops the same way. Then experts.yaml variants of the YOLO-Master pattern cases that
# must repair right (post-TopK weight transform, fp16 checkpoint with
# BatchNorm eps 1e-3).
. "$top_srcdir/tests/lib.sh"
d=$top_srcdir/testdata/example
k2=$top_srcdir/testdata/detector_k2
ag=$top_srcdir/testdata/adaptive_gate
gf=$top_srcdir/testdata/gated_fusion
fp=$top_srcdir/testdata/fp16_eps

# case NAME MODEL EXPECTED-SUBSTRING -- YAML lines...
case_() {
	name=$1 model=$2 msg=$3
	shift 4
	printf '%s\n' "$@" >"$T/e.yaml"
	rm -f "$T/o.onnx"
	expect 2 "$name" -- "$BIN" -q "$model" --experts "$T/e.yaml" -o "$T/o.onnx" || return
	one_line_err "$name"
	grep -qF -- "$msg" "$T/err" || fail "$name: want '$msg' in: $(cat "$T/err")"
	[ ! -e "$T/o.onnx" ] || fail "$name: an output was written"
}

case_ "scope that names nothing" "$d/broken.onnx" "layer model.9: no MoE router of the model is under this scope" -- \
	"weights: $d/model.safetensors" "moe:" "  - scope: model.9" "    experts: 4" "    top_k: 2"
case_ "expert pattern that names nothing" "$d/broken.onnx" "matches no checkpoint tensor under 'model.0.blocks.0.'" -- \
	"weights: $d/model.safetensors" "moe:" "  - scope: model.0" "    experts: 4" "    top_k: 2" "    expert: blocks.{i}"
# also_ NAME SUBSTRING: the error of the last case_ holds SUBSTRING too.
also_() { grep -qF -- "$2" "$T/err" || fail "$1: want '$2' in: $(cat "$T/err")"; }
# --check with the weights runs the repair unsaved: the same mapping error
# stops it (2, not "needs repair"). Without weights it cannot, and says
# what is missing (1).
expect 2 "--check with weights that cannot repair" -- "$BIN" -q --check "$d/broken.onnx" --experts "$T/e.yaml" &&
	one_line_err "--check with weights that cannot repair" &&
	also_ "--check with weights that cannot repair" "needs repair, and the repair would stop: $T/e.yaml:3:5: layer model.0: tensor"
grep -v '^weights:' "$T/e.yaml" >"$T/nw.yaml"
expect 1 "--check without weights" -- "$BIN" --check "$d/broken.onnx" --experts "$T/nw.yaml" &&
	also_ "--check without weights" "missing 1,2"
# A scope written another way than named_modules() (ONNX's "/model.3", the
# layer index alone, a wrapper's "model.model.3") is answered with the module
# it spells; a guess is made only when exactly one module fits.
for sc in /model.3 /model.3/ 3 model.model.3; do
	case_ "scope spelt $sc" "$k2/broken.onnx" "layer $sc: no MoE router of the model is under this scope" -- \
		"weights: $k2/model.safetensors" "moe:" "  - {scope: model.1, experts: 4, top_k: 2}" \
		"  - {scope: '$sc', experts: 8, top_k: 2}" "  - {scope: model.5, experts: 16, top_k: 2}"
	also_ "scope spelt $sc" "did you mean \`scope: model.3\`?"
done
case_ "scope that fits no module" "$k2/broken.onnx" "layer router: no MoE router of the model is under this scope" -- \
	"weights: $k2/model.safetensors" "moe:" "  - {scope: router, experts: 8, top_k: 2}"
also_ "scope that fits no module" "; check \`scope:\`"
# A module exported alone has the empty scope: messages and the summary
# name it "(root)", as a diagnosis does, not "layer : ...".
bm=$top_srcdir/testdata/bare_module
case_ "root scope in an error" "$bm/broken.onnx" "e.yaml:3:5: layer (root): experts.yaml says experts: 5" -- \
	"weights: $bm/model.safetensors" "moe:" "  - {scope: '', experts: 5, top_k: 2}"
if expect 0 "root scope in the summary" -- "$BIN" "$bm/broken.onnx" --experts "$bm/experts.yaml" -o "$T/bm.onnx"; then
	grep -qF "broken.onnx: (root): 4 experts, top-2; present" "$T/err" && ok "the summary names the root scope (root)" ||
		fail "the summary should name the root scope (root): $(cat "$T/err")"
	"$BIN" -q "$bm/broken.onnx" --experts "$bm/experts.yaml" -o "$T/bm2.onnx" --report "$T/bm.json"
	grep -qF '"scope": ""' "$T/bm.json" && ok "the JSON report keeps experts.yaml's scope" ||
		fail "the JSON report should keep experts.yaml's empty scope: $(cat "$T/bm.json")"
fi
# A weights file that cannot be read: the line points at the YAML entry
# that names it (the file-wide one or the layer's own); given by --weights,
# there is no entry to point at.
head -c 1000 "$d/model.safetensors" >"$T/cut.safetensors"
case_ "file-wide weights that cannot be read" "$d/broken.onnx" "e.yaml:1:10: $T/cut.safetensors: " -- \
	"weights: $T/cut.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
case_ "a layer's weights that cannot be read" "$d/broken.onnx" "e.yaml:3:53: $T/cut.safetensors: " -- \
	"weights: $d/model.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2, weights: $T/cut.safetensors}"
expect 2 "--weights that cannot be read" -- "$BIN" -q "$d/broken.onnx" --experts "$d/experts.yaml" --weights "$T/cut.safetensors" -o "$T/o.onnx" &&
	{ grep -qF "broken.onnx: $T/cut.safetensors: " "$T/err" && ok "--weights: the error names the file, no YAML line" ||
		fail "--weights that cannot be read: $(cat "$T/err")"; }
# A new weight that is NaN or infinite is refused, not written: a
# checkpoint damaged only where missing experts are read (the present ones
# are verified), or a fold past float16's range.
py=/usr/bin/python3
# poison IN OUT KEY VALUE: a copy of safetensors IN whose KEY holds VALUE at element 1.
poison() {
	"$py" - "$@" <<'PYEOF'
import json, struct, sys
import numpy as np
src, dst, key, val = sys.argv[1:5]
b = open(src, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
s, e = json.loads(b[8:8 + n])[key]['data_offsets']
a = np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32).copy()
a[1] = float(val)
open(dst, 'wb').write(b[:8 + n + s] + a.tobytes() + b[8 + n + e:])
PYEOF
}
poison "$d/model.safetensors" "$T/nan.safetensors" model.0.experts.2.conv.0.weight nan
case_ "NaN in a missing expert's checkpoint tensor" "$d/broken.onnx" \
	"e.yaml:3:5: layer model.0: expert 2: 'model.0.experts.2.conv.0.weight' in $T/nan.safetensors rebuilds to NaN at element 1 of" -- \
	"weights: $T/nan.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
also_ "NaN in a missing expert's checkpoint tensor" "is the checkpoint damaged?"
# A BatchNorm statistic: an infinite running_var folds to a finite zero,
# which the scan of the new weight alone would let through (it did: exit 0).
poison "$d/model.safetensors" "$T/var.safetensors" model.0.experts.2.conv.1.running_var inf
case_ "infinite running_var of a missing expert" "$d/broken.onnx" \
	"e.yaml:3:5: layer model.0: expert 2: 'model.0.experts.2.conv.1.running_var' in $T/var.safetensors holds an infinite value at element 1 of 8; no trained BatchNorm has one" -- \
	"weights: $T/var.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
poison "$d/model.safetensors" "$T/neg.safetensors" model.0.experts.2.conv.1.running_var -1
case_ "negative running_var of a missing expert" "$d/broken.onnx" \
	"'model.0.experts.2.conv.1.running_var' in $T/neg.safetensors holds -1 at element 1 of 8, a negative variance" -- \
	"weights: $T/neg.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
# Damage where a present expert is read: the tensor matches nothing, and
# the error names the damaged key rather than only the keys tried, with
# experts.yaml and without (the keys the node names lead to).
poison "$d/model.safetensors" "$T/nan0.safetensors" model.0.experts.0.conv.0.weight nan
case_ "NaN in the template expert's checkpoint tensor" "$d/broken.onnx" \
	"matches no checkpoint tensor under 'model.0.experts.0.'" -- \
	"weights: $T/nan0.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
also_ "NaN in the template expert's checkpoint tensor" "; 'model.0.experts.0.conv.0.weight' in $T/nan0.safetensors holds NaN at element 1 of 64: is the checkpoint damaged?"
poison "$d/model.safetensors" "$T/inf3.safetensors" model.0.experts.3.conv.1.running_var inf
case_ "infinite BatchNorm variance of another present expert" "$d/broken.onnx" \
	"layer model.0: expert 3's tensor 'onnx::Conv_216' differs from its checkpoint rebuild" -- \
	"weights: $T/inf3.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
also_ "infinite BatchNorm variance of another present expert" "; 'model.0.experts.3.conv.1.running_var' in $T/inf3.safetensors holds an infinite value at element 1 of 8: is the checkpoint damaged?"
grep -q "checkpoint of this model" "$T/err" && fail "damaged checkpoint: the error still asks for another checkpoint: $(cat "$T/err")"
expect 2 "NaN in a present expert, --weights alone" -- "$BIN" -q "$d/broken.onnx" --weights "$T/nan0.safetensors" -o "$T/o.onnx" &&
	one_line_err "NaN in a present expert, --weights alone" &&
	also_ "NaN in a present expert, --weights alone" "the keys in $T/nan0.safetensors that its node names lead to do not rebuild its present experts (layer model.0: tensor 'onnx::Conv_210'" &&
	also_ "NaN in a present expert, --weights alone" "holds NaN at element 1 of 64: is the checkpoint damaged?)"
# The export's own tensor damaged: no checkpoint value rebuilds NaN.
# gpoison IN OUT TENSOR ELEMENT VALUE: a copy of model IN whose initializer holds VALUE there.
gpoison() {
	"$py" - "$@" <<'PYEOF'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
src, dst, name, i, val = sys.argv[1:6]
m = onnx.load(src)
for t in m.graph.initializer:
    if t.name == name:
        a = numpy_helper.to_array(t).copy()
        a.flat[int(i)] = float(val)
        t.CopyFrom(numpy_helper.from_array(a, t.name))
onnx.save(m, dst)
PYEOF
}
gpoison "$d/broken.onnx" "$T/gnan.onnx" onnx::Conv_210 1 nan
case_ "NaN in the export's own expert tensor" "$T/gnan.onnx" "matches no checkpoint tensor under 'model.0.experts.0.'" -- \
	"weights: $d/model.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
also_ "NaN in the export's own expert tensor" "; 'onnx::Conv_210' in the model holds NaN at element 1 of 64: is the export damaged?"
# Infinite in another present expert's tensor: the relative difference
# was inf / inf, a NaN no tolerance test refused, and the repair wrote
# the model (exit 0) as if expert 3 had been verified.
gpoison "$d/broken.onnx" "$T/ginf.onnx" onnx::Conv_216 3 inf
case_ "infinite value in another present expert's own tensor" "$T/ginf.onnx" \
	"layer model.0: expert 3's tensor 'onnx::Conv_216' differs from its checkpoint rebuild (relative difference inf); 'onnx::Conv_216' in the model holds an infinite value at element 3 of 64: is the export damaged?" -- \
	"weights: $d/model.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
# An export without its weights (export_params=False): every parameter a
# graph input with no initializer. Refused, saying so rather than asking
# for `input:`.
"$py" - "$d/broken.onnx" "$T/noparams.onnx" <<'PYEOF'
import sys
import onnx
from onnx import helper
m = onnx.load(sys.argv[1])
g = m.graph
for t in g.initializer:
    g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
del g.initializer[:]
onnx.save(m, sys.argv[2])
PYEOF
case_ "an export without its weights" "$T/noparams.onnx" \
	"from a graph input with no initializer: an export without its weights (export_params=False) has nothing to verify the checkpoint against" -- \
	"weights: $d/model.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
# Another model's checkpoint, without experts.yaml: the path the node names
# give, and the question, not the last guess made by value.
expect 2 "--weights of another model" -- "$BIN" -q "$d/broken.onnx" --weights "$k2/model.safetensors" -o "$T/o.onnx" &&
	one_line_err "--weights of another model" &&
	also_ "--weights of another model" "node names put expert 0 at 'model.0.experts.0', but $k2/model.safetensors holds no key under it, nor any that rebuilds it by value; is it the checkpoint of this model?"
# Large experts are built while the model is written: the refusal is the
# same and leaves nothing behind.
G=$T/gen
"$py" "$top_srcdir/bench/gen.py" "$G" --layers 1 --channels 64 --experts 4 --top-k 2 --missing 2 >/dev/null ||
	fail "bench/gen.py"
miss=$("$BIN" --check "$G/broken.onnx" 2>&1 | sed -n 's/.*missing \([0-9]*\).*/\1/p')
poison "$G/model.safetensors" "$T/gnan.safetensors" "model.0.experts.$miss.conv.0.weight" inf
mkdir "$T/gout"
expect 2 "infinite value in a large missing expert" -- "$BIN" -q "$G/broken.onnx" --weights "$T/gnan.safetensors" -o "$T/gout/o.onnx" &&
	one_line_err "infinite value in a large missing expert" &&
	also_ "infinite value in a large missing expert" "$G/broken.onnx: layer model.0: expert $miss: 'model.0.experts.$miss.conv.0.weight' in $T/gnan.safetensors rebuilds to an infinite value at element 1"
[ -z "$(ls -A "$T/gout")" ] || fail "infinite value in a large missing expert: left $(ls -A "$T/gout")"
# Built at save time, its error still points at the layer's entry.
case_ "infinite value in a large missing expert, experts.yaml" "$G/broken.onnx" \
	"$G/broken.onnx: $T/e.yaml:3:5: layer model.0: expert $miss: 'model.0.experts.$miss.conv.0.weight' in $T/gnan.safetensors rebuilds to an infinite value" -- \
	"weights: $T/gnan.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
# --check with the weights runs the repair unsaved, these builds included.
expect 2 "--check with that checkpoint" -- "$BIN" -q --check "$G/broken.onnx" --weights "$T/gnan.safetensors" &&
	one_line_err "--check with that checkpoint" &&
	also_ "--check with that checkpoint" "needs repair, and the repair would stop: layer model.0: expert $miss: 'model.0.experts.$miss.conv.0.weight'"
expect 2 "--check with that checkpoint, experts.yaml" -- "$BIN" -q --check "$G/broken.onnx" --experts "$T/e.yaml" &&
	also_ "--check with that checkpoint, experts.yaml" "needs repair, and the repair would stop: $T/e.yaml:3:5: layer model.0: expert $miss: 'model.0.experts.$miss.conv.0.weight'"
expect 1 "--check with a sound checkpoint" -- "$BIN" -q --check "$G/broken.onnx" --weights "$G/model.safetensors"
# A float16 export: a fold finite in float32 but past float16's range.
"$py" "$top_srcdir/tests/gen/to_fp16.py" "$d/broken.onnx" "$T/half.onnx" || fail "to_fp16.py"
poison "$d/model.safetensors" "$T/big.safetensors" model.0.experts.1.conv.0.weight 1e6
case_ "a fold past float16's range" "$T/half.onnx" \
	"layer model.0: expert 1: 'model.0.experts.1.conv.0.weight' in $T/big.safetensors rebuilds to" -- \
	"weights: $T/big.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
also_ "a fold past float16's range" "past float16's range"
# A router detection refuses under an entry's scope: the line points at it.
dx=$top_srcdir/tests/unrepairable/dilated_experts
case_ "detection refusal under an entry" "$dx/broken.onnx" "e.yaml:4:5: layer /model/model.1/router/TopK: expert 2 differs from expert 0" -- \
	"weights: $dx/module.pt" "moe:" "  - {scope: model.0, experts: 2, top_k: 1}" "  - {scope: model.1, experts: 4, top_k: 2}"
# A scope with nodes but no router: a module that runs every expert (top_k
# equal to experts, as YOLO-Master's C2fMoA) has nothing to repair, and the
# error says to drop it; otherwise the scope is likely wrong.
case_ "scope of a module without a router, all experts run" "$k2/broken.onnx" \
	"layer model.0: node '/model/model.0/model.0.0/Conv' lies under this scope, but no MoE router does" -- \
	"weights: $k2/model.safetensors" "moe:" "  - {scope: model.0, experts: 3, top_k: 3}"
also_ "scope of a module without a router, all experts run" "has nothing to repair; remove the layer from experts.yaml"
case_ "scope of a module without a router" "$k2/broken.onnx" "no MoE router does (3 found elsewhere" -- \
	"weights: $k2/model.safetensors" "moe:" "  - {scope: model.0, experts: 4, top_k: 2}"
also_ "scope of a module without a router" "; check \`scope:\`"

# A top_k or experts count that disagrees with the graph is refused, naming
# both values, before any weight is looked up, and where the entry is.
case_ "top_k that disagrees with the router" "$d/broken.onnx" "e.yaml:3:5: layer model.0: experts.yaml says top_k: 1, but the router's TopK" -- \
	"weights: $d/model.safetensors" "moe:" "  - scope: model.0" "    experts: 4" "    top_k: 1"
also_ "top_k that disagrees with the router" "takes 2; fix top_k"
# The position is the failing entry's, not the first one's; an error of the
# weight mapping carries it too.
case_ "experts count of a later layer" "$k2/broken.onnx" "e.yaml:4:5: layer model.3: experts.yaml says experts: 9, but the router scores 8 experts" -- \
	"weights: $k2/model.safetensors" "moe:" "  - {scope: model.1, experts: 4, top_k: 2}" \
	"  - {scope: model.3, experts: 9, top_k: 2}" "  - {scope: model.5, experts: 16, top_k: 2}"
case_ "expert pattern of a later layer" "$k2/broken.onnx" "e.yaml:4:5: layer model.3: tensor" -- \
	"weights: $k2/model.safetensors" "moe:" "  - {scope: model.1, experts: 4, top_k: 2}" \
	"  - {scope: model.3, experts: 8, top_k: 2, expert: 'blocks.{i}'}" "  - {scope: model.5, experts: 16, top_k: 2}"
case_ "top_k that disagrees with a router whose weights are transformed after TopK" "$ag/broken.onnx" \
	"experts.yaml says top_k: 2, but the router's TopK" -- \
	"weights: $ag/model.safetensors" "moe:" "  - {scope: model.1, experts: 6, top_k: 2}"
also_ "top_k that disagrees with a router whose weights are transformed after TopK" "takes 3; fix top_k"
case_ "more experts than the router scores (conv router)" "$d/broken.onnx" \
	"experts.yaml says experts: 6, but the router scores 4 experts" -- \
	"weights: $d/model.safetensors" "moe:" "  - scope: model.0" "    experts: 6" "    top_k: 2"
case_ "more experts than the router scores (Linear router)" "$gf/broken.onnx" \
	"experts.yaml says experts: 8, but the router scores 6 experts" -- \
	"weights: $gf/model.safetensors" "moe:" "  - {scope: model.1, experts: 8, top_k: 2}"
case_ "fewer experts than dispatched through a transformed mask" "$ag/broken.onnx" \
	"compares the router indices with expert id 3, but experts: 3" -- \
	"weights: $ag/model.safetensors" "moe:" "  - {scope: model.1, experts: 3, top_k: 3}"
case_ "fp16 checkpoint: an ema entry that is None" "$fp/broken.onnx" "checkpoint entry 'ema' is None" -- \
	"weights: $fp/best.pt" "checkpoint_key: ema" "moe:" "  - {scope: model.1, experts: 4, top_k: 2}"
case_ "fewer experts than dispatched" "$d/broken.onnx" "compares the router indices with expert id 3, but experts: 3" -- \
	"weights: $d/model.safetensors" "moe:" "  - scope: model.0" "    experts: 3" "    top_k: 2"
case_ "checkpoint of another model" "$d/broken.onnx" "matches no checkpoint tensor under 'model.0.experts.0.'" -- \
	"weights: $top_srcdir/testdata/single_gn/model.safetensors" "moe:" "  - scope: model.0" "    experts: 4" "    top_k: 2"
case_ "key prefix that matches nothing" "$k2/broken.onnx" "(keys there: none)" -- \
	"weights: $k2/model.safetensors" "moe:" "  - scope: model.1" "    experts: 4" "    top_k: 2" "    prefix: ema." \
	"  - {scope: model.3, experts: 8, top_k: 2, prefix: ema.}" "  - {scope: model.5, experts: 16, top_k: 2, prefix: ema.}"
case_ "router override that is not a value" "$d/broken.onnx" "router.indices '/nope' is not a value of the model" -- \
	"weights: $d/model.safetensors" "moe:" "  - scope: model.0" "    experts: 4" "    top_k: 2" "    router:" "      indices: /nope"
case_ "output override that is not a value" "$d/broken.onnx" "output '/nope' is not a value of the model" -- \
	"weights: $d/model.safetensors" "moe:" "  - scope: model.0" "    experts: 4" "    top_k: 2" "    output: /nope"

# A value experts.yaml names must be what detection finds: before, a wrong
# one was wired in as given and the model written wrong (exit 0, 0.2 to 4.7
# off eager PyTorch): the raw TopK values as the weights, a partial sum as
# the output, another same-shaped tensor as the input.
case_ "router.weights that the dispatch does not weight by" "$d/broken.onnx" \
	"experts.yaml gives router.weights '/model/model.0/router/TopK_output_0', but the dispatch weights the experts' outputs by '/model/model.0/router/Div_output_0'" -- \
	"weights: $d/model.safetensors" "moe:" "  - scope: model.0" "    experts: 4" "    top_k: 2" "    router:" \
	"      weights: /model/model.0/router/TopK_output_0"
case_ "output that is a partial sum" "$d/broken.onnx" \
	"experts.yaml gives output '/model/model.0/Add_2_output_0', which is not the routed sum of the experts' outputs (that is /model/model.0/Add_3_output_0)" -- \
	"weights: $d/model.safetensors" "moe:" "  - scope: model.0" "    experts: 4" "    top_k: 2" "    output: /model/model.0/Add_2_output_0"
case_ "input that the experts do not read" "$d/broken.onnx" \
	"experts.yaml gives input '/model/model.0/shared_expert/shared_expert.0/Conv_output_0', but the experts read 'images'" -- \
	"weights: $d/model.safetensors" "moe:" "  - scope: model.0" "    experts: 4" "    top_k: 2" \
	"    input: /model/model.0/shared_expert/shared_expert.0/Conv_output_0"
# A lone expert's input named inside the expert (its first conv's output):
# detection stops there, and the mapping finds that conv's weight to be the
# template's own; before, every clone read the template's conv (exit 0).
lo=$top_srcdir/testdata/traced_masksum_k1
case_ "input inside a lone expert" "$lo/broken.onnx" \
	"node '/experts.1/conv/conv.0/Conv', which computes the experts' input '/experts.1/conv/conv.0/Conv_output_0', reads 'onnx::Conv_131' = 'experts.1.conv.0.weight' folded with BatchNorm 'experts.1.conv.1' (eps 1e-05), a tensor of expert 1 itself" -- \
	"weights: $lo/model.safetensors" "moe:" "  - scope: ''" "    experts: 6" "    top_k: 1" "    input: /experts.1/conv/conv.0/Conv_output_0"

# The variants that must repair right.
node=${NODE:-node}
cmp="$top_srcdir/tests/ort/compare.js"
if (cd "$top_srcdir" && "$node" -e "require.resolve('onnxruntime-node')") >/dev/null 2>&1; then
	opcount() { "$node" -e "const c=JSON.parse(process.argv[1]);console.log(c[process.argv[2]]||0)" \
		"$("$node" "$top_srcdir/tests/ort/ops.js" "$1")" "$2"; }
	# Post-TopK transform: the repaired dispatch must weight by the masked,
	# renormalised weights (the generator proved the raw top-k off by > 1e-2).
	if expect 0 "adaptive_gate: repair" -- "$BIN" -q "$ag/broken.onnx" --experts "$ag/experts.yaml" -o "$T/ag.onnx"; then
		"$node" "$cmp" "$T/ag.onnx" "$ag" --right >"$T/ort" 2>&1 &&
			ok "adaptive_gate: the transformed weights are used ($(tail -n 1 "$T/ort" | sed 's/.*max abs diff \([^:]*\):.*/\1/'))" ||
			fail "adaptive_gate: ONNX Runtime: $(tail -n 1 "$T/ort")"
		[ "$(opcount "$T/ag.onnx" LessOrEqual)" -ge 1 ] && ok "adaptive_gate: the slot mask stays in the graph" ||
			fail "adaptive_gate: the slot mask (LessOrEqual) is gone from the repaired model"
	fi
	# The same three named rightly change nothing.
	printf '%s\n' "weights: $d/model.safetensors" "moe:" "  - scope: model.0" "    experts: 4" "    top_k: 2" "    input: images" \
		"    output: /model/model.0/Add_3_output_0" "    router:" "      weights: /model/model.0/router/Div_output_0" >"$T/named.yaml"
	if expect 0 "example: repair with input, output and router.weights named" -- "$BIN" -q "$d/broken.onnx" --experts "$T/named.yaml" -o "$T/named.onnx" &&
		expect 0 "example: repair" -- "$BIN" -q "$d/broken.onnx" --experts "$d/experts.yaml" -o "$T/plain.onnx"; then
		cmp -s "$T/named.onnx" "$T/plain.onnx" && ok "example: the named values give the same bytes" ||
			fail "example: naming the detected values repairs differently"
	fi
	# fp16 best.pt, eps 1e-3: the default entry ('ema' is None, so 'model')
	# and the entry named explicitly give the same, right model.
	printf '%s\n' "weights: $fp/best.pt" "checkpoint_key: model" "moe:" "  - {scope: model.1, experts: 4, top_k: 2}" >"$T/fp.yaml"
	if expect 0 "fp16_eps: repair from best.pt" -- "$BIN" -q "$fp/broken.onnx" --experts "$fp/experts.yaml" -o "$T/fp.onnx" &&
		expect 0 "fp16_eps: repair with checkpoint_key: model" -- "$BIN" -q "$fp/broken.onnx" --experts "$T/fp.yaml" -o "$T/fp2.onnx"; then
		"$node" "$cmp" "$T/fp.onnx" "$fp" --right >"$T/ort" 2>&1 &&
			ok "fp16_eps: folded with eps 1e-3 from fp16 statistics ($(tail -n 1 "$T/ort" | sed 's/.*max abs diff \([^:]*\):.*/\1/'))" ||
			fail "fp16_eps: ONNX Runtime: $(tail -n 1 "$T/ort")"
		cmp -s "$T/fp.onnx" "$T/fp2.onnx" && ok "fp16_eps: checkpoint_key: model gives the same bytes" ||
			fail "fp16_eps: checkpoint_key: model repairs differently from the default entry"
	fi
elif [ "${MOE_ALLOW_NO_ORT:-}" = 1 ]; then
	echo "skip: the repair variants (onnxruntime-node missing)"
else
	fail "onnxruntime-node missing: run npm install --ignore-scripts in $top_srcdir"
fi
finish
