#!/bin/sh
# Batch use: several inputs keep going after a failing one (each its line,
# the highest exit status); the README's "In batch pipelines" examples, run
# as written (find | xargs -P, a Makefile pattern rule) with the built tool
# first on PATH; and runs writing into the same -o DIR at once, which must
# leave each output whole and each model with its own data file.
. "$top_srcdir/tests/lib.sh"
node=${NODE:-node}
command -v "$node" >/dev/null || { echo "FAIL: node missing (tools/setup-debian installs it)" >&2; exit 1; }
PATH=$top_builddir:$PATH
export PATH
# The README's make runs as a user's would, not as a child of make check.
unset MAKEFLAGS MFLAGS MAKELEVEL
[ "$(command -v onnx-moe-repair)" = "$top_builddir/onnx-moe-repair" ] || { echo "FAIL: onnx-moe-repair on PATH is $(command -v onnx-moe-repair)" >&2; exit 1; }
EX=$top_srcdir/testdata/example
TD=$top_srcdir/testdata
for c in example detector_k2 dynbatch sharedstem; do
	[ -f "$TD/$c/broken.onnx" ] || { echo "FAIL: testdata/$c missing" >&2; exit 1; }
done
# statuses FILE.jsonl: "basename-of-input status" per record, sorted; fails
# on a line that is not one JSON object.
statuses() {
	"$node" -e '
		const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter((l) => l);
		const out = lines.map((l) => { const r = JSON.parse(l); return r.input.split("/").slice(-2).join("/") + " " + r.status; });
		console.log(out.sort().join("\n"));' "$1"
}

# --- several inputs in one run ------------------------------------------
: >"$T/empty.onnx"
mkdir "$T/o"
"$BIN" "$EX/broken.onnx" "$T/empty.onnx" "$EX/dense.onnx" 2>"$T/err"
rc=$?
[ "$rc" -eq 2 ] && ok "diagnosis of damaged, unreadable, dense: exit 2, the highest" || fail "exit $rc, want 2"
grep -q "broken.onnx: needs repair" "$T/err" && grep -q "^onnx-moe-repair: $T/empty.onnx: " "$T/err" &&
	grep -q "dense.onnx: nothing needs repair" "$T/err" && ok "each input has its line, after the failing one too" ||
	fail "a line per input: $(cat "$T/err")"
"$BIN" -q "$EX/dense.onnx" "$EX/broken.onnx" 2>"$T/err"
rc=$?
[ "$rc" -eq 1 ] && ok "intact then damaged: exit 1" || fail "intact then damaged: exit $rc, want 1: $(cat "$T/err")"
cp "$EX/broken.onnx" "$T/a.onnx"
cp "$EX/broken.onnx" "$T/c.onnx"
"$BIN" -q "$T/a.onnx" "$T/empty.onnx" "$T/c.onnx" --experts "$EX/experts.yaml" -o "$T/o" 2>"$T/err"
rc=$?
[ "$rc" -eq 2 ] && [ -s "$T/o/a.onnx" ] && [ -s "$T/o/c.onnx" ] && [ ! -e "$T/o/empty.onnx" ] &&
	[ "$(grep -c '^onnx-moe-repair: ' "$T/err")" -eq 1 ] && grep -q "$T/empty.onnx: " "$T/err" &&
	ok "repair keeps going past an unreadable input, writing the others" ||
	fail "repair of three, the middle one bad: exit $rc, wrote $(ls "$T/o"): $(cat "$T/err")"
"$BIN" -q "$T/a.onnx" "$T/c.onnx" --experts "$EX/experts.yaml" -o /nonexistent/ 2>"$T/err"
[ "$(grep -c "^onnx-moe-repair: $T/[ac].onnx: /nonexistent/" "$T/err")" -eq 2 ] &&
	ok "in a batch, a save error names its input" || fail "save errors should name the input: $(cat "$T/err")"

# --- README: find | xargs -P ---------------------------------------------
readme_block tests/batch.sh 1 >"$T/xargs.sh" || fail "README: no find | xargs block"
mkdir -p "$T/x/exports/a" "$T/x/exports/b/deep" "$T/x/exports/c" "$T/x/exports/d"
cp "$EX/broken.onnx" "$T/x/exports/a/model.onnx"
cp "$TD/detector_k2/broken.onnx" "$T/x/exports/b/deep/model.onnx"
cp "$EX/dense.onnx" "$T/x/exports/c/model.onnx"
cp "$EX/broken.onnx" "$T/x/exports/c/left.repaired.onnx"
: >"$T/x/exports/d/junk.onnx"
(cd "$T/x" && sh "$T/xargs.sh") >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 0 ] && [ "$(wc -l <"$T/out")" -eq 2 ] && ok "README xargs block: grep finds the two damaged exports" ||
	fail "README xargs block: exit $rc, out: $(cat "$T/out"), err: $(cat "$T/err")"
statuses "$T/x/diagnosis.jsonl" >"$T/got" 2>&1
printf '%s\n' "a/model.onnx damaged" "c/model.onnx intact" "d/junk.onnx error" "deep/model.onnx damaged" >"$T/want"
diff "$T/want" "$T/got" >/dev/null && ok "README xargs block: one record per model, *.repaired.onnx left out" ||
	fail "README xargs block: records: $(cat "$T/got")"

# --- README: Makefile pattern rule -------------------------------------------
mkdir -p "$T/m/models" "$T/ref"
readme_block tests/batch.sh 2 >"$T/m/Makefile" || fail "README: no Makefile block"
for c in example detector_k2 dynbatch sharedstem; do
	cp "$TD/$c/broken.onnx" "$T/m/models/$c.onnx"
	# weights are relative to the YAML's folder: point them at testdata.
	sed "s|^weights: *|weights: $TD/$c/|" "$TD/$c/experts.yaml" >"$T/m/models/$c.yaml"
	"$BIN" -q "$T/m/models/$c.onnx" --experts "$T/m/models/$c.yaml" -o "$T/ref/$c.onnx" ||
		fail "$c: direct repair failed"
done
(cd "$T/m" && make -s -j2) >"$T/out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && ok "README Makefile: make -j2 repairs every model" || fail "README Makefile: make: exit $rc: $(cat "$T/out")"
for c in example detector_k2 dynbatch sharedstem; do
	cmp -s "$T/m/fixed/$c.onnx" "$T/ref/$c.onnx" && [ -s "$T/m/fixed/$c.json" ] ||
		fail "README Makefile: fixed/$c.onnx differs from a direct repair, or no fixed/$c.json"
done
(cd "$T/m" && make -q) && ok "README Makefile: a second make has nothing to do" || fail "README Makefile: not up to date after make"
sleep 1
touch "$T/m/models/dynbatch.yaml"
(cd "$T/m" && make -j2) >"$T/out" 2>&1
[ "$(grep -c '^onnx-moe-repair ' "$T/out")" -eq 1 ] && grep -q 'models/dynbatch.onnx' "$T/out" &&
	ok "README Makefile: a changed YAML redoes its model only" || fail "README Makefile: after touching dynbatch.yaml: $(cat "$T/out")"
# A repair that fails leaves no target, so make does not take it as done.
: >"$T/m/models/bad.onnx"
cp "$T/m/models/example.yaml" "$T/m/models/bad.yaml"
(cd "$T/m" && make -s) >"$T/out" 2>&1 && fail "README Makefile: make passed with a bad model"
[ ! -e "$T/m/fixed/bad.onnx" ] && ! (cd "$T/m" && make -q) &&
	ok "README Makefile: a failed repair leaves no fixed/bad.onnx, make still wants it" ||
	fail "README Makefile: after a failed repair: $(ls -A "$T/m/fixed")"

# --- two runs into one -o DIR at once ---------------------------------------
# Same output name, different models: each time the result must be one
# run's output, whole; with --external-data, one run's model with that
# same run's data file. References from runs alone.
mkdir -p "$T/r/a" "$T/r/b" "$T/r/ea" "$T/r/eb" "$T/r/pa" "$T/r/pb" "$T/r/out" "$T/r/ext"
mkmodel "$T/r/a/m.onnx" 3000000
mkmodel "$T/r/b/m.onnx" 2000000
"$BIN" -q --passthrough "$T/r/a/m.onnx" -o "$T/r/pa" && "$BIN" -q --passthrough "$T/r/b/m.onnx" -o "$T/r/pb" &&
	"$BIN" -q --passthrough "$T/r/a/m.onnx" -o "$T/r/ea" --external-data m.data &&
	"$BIN" -q --passthrough "$T/r/b/m.onnx" -o "$T/r/eb" --external-data m.data || fail "reference runs failed"
bad=0 mixed=0 i=0
while [ $i -lt 30 ]; do
	"$BIN" -q --passthrough "$T/r/a/m.onnx" -o "$T/r/out" &
	"$BIN" -q --passthrough "$T/r/b/m.onnx" -o "$T/r/out" &
	"$BIN" -q --passthrough "$T/r/a/m.onnx" -o "$T/r/ext" --external-data m.data &
	"$BIN" -q --passthrough "$T/r/b/m.onnx" -o "$T/r/ext" --external-data m.data &
	wait
	cmp -s "$T/r/out/m.onnx" "$T/r/pa/m.onnx" || cmp -s "$T/r/out/m.onnx" "$T/r/pb/m.onnx" || bad=$((bad + 1))
	if cmp -s "$T/r/ext/m.onnx" "$T/r/ea/m.onnx"; then
		cmp -s "$T/r/ext/m.data" "$T/r/ea/m.data" || mixed=$((mixed + 1))
	elif cmp -s "$T/r/ext/m.onnx" "$T/r/eb/m.onnx"; then
		cmp -s "$T/r/ext/m.data" "$T/r/eb/m.data" || mixed=$((mixed + 1))
	else
		bad=$((bad + 1))
	fi
	i=$((i + 1))
done
[ "$bad" -eq 0 ] && ok "two runs into one -o DIR, 30 times: every output one run's, whole" ||
	fail "two runs into one -o DIR: $bad of $i outputs neither run's"
[ "$mixed" -eq 0 ] && ok "with --external-data: every model beside its own run's data file" ||
	fail "with --external-data: $mixed of $i times one run's model over the other's data"
[ "$(ls -A "$T/r/out")" = m.onnx ] && [ "$(ls -A "$T/r/ext" | tr '\n' ' ')" = "m.data m.onnx " ] ||
	fail "concurrent runs left: $(ls -A "$T/r/out" "$T/r/ext")"

# Parallel runs sharing one pipe for --report -: one whole record per input.
for c in example detector_k2 dynbatch sharedstem single_gn convkinds; do
	printf '%s\0%s\0' "$TD/$c/broken.onnx" "$TD/$c/dense.onnx"
done | xargs -0 -P2 -n1 onnx-moe-repair -q --report - 2>/dev/null | cat >"$T/par.jsonl"
statuses "$T/par.jsonl" >"$T/got" 2>&1 && [ "$(wc -l <"$T/got")" -eq 12 ] &&
	ok "xargs -P2 sharing one pipe: 12 whole records" || fail "parallel --report -: $(cat "$T/got")"
finish
