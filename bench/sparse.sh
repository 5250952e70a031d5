#!/bin/sh
# ONNX Runtime latency of the sparse dispatch (CPU, one thread, interleaved
# runs, medians; bench/latency.js): per model, the --dispatch sparse repair
# against the dense repair and the dense export (dense.onnx, where the case
# has one). First the goal model, generated (bench/gen.py): two 16-expert
# top-2 layers, C=64, 64x64 input, experts Conv1x1 -> BN -> SiLU -> Conv1x1
# -> BN (BN folded by the exporter), at batch 1 and at a static batch of 4;
# then every corpus model (testdata/, ../shared/corpus, ../shared/yolo-master)
# on its in_0.npy. Every repaired model is checked against the references
# first: a fast wrong model measures nothing. Prints the table and writes it
# into README.md between the sparse-bench markers.
#
#   bench/sparse.sh [RUNS]        (default 300 runs per model and case)
#
# Needs: a built ./onnx-moe-repair, /usr/bin/python3 with python3-onnx and
# python3-numpy, node with onnxruntime-node (npm install --ignore-scripts).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/onnx-moe-repair}
PY=/usr/bin/python3
OUT=$ROOT/bench/out/sparse
RUNS=${1:-300}
CORPUS=${CORPUS:-$ROOT/../shared/corpus}
YOLO=${YOLO:-$ROOT/../shared/yolo-master}
[ -d "$CORPUS" ] && CORPUS=$(cd "$CORPUS" && pwd)
[ -d "$YOLO" ] && YOLO=$(cd "$YOLO" && pwd)

die() { echo "bench/sparse.sh: $*" >&2; exit 2; }
[ -x "$BIN" ] || die "$BIN missing: build first (autoreconf -fi && ./configure && make)"
"$PY" -c 'import onnx, numpy' 2>/dev/null || die "$PY lacks onnx/numpy: apt-get install python3-onnx python3-numpy"
(cd "$ROOT" && node -e "require.resolve('onnxruntime-node')") >/dev/null 2>&1 ||
	die "onnxruntime-node missing: npm install --ignore-scripts in $ROOT"
mkdir -p "$OUT"
T=$(mktemp -d "$OUT/.run.XXXXXX")
trap 'rm -rf "$T"' EXIT
ortv=$(cd "$ROOT" && node -e "console.log(require('onnxruntime-node/package.json').version)")

le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
met() { if le "$1" "$2"; then echo "met"; else echo "missed"; fi; }

# repair CASEDIR NAME TOL: sparse and dense repairs of CASEDIR/broken.onnx
# into $T/NAME.{sparse,dense}.onnx, both checked against the references
# (TOL: compare.js --max TOL, or --right).
repair() {
	for d in sparse dense; do
		"$BIN" -q "$1/broken.onnx" --experts "$1/experts.yaml" -o "$T/$2.$d.onnx" --dispatch "$d" ||
			die "$2: $d repair failed"
		if [ "$3" = right ]; then
			node "$ROOT/tests/ort/compare.js" "$T/$2.$d.onnx" "$1" --right >"$T/ort" 2>&1
		else
			node "$ROOT/tests/ort/compare.js" "$T/$2.$d.onnx" "$1" --max "$3" >"$T/ort" 2>&1
		fi || die "$2: the $d repair is wrong: $(tail -n 1 "$T/ort")"
	done
}

TAB=$T/table.md
{
	echo "Measured $(date -u +%Y-%m-%d) by \`bench/sparse.sh $RUNS\` (ONNX Runtime $ortv, CPU, 1 thread, median of"
	echo "$RUNS interleaved runs per model; $(nproc) cores shared with other jobs, so expect noise of 10-20% on"
	echo "absolute times; the ratios come from one interleaved run)."
	echo
	echo "| model | sparse (ms) | dense repair (ms) | dense export (ms) | sparse / dense repair | sparse / dense export |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: |"
} >"$TAB"

# --- the goal model -----------------------------------------------------------
goal=
for b in 1 4; do
	G=$OUT/goal_b$b
	args="--layers 2 --channels 64 --experts 16 --top-k 2 --hw 64 --hidden 1 --batch $b --dense --ref 1"
	if [ ! -f "$G/.args" ] || [ "$(cat "$G/.args")" != "$args" ]; then
		rm -rf "$G"
		echo "generating goal model, batch $b" >&2
		"$PY" "$ROOT/bench/gen.py" "$G" $args >/dev/null
		echo "$args" >"$G/.args"
	fi
	node "$ROOT/tests/ort/compare.js" "$G/dense.onnx" "$G" --max 1e-4 >/dev/null || die "goal model: dense.onnx is wrong"
	repair "$G" goal$b 1e-4
	echo "goal model, batch $b" >&2
	set -- $(node "$ROOT/bench/latency.js" "$T/goal$b.sparse.onnx" "$T/goal$b.dense.onnx" "$G/dense.onnx" "$G/in_0.npy" --runs "$RUNS")
	s=$1 dr=$2 de=$3
	rs=$(awk -v a="$s" -v b="$dr" 'BEGIN { printf "%.3f", a / b }') re=$4
	echo "| goal: 2 layers x 16 experts, top-2, C=64, 64x64, batch $b | $s | $dr | $de | $rs | $re |" >>"$TAB"
	[ "$b" = 1 ] && goal=$re
done

# --- the corpus ---------------------------------------------------------------------
worst=0
worstname=
for c in "$ROOT"/testdata/*/ "$CORPUS"/*/*/ "$YOLO"/*/; do
	[ -f "$c/broken.onnx" ] && [ -f "$c/experts.yaml" ] && [ -f "$c/in_0.npy" ] || continue
	c=${c%/}
	name=$(echo "$c" | sed "s|^$ROOT/||; s|^$CORPUS/|shared/|; s|^$YOLO/|yolo-master/|")
	tag=$(echo "$name" | tr '/' '_')
	tol=1e-4
	[ -f "$c/ref.json" ] && tol=right
	repair "$c" "$tag" "$tol"
	echo "$name" >&2
	if [ -f "$c/dense.onnx" ]; then
		set -- $(node "$ROOT/bench/latency.js" "$T/$tag.sparse.onnx" "$T/$tag.dense.onnx" "$c/dense.onnx" "$c/in_0.npy" --runs "$RUNS")
		s=$1 dr=$2 de=$3 re=$4
	else
		set -- $(node "$ROOT/bench/latency.js" "$T/$tag.sparse.onnx" "$T/$tag.dense.onnx" "$c/in_0.npy" --runs "$RUNS")
		s=$1 dr=$2 de=- re=-
	fi
	rs=$(awk -v a="$s" -v b="$dr" 'BEGIN { printf "%.3f", a / b }')
	echo "| $name | $s | $dr | $de | $rs | $re |" >>"$TAB"
	le "$rs" "$worst" || { worst=$rs; worstname=$name; }
done
{
	echo
	echo "Goal model (batch 1): sparse / dense export $goal, target <= 0.35: $(met "$goal" 0.35)."
	echo "Corpus: worst sparse / dense repair $worst ($worstname), target <= 1 (never slower): $(met "$worst" 1)."
} >>"$TAB"

cat "$TAB"
R=$ROOT/README.md
if ! grep -q '^<!-- sparse-bench:start -->$' "$R"; then
	printf '\n<!-- sparse-bench:start -->\n<!-- sparse-bench:end -->\n' >>"$R"
fi
awk -v tab="$TAB" '
	/^<!-- sparse-bench:start -->$/ { print; while ((getline l < tab) > 0) print l; skip = 1; next }
	/^<!-- sparse-bench:end -->$/ { skip = 0 }
	!skip' "$R" >"$T/readme" && cat "$T/readme" >"$R"
echo "README.md updated" >&2
