#!/bin/sh
# When detection or the weight mapping fails, the tool says what it found and
# which experts.yaml key would resolve it, in one line, exit 2, and writes
# nothing.
. "$top_srcdir/tests/lib.sh"
d=$top_srcdir/testdata/example
k2=$top_srcdir/testdata/detector_k2

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
case_ "fewer experts than dispatched" "$d/broken.onnx" "experts.yaml says experts: 3, but the router scores 4 experts" -- \
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
finish
