#!/bin/sh
# Every corpus case in ONNX Runtime: the traced export (broken.onnx) must be
# wrong against the eager references (diff > 1e-2, or past the case's own
# tolerance for real exports with a ref.json; or the runtime fails), the
# dense export right (compare.js --right).  Scripted cases keep all experts
# behind If nodes: their damage is structural, so their broken.onnx must be
# right. Cases: $top_srcdir/testdata/*/ and, when present, ../shared/corpus/*/,
# ../shared/corpus/*/*/ (the shared corpus groups cases by exporter) and
# ../shared/yolo-master/*/.
#
# MOE_ALLOW_NO_ORT=1 turns a missing onnxruntime-node into a skip (77).

srcdir=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
node=${NODE:-node}
cmp="$srcdir/tests/ort/compare.js"

hint="onnxruntime-node missing: run npm install --ignore-scripts in $srcdir"
if ! command -v "$node" >/dev/null 2>&1; then
	hint="node missing: install nodejs, then run npm install --ignore-scripts in $srcdir"
	missing=1
elif ! (cd "$srcdir" && "$node" -e "require.resolve('onnxruntime-node')") >/dev/null 2>&1; then
	missing=1
fi
if [ -n "$missing" ]; then
	if [ "$MOE_ALLOW_NO_ORT" = 1 ]; then
		echo "SKIP: $hint"
		exit 77
	fi
	echo "FAIL: $hint" >&2
	exit 1
fi

fails=0
cases=0
run() { # what model dir mode tol
	out=$("$node" "$cmp" "$2" "$3" "--$4" ${5:+"$5"} 2>&1)
	rc=$?
	printf '%s\n' "$out" | sed 's/^/    /'
	if [ $rc -ne 0 ]; then
		echo "FAIL: $1: $2"
		fails=$((fails + 1))
	else
		echo "ok: $1"
	fi
}

for dir in "$srcdir"/testdata/*/ "$srcdir"/../shared/corpus/*/ \
	"$srcdir"/../shared/corpus/*/*/ "$srcdir"/../shared/yolo-master/*/; do
	[ -f "$dir/broken.onnx" ] || continue
	dir=${dir%/}
	cases=$((cases + 1))
	echo "== $dir"
	if grep -q '"scripted": *true' "$dir/meta.json" 2>/dev/null; then
		run "scripted broken.onnx right (damage is the If nodes)" "$dir/broken.onnx" "$dir" right
	elif [ -f "$dir/ref.json" ]; then
		run "broken.onnx wrong" "$dir/broken.onnx" "$dir" wrong
	else
		run "broken.onnx wrong" "$dir/broken.onnx" "$dir" min 1e-2
	fi
	if [ -f "$dir/dense.onnx" ]; then
		run "dense.onnx right" "$dir/dense.onnx" "$dir" right
	fi
done

if [ $cases -eq 0 ]; then
	echo "FAIL: no corpus case found under $srcdir/testdata" >&2
	exit 1
fi
echo "$cases cases, $fails failures"
[ $fails -eq 0 ]
