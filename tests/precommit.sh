#!/bin/sh
# The pre-commit framework (Debian's pre-commit) running hook
# onnx-moe-check from this repository's .pre-commit-hooks.yaml, as the
# README sets it up: a scratch hook repository holding that file, a scratch
# repository with the README's .pre-commit-config.yaml. All of it without
# network (a new network namespace): a broken export fails the commit with
# the per-layer lines; the repaired model and a dense export pass; with
# args [--experts, experts.yaml] the missing experts are named.
. "$top_srcdir/tests/lib.sh"
command -v git >/dev/null || { echo "SKIP: git missing (apt-get install git; tools/setup-debian does)"; exit 77; }
command -v pre-commit >/dev/null ||
	{ echo "SKIP: the pre-commit framework is missing (apt-get install pre-commit; tools/setup-debian does)"; exit 77; }
if unshare -n true 2>/dev/null; then
	offline="unshare -n"
elif unshare -rn true 2>/dev/null; then
	offline="unshare -rn"
else
	echo "SKIP: cannot cut the network here (unshare -n and unshare -rn fail), so running offline is unproven"
	exit 77
fi
EX=$top_srcdir/testdata/example
[ -f "$EX/broken.onnx" ] && [ -f "$EX/dense.onnx" ] || { echo "FAIL: testdata/example missing" >&2; exit 1; }
# A user's machine: the tool installed on PATH, nothing of this tree's git.
PATH=$top_builddir:$PATH
HOME=$T/home PRE_COMMIT_HOME=$T/pre-commit-cache GIT_CONFIG_NOSYSTEM=1
GIT_AUTHOR_NAME=test GIT_AUTHOR_EMAIL=test@example.invalid GIT_COMMITTER_NAME=test GIT_COMMITTER_EMAIL=test@example.invalid
export PATH HOME PRE_COMMIT_HOME GIT_CONFIG_NOSYSTEM GIT_AUTHOR_NAME GIT_AUTHOR_EMAIL GIT_COMMITTER_NAME GIT_COMMITTER_EMAIL
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE
mkdir "$HOME"
"$BIN" -q "$EX/broken.onnx" --experts "$EX/experts.yaml" -o "$T/repaired.onnx" || { echo "FAIL: repair of the example" >&2; exit 1; }

# The hook repository: this tree's .pre-commit-hooks.yaml, committed.
mkdir "$T/hooks"
cp "$top_srcdir/.pre-commit-hooks.yaml" "$T/hooks/" || exit 99
(cd "$T/hooks" && git init -q && git add .pre-commit-hooks.yaml && git commit -q -m hooks) || exit 99
rev=$(cd "$T/hooks" && git rev-parse HEAD)

# The guarded repository, configured by the README's block.
mkdir "$T/w"
cd "$T/w" && git init -q || exit 99
readme_block tests/precommit.sh 1 >"$T/config.yaml" || fail "README: no .pre-commit-config.yaml block"
sed -e "s|^\(  - repo:\) [^ ]*|\1 $T/hooks|" -e "s|^\(    rev:\) [^ ]*|\1 $rev|" "$T/config.yaml" >.pre-commit-config.yaml
grep -q "repo: $T/hooks" .pre-commit-config.yaml && grep -q "rev: $rev" .pre-commit-config.yaml ||
	fail "README's config block: no repo:/rev: lines to point at the hook repository: $(cat "$T/config.yaml")"
$offline pre-commit install >"$T/out" 2>&1 && [ -x .git/hooks/pre-commit ] && ok "pre-commit install" ||
	fail "pre-commit install: $(cat "$T/out")"
git add .pre-commit-config.yaml && git commit -q --no-verify -m config || exit 99

# commit WANT WHAT: commits what is staged, offline; WANT pass or fail.
commit() {
	before=$(git rev-parse HEAD)
	$offline git commit -m "$2" >"$T/out" 2>&1
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

cp "$EX/broken.onnx" model.onnx && git add model.onnx
commit fail "a broken export"
grep -q 'onnx-moe-check' "$T/out" && grep -q 'model.onnx: .*present 0,3' "$T/out" && grep -q 'model.onnx: needs repair' "$T/out" &&
	ok "the failure shows the per-layer lines" || fail "per-layer lines missing: $(cat "$T/out")"
cp "$T/repaired.onnx" model.onnx && git add model.onnx
commit pass "the repaired model"
cp "$EX/dense.onnx" dense.onnx && git add dense.onnx
commit pass "a dense export"

# args from the README's comment: --check against the expert sets.
sed "s|^\( *\)# \(args: \[--experts,\) [^]]*\]|\1\2 $EX/experts.yaml]|" .pre-commit-config.yaml >"$T/c2" &&
	grep -q "args: \[--experts, $EX/experts.yaml\]" "$T/c2" || fail "README's config block: no commented args line"
cp "$T/c2" .pre-commit-config.yaml && git add .pre-commit-config.yaml
commit pass "args: [--experts, experts.yaml] on the repaired model"
cp "$EX/broken.onnx" other.onnx && git add other.onnx
commit fail "with args, a broken export"
grep -q 'other.onnx: .*missing 1,2' "$T/out" && ok "with args, the missing experts are named" ||
	fail "with args: $(cat "$T/out")"
finish
