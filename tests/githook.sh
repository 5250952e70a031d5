#!/bin/sh
# Without the pre-commit framework: contrib/pre-commit as a plain git hook
# (installed as the README says), and the README's CI line. The hook
# checks what is staged, not the work tree; names with spaces work; a
# broken export fails with the per-layer lines, repaired and dense pass.
. "$top_srcdir/tests/lib.sh"
command -v git >/dev/null || { echo "SKIP: git missing (apt-get install git; tools/setup-debian does)"; exit 77; }
EX=$top_srcdir/testdata/example
[ -f "$EX/broken.onnx" ] && [ -f "$EX/dense.onnx" ] || { echo "FAIL: testdata/example missing" >&2; exit 1; }
PATH=$top_builddir:$PATH
HOME=$T/home GIT_CONFIG_NOSYSTEM=1
GIT_AUTHOR_NAME=test GIT_AUTHOR_EMAIL=test@example.invalid GIT_COMMITTER_NAME=test GIT_COMMITTER_EMAIL=test@example.invalid
export PATH HOME GIT_CONFIG_NOSYSTEM GIT_AUTHOR_NAME GIT_AUTHOR_EMAIL GIT_COMMITTER_NAME GIT_COMMITTER_EMAIL
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE
mkdir "$HOME"
"$BIN" -q "$EX/broken.onnx" --experts "$EX/experts.yaml" -o "$T/repaired.onnx" || { echo "FAIL: repair of the example" >&2; exit 1; }

mkdir "$T/w"
cd "$T/w" && git init -q || exit 99
cp "$top_srcdir/contrib/pre-commit" .git/hooks/ && chmod +x .git/hooks/pre-commit || exit 99
echo readme >README && git add README && git commit -q -m init || exit 99

commit() { # WANT WHAT
	before=$(git rev-parse HEAD)
	git commit -m "$2" >"$T/out" 2>&1
	rc=$?
	after=$(git rev-parse HEAD)
	if [ "$1" = fail ] && [ "$rc" -ne 0 ] && [ "$before" = "$after" ]; then
		ok "$2: the commit is refused"
	elif [ "$1" = pass ] && [ "$rc" -eq 0 ] && [ "$before" != "$after" ]; then
		ok "$2: committed"
	else
		fail "$2: want $1, git commit exit $rc: $(cat "$T/out")"
	fi
}

mkdir "sub dir"
cp "$EX/broken.onnx" "sub dir/my model.onnx" && git add .
commit fail "a broken export (a name with spaces)"
grep -q 'my model.onnx: .*present 0,3' "$T/out" && grep -q 'needs repair' "$T/out" &&
	ok "the failure shows the per-layer lines" || fail "per-layer lines missing: $(cat "$T/out")"
# Staged broken, repaired only in the work tree: the index is what counts.
cp "$T/repaired.onnx" "sub dir/my model.onnx"
commit fail "broken in the index, repaired in the work tree"
git add .
cp "$EX/broken.onnx" "sub dir/my model.onnx"
commit pass "repaired in the index, broken in the work tree"
git checkout -q -- . || exit 99
cp "$EX/dense.onnx" dense.onnx && git add dense.onnx
commit pass "a dense export"
echo text >notes.txt && git add notes.txt
commit pass "no model staged"
cp "$EX/broken.onnx" gone.onnx && git add gone.onnx
ONNX_MOE_REPAIR=no-such-tool git commit -m "no tool" >"$T/out" 2>&1 && fail "without the tool the hook let a commit through"
grep -q 'no-such-tool not found' "$T/out" && ok "without the tool the hook refuses, and says why" ||
	fail "without the tool: $(cat "$T/out")"
git commit -q --no-verify -m "broken, hook bypassed" || exit 99

# The README's CI line, in this repository: fails while a broken export is
# tracked, passes once it is replaced by the repaired model.
readme_block tests/githook.sh 1 >"$T/ci.sh" || fail "README: no CI block"
sh "$T/ci.sh" >"$T/out" 2>&1 && fail "README CI line passed with gone.onnx broken: $(cat "$T/out")" ||
	{ grep -q 'gone.onnx: needs repair' "$T/out" && ok "README CI line fails on the broken export and names it"; } ||
	fail "README CI line: $(cat "$T/out")"
cp "$T/repaired.onnx" gone.onnx && git add gone.onnx && git commit -q -m repaired || fail "commit of the repaired model"
sh "$T/ci.sh" >"$T/out" 2>&1 && ok "README CI line passes once every model is repaired or dense" ||
	fail "README CI line after the repair: $(cat "$T/out")"
finish
