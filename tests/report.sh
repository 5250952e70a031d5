#!/bin/sh
# The JSON report: --report FILE.json (one document, one entry per input)
# and --report - (JSON Lines on standard output, one record per input as
# each finishes). Every report written here is validated against
# schema/report.schema.json by tests/report-check.py (Debian's
# python3-jsonschema; SKIP without it), which must first refuse a report
# with a wrong field.
. "$top_srcdir/tests/lib.sh"
py=${PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import jsonschema' 2>/dev/null; then
	echo "SKIP: validating reports needs $py with jsonschema (apt-get install python3-jsonschema; tools/setup-debian does)"
	exit 77
fi
S=$top_srcdir/schema/report.schema.json
EX=$top_srcdir/testdata/example
[ -f "$EX/broken.onnx" ] || { echo "FAIL: no testdata/example" >&2; exit 1; }

# valid WHAT [--lines] FILE [EXPR]: FILE validates, and EXPR over d holds.
valid() {
	what=$1
	shift
	if "$py" "$top_srcdir/tests/report-check.py" "$S" "$@" >"$T/chk" 2>&1; then
		ok "$what"
	else
		fail "$what: $(cat "$T/chk")"
	fi
}
# invalid WHAT [--lines] FILE: the validator must refuse FILE.
invalid() {
	what=$1
	shift
	if "$py" "$top_srcdir/tests/report-check.py" "$S" "$@" >"$T/chk" 2>&1; then
		fail "the validator accepts $what"
	else
		ok "the validator refuses $what"
	fi
}

mkmodel "$T/m.onnx" 64
: >"$T/empty.onnx"
mkdir "$T/d1"

# A document: two inputs, one good (a name that needs escaping), one bad.
weird="$T/we\"ird\\na	me.onnx"
cp "$T/m.onnx" "$weird"
expect 2 "--report with one good and one bad input" -- \
	"$BIN" --passthrough --report "$T/r.json" -o "$T/d1" "$weird" "$T/empty.onnx"
valid "report document: escaped name, the error recorded, exit_status 2" "$T/r.json" \
	'd["exit_status"] == 2 and d["mode"] == "repair" and len(d["models"]) == 2 and d["models"][0]["input"].endswith("\"ird\\na\tme.onnx") and d["models"][0]["status"] == "written" and d["models"][1]["status"] == "error" and "empty file" in d["models"][1]["error"]'
ls -a "$T" | grep -q '^\.r\.json\.' && fail "report temp left behind"

# External data copied into another folder is in the entry, and only there.
mkdir "$T/e" "$T/e2"
head -c 300 /dev/urandom >"$T/e/w.bin"
mkmodel "$T/e/x.onnx" 100 w.bin 200 100
expect 0 "--report, external data copied into another folder" -- \
	"$BIN" --passthrough --report "$T/ext.json" -o "$T/e2/x.onnx" "$T/e/x.onnx"
valid "report: external_data_copied gives tensors, bytes and the file" "$T/ext.json" \
	'(lambda c: c["tensors"] == 1 and c["bytes"] == 100 and c["into"] == "'"$T/e2/x.onnx.data"'")(d["models"][0]["external_data_copied"])'
grep -q "external tensors (0.0 MiB) copied into $T/e2/x.onnx.data" "$T/err" ||
	fail "the copy line on standard error: $(cat "$T/err")"
"$BIN" -q --passthrough --report - -o "$T/e/y.onnx" "$T/e/x.onnx" >"$T/kept.jsonl" 2>"$T/err" ||
	fail "--report -, external data kept beside the input: $(cat "$T/err")"
valid "report: no external_data_copied when nothing was copied" --lines "$T/kept.jsonl" \
	'len(d) == 1 and "external_data_copied" not in d[0] and d[0]["status"] == "written"'
sed 's/"status": "written"/"status": "damaged"/; s/"output": "[^"]*"/"output": null/; s/"damaged": false/"damaged": true/' \
	"$T/ext.json" >"$T/bad5.json"
invalid "a copy reported for a check's entry" "$T/bad5.json"
sed 's/"external_data_copied": {[^}]*}, //' "$T/bad5.json" >"$T/nocopy.json"
valid "the same entry without the copy" "$T/nocopy.json" '"external_data_copied" not in d["models"][0]'
sed 's/"tensors": 1/"tensors": 0/' "$T/ext.json" >"$T/bad6.json"
invalid "a copy of no tensors" "$T/bad6.json"

# The validator is live: wrong fields are refused.
sed 's/"status": "written"/"status": "fine"/' "$T/r.json" >"$T/bad1.json"
invalid "an unknown status" "$T/bad1.json"
sed 's/"exit_status": 2/"exit_status": 0/' "$T/r.json" >"$T/bad2.json"
invalid "an exit_status below its entries'" "$T/bad2.json"
sed 's/"layers": \[\]/"layers": [{}]/' "$T/r.json" >"$T/bad3.json"
invalid "a layer without its fields" "$T/bad3.json"
printf '{"input": "x", "output": null}\n' >"$T/bad4.jsonl"
invalid "a record without status" --lines "$T/bad4.jsonl"

# The example: repair, --check, diagnosis, and each report's mode.
expect 0 "repair of the example" -- "$BIN" -q "$EX/broken.onnx" --experts "$EX/experts.yaml" -o "$T/fixed.onnx" --report "$T/fixed.json"
valid "repair report: re-inserted experts listed" "$T/fixed.json" \
	'd["mode"] == "repair" and d["models"][0]["status"] == "repaired" and len(d["models"][0]["layers"][0]["inserted"]) > 0 and d["models"][0]["output"].endswith("fixed.onnx")'
expect 0 "sparse repair of the example" -- "$BIN" -q "$EX/broken.onnx" --experts "$EX/experts.yaml" -o "$T/sparse.onnx" \
	--dispatch sparse --report "$T/sparse.json"
valid "sparse repair report: the dispatch and k/E of the dense expert FLOPs" "$T/sparse.json" \
	'(lambda l: l["dispatch"] == "sparse" and l["sparse_fallback"] is None and l["expert_flops"] > 0 and abs(l["dispatch_flops"] * l["experts"] - l["dense_flops"] * l["top_k"]) <= 1e-6 * l["dense_flops"])(d["models"][0]["layers"][0])'
sed 's/"dispatch": "sparse"/"dispatch": "fast"/' "$T/sparse.json" >"$T/bad5.json"
invalid "an unknown dispatch" "$T/bad5.json"
expect 1 "--check of the example" -- "$BIN" -q --check "$EX/broken.onnx" --experts "$EX/experts.yaml" --report "$T/check.json"
valid "--check report: damaged, exit_status 1" "$T/check.json" \
	'd["mode"] == "check" and d["exit_status"] == 1 and d["models"][0]["status"] == "damaged" and d["models"][0]["output"] is None'
expect 0 "diagnosis of the repaired example" -- "$BIN" -q "$T/fixed.onnx" --report "$T/diag.json"
valid "diagnosis report: intact" "$T/diag.json" 'd["mode"] == "diagnose" and d["models"][0]["status"] == "intact"'

# An error that stops every input: each still has its entry.
printf 'weights: nowhere.safetensors\nmoe: []\n' >"$T/bad.yaml"
expect 2 "a bad experts.yaml with two inputs" -- "$BIN" -q "$EX/broken.onnx" "$T/m.onnx" --experts "$T/bad.yaml" -o "$T/d1" --report "$T/fatal.json"
valid "a run-wide error: every input an error entry" "$T/fatal.json" \
	'd["error"] and [m["status"] for m in d["models"]] == ["error", "error"]'

# --report -: one JSON Lines record per input, in order, nothing else on
# stdout; the same as the document's entries.
"$BIN" -q --report - "$EX/broken.onnx" "$T/empty.onnx" "$T/fixed.onnx" >"$T/r.jsonl" 2>"$T/err"
rc=$?
[ "$rc" -eq 2 ] && ok "--report -: exit 2, the highest of 1, 2, 0" || fail "--report -: exit $rc: $(cat "$T/err")"
valid "--report -: three records, in order" --lines "$T/r.jsonl" \
	'[m["status"] for m in d] == ["damaged", "error", "intact"] and d[0]["input"].endswith("broken.onnx")'
"$BIN" -q --report "$T/same.json" "$EX/broken.onnx" "$T/empty.onnx" "$T/fixed.onnx" 2>/dev/null
valid "--report - records equal the document's entries" "$T/same.json" \
	"d['models'] == [__import__('json').loads(l) for l in open('$T/r.jsonl')]"
expect 2 "--report - with -o -" -- "$BIN" --passthrough "$T/m.onnx" -o - --report - && one_line_err "--report - -o -"
grep -q 'standard output' "$T/err" || fail "--report - -o -: say why: $(cat "$T/err")"

# As each finishes: a record is written after its input and before the
# next starts. A POSIX lock held on the report file (the one parallel
# runs take in turn) stops the tool at its first record: by then the first
# output must exist and the second must not, however long we wait.
mkdir "$T/o"
cp "$T/m.onnx" "$T/second.onnx"
: >"$T/held.jsonl"
"$py" - "$T/held.jsonl" "$T/locked" "$T/release" <<'PY' &
import fcntl, os, sys, time
f = open(sys.argv[1], "a")
fcntl.lockf(f, fcntl.LOCK_EX)
open(sys.argv[2], "w").close()
for _ in range(600):
    if os.path.exists(sys.argv[3]):
        break
    time.sleep(0.05)
PY
holder=$!
i=0
while [ ! -e "$T/locked" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
"$BIN" -q --passthrough --report - "$T/m.onnx" "$T/second.onnx" -o "$T/o" >>"$T/held.jsonl" 2>"$T/err" &
tool=$!
i=0
while [ ! -e "$T/o/m.onnx" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
sleep 1
if [ -e "$T/o/m.onnx" ] && [ ! -e "$T/o/second.onnx" ] && [ ! -s "$T/held.jsonl" ]; then
	ok "--report -: the first record waits for the lock before the second input starts"
else
	fail "--report -: records not written as each input finishes (first output: $([ -e "$T/o/m.onnx" ] && echo yes || echo no), second: $([ -e "$T/o/second.onnx" ] && echo yes || echo no), report: $(wc -c <"$T/held.jsonl") bytes)"
fi
: >"$T/release"
wait "$holder"
wait "$tool" || fail "--report - under a lock: exit $?: $(cat "$T/err")"
valid "--report - under a lock: two records once released" --lines "$T/held.jsonl" 'len(d) == 2'

# Every corpus case: a repair report and a diagnosis of broken and dense
# exports in one --report - run, all valid.
: >"$T/all"
for dir in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/corpus/*/*/; do
	[ -f "$dir/broken.onnx" ] && [ -f "$dir/experts.yaml" ] || continue
	name=$(basename "$dir")
	"$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/c.onnx" --report "$T/c.json" 2>/dev/null
	valid "$name: repair report" "$T/c.json" 'len(d["models"]) == 1'
	printf '%s\n' "$dir/broken.onnx" >>"$T/all"
	[ -f "$dir/dense.onnx" ] && printf '%s\n' "$dir/dense.onnx" >>"$T/all"
done
tr '\n' '\0' <"$T/all" | xargs -0 "$BIN" -q --report - >"$T/all.jsonl" 2>/dev/null
valid "diagnosis of every corpus export as JSON Lines, one record each" --lines "$T/all.jsonl" "len(d) == $(wc -l <"$T/all")"
finish
