#!/bin/sh
# The command-line contract: help, version, usage errors, diagnosis mode
# writing nothing, --report JSON.
. "$top_srcdir/tests/lib.sh"

"$BIN" --help >"$T/out" 2>"$T/err" && grep -q '^usage: onnx-moe-repair' "$T/out" && [ ! -s "$T/err" ] &&
	ok "--help exits 0 with usage on stdout" || fail "--help"
"$BIN" --version >"$T/out" && grep -Eq '^onnx-moe-repair [0-9]+\.[0-9]+' "$T/out" &&
	ok "--version" || fail "--version"

mkmodel "$T/m.onnx" 64
for args in "" "--bogus $T/m.onnx" "-o" "$T/m.onnx -z" "--check -o x $T/m.onnx" \
	"-o $T/x.onnx $T/m.onnx" "--in-place $T/m.onnx" "--passthrough --in-place -o x $T/m.onnx" \
	"--passthrough -o $T/x.onnx $T/m.onnx $T/m.onnx" "-"; do
	# shellcheck disable=SC2086
	expect 2 "usage error [$args]" -- "$BIN" $args && one_line_err "[$args]"
done
mkdir "$T/d1" "$T/d2"; cp "$T/m.onnx" "$T/d1/"; cp "$T/m.onnx" "$T/d2/"
expect 2 "two inputs with the same name into one -o DIR" -- "$BIN" --passthrough -o "$T" "$T/d1/m.onnx" "$T/d2/m.onnx"
one_line_err "same-name inputs"

# Without --experts: a diagnosis; whatever it finds, nothing is written.
before=$(ls "$T" | wc -l)
"$BIN" "$T/m.onnx" 2>"$T/err"
rc=$?
{ [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ]; } && [ "$(ls "$T" | wc -l)" -eq "$before" ] &&
	ok "diagnosis exits 0/1 and writes nothing" || fail "diagnosis: rc $rc, $(cat "$T/err")"
"$BIN" --check "$T/m.onnx" 2>"$T/err"
rc=$?
{ [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ]; } && [ "$(ls "$T" | wc -l)" -eq "$before" ] &&
	ok "--check exits 0/1 and writes nothing" || fail "--check: rc $rc"
expect 0 "-q silences the summary" -- "$BIN" -q --passthrough "$T/m.onnx" -o "$T/q.onnx"
[ ! -s "$T/err" ] || fail "-q printed: $(cat "$T/err")"

# --report: valid JSON, names escaped, errors included.
weird="$T/we\"ird\\na	me.onnx"
cp "$T/m.onnx" "$weird"
: >"$T/empty.onnx"
expect 2 "--report with one good and one bad input" -- \
	"$BIN" --passthrough --report "$T/r.json" -o "$T/d1" "$weird" "$T/empty.onnx"
[ -s "$T/r.json" ] || fail "no report written"
json_ok() {
	if [ -x /usr/bin/python3 ]; then
		/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2"
	else
		echo "skip: JSON check needs /usr/bin/python3" >&2; return 0
	fi
}
json_ok "$T/r.json" 'd["exit_status"]==2 and len(d["models"])==2 and d["models"][0]["input"].endswith("\"ird\\na\tme.onnx") and d["models"][0]["status"]=="written" and d["models"][1]["status"]=="error" and "empty file" in d["models"][1]["error"]' &&
	ok "report JSON parses, escapes names, records the error" || fail "report JSON: $(cat "$T/r.json")"
ls -a "$T" | grep -q '^\.r\.json\.' && fail "report temp left behind"

# A report or an output must not land on an input before it is read.
cp "$T/m.onnx" "$T/c1.onnx"
s0=$(sum "$T/c1.onnx")
expect 2 "--report naming the input" -- "$BIN" "$T/c1.onnx" --report "$T/c1.onnx" && one_line_err "--report input"
expect 2 "--report naming the output" -- "$BIN" --passthrough "$T/c1.onnx" -o "$T/c2.onnx" --report "$T/./c2.onnx"
cp "$T/m.onnx" "$T/c1.repaired.onnx"
expect 2 "one input's output is another input" -- "$BIN" --passthrough "$T/c1.onnx" "$T/c1.repaired.onnx"
[ "$(sum "$T/c1.onnx")" = "$s0" ] && [ ! -e "$T/c2.onnx" ] || fail "a refused run changed files"

# The exit-status contract on the bundled example (a traced export that
# lost experts): damaged -> 1 under --check and diagnosis, repaired -> 0.
ex=$top_srcdir/testdata/example
if [ -f "$ex/broken.onnx" ] && [ -f "$ex/experts.yaml" ]; then
	expect 1 "--check on the broken example" -- "$BIN" --check "$ex/broken.onnx" --experts "$ex/experts.yaml"
	grep -q 'missing' "$T/err" || fail "--check should name the missing experts: $(cat "$T/err")"
	expect 1 "diagnosis (no --experts) on the broken example" -- "$BIN" "$ex/broken.onnx"
	expect 0 "repair of the example" -- "$BIN" "$ex/broken.onnx" --experts "$ex/experts.yaml" -o "$T/fixed.onnx" --report "$T/fixed.json"
	grep -q 're-inserted [0-9]' "$T/err" || fail "summary should list re-inserted experts: $(cat "$T/err")"
	json_ok "$T/fixed.json" 'd["models"][0]["status"]=="repaired" and len(d["models"][0]["layers"][0]["inserted"])>0' ||
		fail "example report: $(cat "$T/fixed.json")"
	expect 0 "--check on the repaired example" -- "$BIN" --check "$T/fixed.onnx" --experts "$ex/experts.yaml"
	expect 0 "diagnosis on the repaired example" -- "$BIN" "$T/fixed.onnx"
else
	echo "skip: no testdata/example"
fi
finish
