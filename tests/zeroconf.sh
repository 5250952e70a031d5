#!/bin/sh
# Zero-config use: every corpus case repaired with --weights alone (the
# checkpoint its experts.yaml names) gives the same bytes as the repair
# with its experts.yaml; the experts.yaml it writes (--emit-experts) reads
# back and repairs to the same bytes again; with --experts, --weights
# replaces the YAML's weights.
. "$top_srcdir/tests/lib.sh"
n=0
for dir in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/corpus/*/*/ "$top_srcdir"/../shared/yolo-master/*/; do
	[ -f "$dir/broken.onnx" ] && [ -f "$dir/experts.yaml" ] || continue
	dir=${dir%/}
	name=$(basename "$(dirname "$dir")")_$(basename "$dir")
	w=$(sed -n 's/^weights: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$dir/experts.yaml")
	[ -n "$w" ] || { fail "$name: no top-level weights in experts.yaml"; continue; }
	n=$((n + 1))
	expect 0 "$name: repair with experts.yaml" -- "$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/yaml.onnx" || continue
	mkdir -p "$T/$name"
	expect 0 "$name: repair with --weights alone" -- "$BIN" -q "$dir/broken.onnx" --weights "$dir/$w" \
		-o "$T/zero.onnx" --emit-experts "$T/$name/experts.yaml" || continue
	cmp -s "$T/yaml.onnx" "$T/zero.onnx" && ok "$name: same bytes as with experts.yaml" ||
		fail "$name: --weights alone repairs differently from experts.yaml"
	expect 0 "$name: repair with the emitted experts.yaml" -- "$BIN" -q "$dir/broken.onnx" \
		--experts "$T/$name/experts.yaml" -o "$T/emitted.onnx" &&
		{ cmp -s "$T/yaml.onnx" "$T/emitted.onnx" && ok "$name: emitted experts.yaml repairs to the same bytes" ||
			fail "$name: the emitted experts.yaml repairs differently"; }
done
[ "$n" -gt 0 ] || fail "no corpus case found"

# An experts.yaml that leaves out `expert:` (the experts are not under
# experts.{i}) repairs as the one that sets it: the pattern node names show
# under the layer's scope is taken when the checkpoint has nothing under
# the default, and verified by value like any.
m=0
for dir in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/yolo-master/*/; do
	dir=${dir%/}
	grep -q 'expert:' "$dir/experts.yaml" 2>/dev/null || continue
	name=$(basename "$dir")
	m=$((m + 1))
	sed -e 's|^weights: *"\{0,1\}\([^"]*\)"\{0,1\} *$|weights: "'"$dir"'/\1"|' -e 's/, *expert: *"[^"]*"//' \
		-e '/^ *expert: /d' "$dir/experts.yaml" >"$T/noexpert.yaml"
	! grep -q 'expert:' "$T/noexpert.yaml" || { fail "$name: expert: left in $(cat "$T/noexpert.yaml")"; continue; }
	"$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/with.onnx" || { fail "$name: repair with expert:"; continue; }
	expect 0 "$name: repair without expert:" -- "$BIN" -q "$dir/broken.onnx" --experts "$T/noexpert.yaml" \
		-o "$T/without.onnx" --emit-experts "$T/emitted.yaml" &&
		{ cmp -s "$T/with.onnx" "$T/without.onnx" && ok "$name: same bytes without expert:" ||
			fail "$name: repairs differently without expert:"; }
	grep -q 'expert: ' "$T/emitted.yaml" && ok "$name: the emitted experts.yaml names the pattern taken" ||
		fail "$name: the emitted experts.yaml has no expert: $(cat "$T/emitted.yaml")"
done
[ "$m" -ge 3 ] || fail "only $m cases set expert:"

# An experts.yaml emitted beside its checkpoint names it by its bare name
# (the relative path once read one byte past the folder's name, and climbed
# out of the folder when that byte was not a NUL).
d=$top_srcdir/testdata/example
for sub in w LowRankHybridAdaptiveGateMoE_16; do
	mkdir -p "$T/$sub" && cp "$d/model.safetensors" "$T/$sub/" || fail "copy the checkpoint"
	expect 0 "emit beside the checkpoint ($sub)" -- "$BIN" -q "$d/broken.onnx" --weights "$T/$sub/model.safetensors" \
		-o "$T/x.onnx" --emit-experts "$T/$sub/experts.yaml" &&
		{ grep -qx 'weights: "model.safetensors"' "$T/$sub/experts.yaml" && ok "$sub: weights named from beside it" ||
			fail "$sub: emitted $(grep '^weights' "$T/$sub/experts.yaml"), want weights: \"model.safetensors\""; }
	(cd "$T" && "$BIN" -q "$d/broken.onnx" --weights "$sub/model.safetensors" -o x.onnx --emit-experts "$sub/e.yaml") &&
		grep -qx 'weights: "model.safetensors"' "$T/$sub/e.yaml" && ok "$sub: the same from relative paths" ||
		fail "$sub: relative paths: emitted $(grep '^weights' "$T/$sub/e.yaml" 2>/dev/null)"
done

# --weights replaces the YAML's weights: a YAML without any repairs with it.
d=$top_srcdir/testdata/example
printf 'moe:\n  - {scope: model.0, experts: 4, top_k: 2}\n' >"$T/now.yaml"
expect 2 "no weights anywhere: refused" -- "$BIN" -q "$d/broken.onnx" --experts "$T/now.yaml" -o "$T/x.onnx" &&
	one_line_err "no weights" && grep -q 'give --weights' "$T/err" || fail "no weights: message does not name --weights: $(cat "$T/err")"
expect 0 "--weights completes a YAML without weights" -- "$BIN" -q "$d/broken.onnx" --experts "$T/now.yaml" \
	--weights "$d/model.safetensors" -o "$T/x.onnx" &&
	{ "$BIN" -q "$d/broken.onnx" --experts "$d/experts.yaml" -o "$T/y.onnx" && cmp -s "$T/x.onnx" "$T/y.onnx" &&
		ok "same bytes as the YAML with weights" || fail "--weights with a YAML repairs differently"; }
finish
