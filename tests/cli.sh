#!/bin/sh
# The command-line contract: help, version, usage errors, diagnosis mode
# writing nothing, what a report or output may not overwrite.
. "$top_srcdir/tests/lib.sh"

"$BIN" --help >"$T/out" 2>"$T/err" && grep -q '^usage: onnx-moe-repair' "$T/out" && [ ! -s "$T/err" ] &&
	ok "--help exits 0 with usage on stdout" || fail "--help"
"$BIN" --version >"$T/out" && grep -Eq '^onnx-moe-repair [0-9]+\.[0-9]+' "$T/out" &&
	ok "--version" || fail "--version"

mkmodel "$T/m.onnx" 64
for args in "" "--bogus $T/m.onnx" "-o" "$T/m.onnx -z" "--check -o x $T/m.onnx" \
	"-o $T/x.onnx $T/m.onnx" "--in-place $T/m.onnx" "--passthrough --in-place -o x $T/m.onnx" \
	"--passthrough -o $T/x.onnx $T/m.onnx $T/m.onnx" "-" "--passthrough -o - --report - $T/m.onnx"; do
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

# A report or an output must not land on an input before it is read.
cp "$T/m.onnx" "$T/c1.onnx"
s0=$(sum "$T/c1.onnx")
expect 2 "--report naming the input" -- "$BIN" "$T/c1.onnx" --report "$T/c1.onnx" && one_line_err "--report input"
expect 2 "--report naming the output" -- "$BIN" --passthrough "$T/c1.onnx" -o "$T/c2.onnx" --report "$T/./c2.onnx"
cp "$T/m.onnx" "$T/c1.repaired.onnx"
expect 2 "one input's output is another input" -- "$BIN" --passthrough "$T/c1.onnx" "$T/c1.repaired.onnx"
[ "$(sum "$T/c1.onnx")" = "$s0" ] && [ ! -e "$T/c2.onnx" ] || fail "a refused run changed files"

# An output the run cannot write stops it before the work, not after: on
# a model the repair refuses, the error is the output's, and on one it
# repairs, nothing but the load runs (-v prints no layer).
un=$top_srcdir/tests/unrepairable/c2fmot
expect 2 "a missing output folder, before the repair" -- \
	"$BIN" -q "$un/broken.onnx" --experts "$un/experts.yaml" -o "$T/no/such/out.onnx" &&
	one_line_err "missing output folder" && { grep -q 'cannot open folder' "$T/err" || fail "missing output folder: $(cat "$T/err")"; }
ex=$top_srcdir/testdata/example
expect 2 "an output on the input, before the repair" -- \
	"$BIN" -v "$ex/broken.onnx" --experts "$ex/experts.yaml" -o "$ex/broken.onnx" &&
	one_line_err "output on the input" && { grep -q 'is the input model' "$T/err" || fail "output on the input: $(cat "$T/err")"; }

# The exit-status contract on the bundled example (a traced export that
# lost experts): damaged -> 1 under --check and diagnosis, repaired -> 0.
# (The JSON report: tests/report.sh.)
ex=$top_srcdir/testdata/example
[ -f "$ex/broken.onnx" ] && [ -f "$ex/experts.yaml" ] || { fail "no testdata/example"; finish; }
expect 1 "--check on the broken example" -- "$BIN" --check "$ex/broken.onnx" --experts "$ex/experts.yaml"
grep -q 'missing' "$T/err" || fail "--check should name the missing experts: $(cat "$T/err")"
expect 1 "diagnosis (no --experts) on the broken example" -- "$BIN" "$ex/broken.onnx"
expect 0 "repair of the example" -- "$BIN" "$ex/broken.onnx" --experts "$ex/experts.yaml" -o "$T/fixed.onnx"
grep -q 're-inserted [0-9]' "$T/err" || fail "summary should list re-inserted experts: $(cat "$T/err")"
# -v's critical-path line (bench/run.sh reads it): the layers are bound
# after the start and before the run's end, by a CPU time no larger than
# the run's.
expect 0 "-v repair of the example" -- "$BIN" -v "$ex/broken.onnx" --experts "$ex/experts.yaml" -o "$T/fixedv.onnx"
sed -n 's/^.*broken\.onnx: layers bound \([0-9.]*\) s from the start, CPU \([0-9.]*\) s by then and \([0-9.]*\) s by the end of the save$/\1 \2 \3/p' "$T/err" |
	awk 'NF == 3 && $1 > 0 && $2 > 0 && $2 <= $3 { k++ } END { exit k != 1 }' &&
	ok "-v says when the layers were bound" || fail "-v's 'layers bound' line: $(cat "$T/err")"
expect 0 "--check on the repaired example" -- "$BIN" --check "$T/fixed.onnx" --experts "$ex/experts.yaml"
expect 0 "diagnosis on the repaired example" -- "$BIN" "$T/fixed.onnx"
grep -q 'run with --weights CHECKPOINT (or --experts' "$T/err" &&
	fail "a healthy model told to run with a checkpoint: $(cat "$T/err")"
"$BIN" "$ex/broken.onnx" 2>"$T/err"
grep -q 'needs repair; run with --weights CHECKPOINT (or --experts experts.yaml)$' "$T/err" &&
	ok "diagnosis of missing experts asks for the checkpoint" || fail "missing experts' hint: $(cat "$T/err")"

# Every expert present (scripted: all behind If): diagnosis says the repair
# needs no checkpoint, and an experts.yaml without weights repairs it.
si=$top_srcdir/testdata/scripted_if
expect 1 "diagnosis of an export with every expert present" -- "$BIN" "$si/broken.onnx" &&
	{ grep -q 'needs repair; no expert is missing, so experts.yaml needs no weights' "$T/err" &&
		ok "its hint: experts.yaml without weights" || fail "every expert present, hint: $(cat "$T/err")"; }
grep -v '^weights:' "$si/experts.yaml" >"$T/noweights.yaml"
expect 0 "its repair from an experts.yaml without weights" -- \
	"$BIN" -q "$si/broken.onnx" --experts "$T/noweights.yaml" -o "$T/si.onnx"

# A checkpoint whose name says nothing (a Lightning .ckpt, safetensors
# named .weights, a trainer's file without extension): its first bytes
# tell the format, and the repair is the one its usual name gives.
"$BIN" -q "$ex/broken.onnx" --weights "$ex/model.safetensors" -o "$T/named.onnx" || fail "repair from model.safetensors"
cp "$ex/model.pt" "$T/last.ckpt" && cp "$ex/model.safetensors" "$T/model.weights" && cp "$ex/model.pt" "$T/best" || exit 99
for w in last.ckpt model.weights best; do
	expect 0 "checkpoint named $w" -- "$BIN" -q "$ex/broken.onnx" --weights "$T/$w" -o "$T/sniffed.onnx" &&
		{ cmp -s "$T/named.onnx" "$T/sniffed.onnx" && ok "$w: the same repair" || fail "$w: another repair"; }
done
# experts.yaml copied away from its checkpoint: --weights replaces the
# file it names, which is then never opened and need not exist.
sed 's/^weights: .*/weights: elsewhere\/model.safetensors/' "$ex/experts.yaml" >"$T/moved.yaml"
expect 2 "a YAML naming a missing checkpoint, alone" -- "$BIN" -q "$ex/broken.onnx" --experts "$T/moved.yaml" -o "$T/o.onnx" &&
	{ grep -qF "weights 'elsewhere/model.safetensors' not found" "$T/err" && ok "it names the missing file" ||
		fail "missing weights: $(cat "$T/err")"; }
expect 0 "the same YAML with --weights" -- \
	"$BIN" -q "$ex/broken.onnx" --experts "$T/moved.yaml" --weights "$ex/model.safetensors" -o "$T/moved.onnx" &&
	{ cmp -s "$T/named.onnx" "$T/moved.onnx" && ok "--weights over a moved YAML: the same repair" ||
		fail "--weights over a moved YAML: another repair"; }
printf 'not weights\n' >"$T/notes.txt"
expect 2 "a file no format fits" -- "$BIN" -q "$ex/broken.onnx" --weights "$T/notes.txt" -o "$T/o.onnx" &&
	{ grep -qF "notes.txt: unknown weight source type (neither its name nor its first bytes say)" "$T/err" &&
		ok "it says the format is unknown" || fail "a file no format fits: $(cat "$T/err")"; }
finish
