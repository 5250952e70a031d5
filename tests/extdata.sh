#!/bin/sh
# Writing external data: --external-data puts inline initializer data in a
# new file at 4 KiB-aligned offsets; the input's own external data stays
# referenced, never copied or touched; ONNX Runtime runs the result and
# matches the references. Models come from bench/gen.py (Debian's
# python3-onnx and python3-numpy) and testdata/example.
. "$top_srcdir/tests/lib.sh"

PY=${PYTHON:-/usr/bin/python3}
CMP="node $top_srcdir/tests/ort/compare.js"
if ! "$PY" -c "import onnx, numpy" 2>/dev/null; then
	echo "SKIP: $PY lacks onnx/numpy (apt-get install python3-onnx python3-numpy)"
	exit 77
fi
if ! (cd "$top_srcdir" && node -e "require.resolve('onnxruntime-node')") >/dev/null 2>&1; then
	echo "SKIP: onnxruntime-node missing: npm install --ignore-scripts in $top_srcdir"
	exit 77
fi

# locations MODEL: "location offset length" per external tensor.
locations() {
	"$PY" - "$1" <<'PYEOF'
import sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
for t in m.graph.initializer:
	if t.data_location == onnx.TensorProto.EXTERNAL:
		d = {e.key: e.value for e in t.external_data}
		print(d["location"], d.get("offset", "0"), d.get("length", "-"))
PYEOF
}

M=$T/m
"$PY" "$top_srcdir/bench/gen.py" "$M" --layers 3 --channels 16 --experts 4 --top-k 2 \
	--missing 2 --external --ref 2 || { fail "gen.py"; finish; }
before=$(sum "$M/broken.onnx.data")

expect 0 "repair with --external-data beside the input" -- \
	"$BIN" "$M/broken.onnx" --experts "$M/experts.yaml" -o "$M/out.onnx" --external-data new.data
locations "$M/out.onnx" >"$T/loc"
grep -q '^broken.onnx.data ' "$T/loc" || fail "untouched tensors should reference broken.onnx.data: $(cat "$T/loc")"
grep -q '^new.data ' "$T/loc" || fail "new weights should be in new.data: $(cat "$T/loc")"
awk '$1 == "new.data" && $2 % 4096 { bad = 1 } END { exit bad }' "$T/loc" ||
	fail "offsets in new.data not 4 KiB-aligned: $(grep new.data "$T/loc")"
n=$(grep -c '^new.data ' "$T/loc")
[ "$n" -eq 12 ] || fail "want the 2 missing experts x 3 layers x 2 convs x (W, b) = 12 tensors in new.data, got $n"
[ "$(sum "$M/broken.onnx.data")" = "$before" ] || fail "the input's external data changed"
extra=$(cd "$M" && ls | grep -v -e '^broken.onnx' -e '^model.safetensors$' -e '^experts.yaml$' \
	-e '^in_.\.npy$' -e '^out_.\.npy$' -e '^out.onnx$' -e '^new.data$')
[ -z "$extra" ] || fail "unexpected files beside the output (a copy of the data?): $extra"
size=$(wc -c <"$M/out.onnx")
[ "$size" -lt 65536 ] || fail "out.onnx holds $size bytes: weights were not moved out"
$CMP "$M/out.onnx" "$M" --max 1e-4 >"$T/ort" 2>&1 && ok "ONNX Runtime runs it, matches NumPy" ||
	fail "ONNX Runtime: $(cat "$T/ort")"
$CMP "$M/broken.onnx" "$M" --min 1e-2 >/dev/null 2>&1 || fail "the generated broken model should be wrong"

# Wide experts (256 hidden channels): a BatchNorm's statistics are read
# from the checkpoint in one call when they lie side by side (1 KiB or
# more each); the folds built from them match NumPy's.
W=$T/wide
"$PY" "$top_srcdir/bench/gen.py" "$W" --layers 2 --channels 16 --hidden 16 --experts 4 --top-k 2 \
	--missing 2 --ref 2 >/dev/null || fail "gen.py --hidden 16"
expect 0 "repair of wide experts" -- "$BIN" -q "$W/broken.onnx" --experts "$W/experts.yaml" -o "$W/out.onnx"
$CMP "$W/out.onnx" "$W" --max 1e-4 >"$T/ort" 2>&1 || fail "wide experts in ONNX Runtime: $(cat "$T/ort")"

# Default: small output, inline new weights, still referencing the input's data.
expect 0 "repair without --external-data" -- \
	"$BIN" "$M/broken.onnx" --experts "$M/experts.yaml" -o "$M/inl.onnx"
locations "$M/inl.onnx" | grep -q '^new.data ' && fail "without the option nothing should go to new.data"
$CMP "$M/inl.onnx" "$M" --max 1e-4 >"$T/ort" 2>&1 || fail "inline output in ONNX Runtime: $(cat "$T/ort")"

# Into another folder: the input's data file is not there, so the output
# gets its own (OUT.data): every external tensor copied, the new weights
# moved there too; it runs from that folder alone, the input untouched.
O=$T/elsewhere
mkdir "$O"
expect 0 "repair into another folder" -- "$BIN" "$M/broken.onnx" --experts "$M/experts.yaml" -o "$O/r.onnx"
grep -q "external tensors (.* MiB) copied into $O/r.onnx.data" "$T/err" || fail "another folder: the copy should be said: $(cat "$T/err")"
[ "$(ls "$O" | tr '\n' ' ')" = "r.onnx r.onnx.data " ] || fail "another folder: want r.onnx and r.onnx.data, got $(ls -A "$O")"
locations "$O/r.onnx" | awk '$1 != "r.onnx.data" || $2 % 4096 { bad = 1 } END { exit bad }' ||
	fail "another folder: every tensor in r.onnx.data at 4 KiB-aligned offsets: $(locations "$O/r.onnx")"
cp "$M"/in_*.npy "$M"/out_*.npy "$O"
$CMP "$O/r.onnx" "$O" --max 1e-4 >"$T/ort" 2>&1 && ok "ONNX Runtime runs the copy, matches NumPy" ||
	fail "another folder in ONNX Runtime: $(cat "$T/ort")"
[ "$(sum "$M/broken.onnx.data")" = "$before" ] || fail "the copy changed the input's external data"

# An inline model, every big initializer moved out.
E=$T/ex
mkdir "$E"
expect 0 "inline input, --external-data" -- "$BIN" "$top_srcdir/testdata/example/broken.onnx" \
	--experts "$top_srcdir/testdata/example/experts.yaml" -o "$E/ex.onnx" --external-data ex.bin
[ -s "$E/ex.bin" ] || fail "ex.bin not written"
$CMP "$E/ex.onnx" "$top_srcdir/testdata/example" --max 1e-4 >"$T/ort" 2>&1 ||
	fail "example with external data in ONNX Runtime: $(cat "$T/ort")"

# --no-sync skips the fsyncs only: the same bytes, the same data file.
mkdir "$E/ns"
expect 0 "--no-sync" -- "$BIN" -q "$top_srcdir/testdata/example/broken.onnx" \
	--experts "$top_srcdir/testdata/example/experts.yaml" -o "$E/ns/ex.onnx" --external-data ex.bin --no-sync
cmp -s "$E/ns/ex.onnx" "$E/ex.onnx" && cmp -s "$E/ns/ex.bin" "$E/ex.bin" || fail "--no-sync output differs"

# A present expert's external tensor is checked on a sample: its last
# value is in it (a short or shifted tensor differs there first). The last
# value of the first weight of layer model.0's highest present expert (the
# template, the lowest, is compared whole) is changed in a copy.
C=$T/tail
cp -r "$M" "$C"
rm -f "$C"/out.onnx "$C"/inl.onnx "$C"/new.data
"$PY" - "$C/broken.onnx" <<'PYEOF' || fail "could not corrupt the copy"
import re, struct, sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
ext = {t.name: {e.key: e.value for e in t.external_data} for t in m.graph.initializer
       if t.data_location == onnx.TensorProto.EXTERNAL}
convs = [(int(re.search(r"/model\.0/experts\.(\d+)/", n.name).group(1)), n.input[1])
         for n in m.graph.node if n.op_type == "Conv" and re.search(r"/model\.0/experts\.\d+/", n.name)]
eid = max(i for i, _ in convs)
w = next(x for i, x in convs if i == eid and x in ext)
d = ext[w]
with open(sys.argv[1] + ".data", "r+b") as f:
	f.seek(int(d.get("offset", "0")) + int(d["length"]) - 4)
	f.write(struct.pack("<f", 1000.0))
PYEOF
expect 2 "a present expert's external tensor wrong in its last value" -- \
	"$BIN" -q "$C/broken.onnx" --experts "$C/experts.yaml" -o "$C/o.onnx" &&
	one_line_err "differs from its checkpoint"
grep -q "differs from its checkpoint" "$T/err" || fail "want 'differs from its checkpoint': $(cat "$T/err")"
[ ! -e "$C/o.onnx" ] || fail "refused run left o.onnx"

# Refusals: one line, nothing written, the input's data untouched.
expect 2 "--external-data over the input's data" -- \
	"$BIN" -q "$M/broken.onnx" --experts "$M/experts.yaml" -o "$M/o2.onnx" --external-data broken.onnx.data &&
	one_line_err "data over the input's"
[ "$(sum "$M/broken.onnx.data")" = "$before" ] || fail "refused run changed the input's data"
[ ! -e "$M/o2.onnx" ] || fail "refused run left o2.onnx"
# ... refused before the repair: -v prints no layer's summary.
expect 2 "--external-data over the input's data, before the repair" -- \
	"$BIN" -v "$M/broken.onnx" --experts "$M/experts.yaml" -o "$M/o2.onnx" --external-data broken.onnx.data &&
	one_line_err "data over the input's, -v"
expect 2 "--external-data with '..'" -- \
	"$BIN" "$M/broken.onnx" --experts "$M/experts.yaml" -o "$M/o3.onnx" --external-data ../x.data &&
	one_line_err "'..'"
expect 2 "--external-data absolute" -- \
	"$BIN" "$M/broken.onnx" --experts "$M/experts.yaml" -o "$M/o3.onnx" --external-data "$T/x.data" &&
	one_line_err "absolute"
expect 2 "--external-data to standard output" -- \
	"$BIN" "$M/broken.onnx" --experts "$M/experts.yaml" -o - --external-data x.data &&
	one_line_err "stdout"
expect 2 "--external-data without --experts" -- "$BIN" "$M/broken.onnx" --external-data x.data &&
	one_line_err "no experts"
[ ! -e "$M/o3.onnx" ] && [ ! -e "$T/x.data" ] && [ ! -e "$M/x.data" ] || fail "refused runs left files"

# A save with a data file holds a lock on the data file's folder from
# the data's write to the model's (two runs writing one OUT keep their
# pairs whole): while another process holds it, the run waits.
if command -v flock >/dev/null; then
	mkdir "$T/lk"
	flock "$T/lk" sh -c ": >'$T/held'; sleep 1; echo released >>'$T/order'" &
	holder=$!
	while [ ! -e "$T/held" ]; do sleep 0.05; done
	E=$top_srcdir/testdata/example
	"$BIN" -q "$E/broken.onnx" --experts "$E/experts.yaml" -o "$T/lk/o.onnx" --external-data o.data &&
		echo saved >>"$T/order"
	wait "$holder"
	if [ "$(tr '\n' ' ' <"$T/order")" = "released saved " ]; then
		ok "--external-data waits for the data folder's lock"
	else
		fail "--external-data did not wait for the folder lock: $(cat "$T/order")"
	fi
else
	echo "note: no flock(1) here, the folder lock is not tested"
fi
finish
