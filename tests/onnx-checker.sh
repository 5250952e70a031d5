#!/bin/sh
# An independent verdict on every corpus model: the cases of testdata/ and,
# when present, ../shared/corpus and ../shared/yolo-master; per case its
# broken export, its dense export and our repair of it. Two checkers:
# - ONNX's own (Debian's python3-onnx: check_model with full shape
#   inference), for opsets up to the last it knows (17 in 1.12);
# - ONNX Runtime creating a session (tests/ort/load.js: graph resolution,
#   type and shape inference against the operator schemas), for every model,
#   so opset 18 and later still meet a checker.
# A case the tool does not repair today is named in the log; tests/repair.sh
# owns whether it should. Both checkers must first reject a model with a
# node removed, so a checker that accepts anything cannot pass this test.
# MOE_ALLOW_NO_ORT=1 turns a missing python3-onnx or onnxruntime-node into
# SKIP.
. "$top_srcdir/tests/lib.sh"
py=${PYTHON_ONNX:-/usr/bin/python3}
node=${NODE:-node}
need=
"$py" -c 'import onnx' 2>/dev/null || need="python3-onnx (apt-get install python3-onnx)"
(cd "$top_srcdir" && "$node" -e "require.resolve('onnxruntime-node')") >/dev/null 2>&1 ||
	need="${need:+$need and }onnxruntime-node (npm install --ignore-scripts in $top_srcdir)"
if [ -n "$need" ]; then
	[ "${MOE_ALLOW_NO_ORT:-}" = 1 ] && { echo "SKIP: missing $need"; exit 77; }
	echo "FAIL: missing $need; tools/setup-debian installs both" >&2
	exit 1
fi

# The models, one path a line: the checkers read this list.
: >"$T/models"
ncase=0 nrep=0
for dir in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/corpus/*/ "$top_srcdir"/../shared/corpus/*/*/ \
	"$top_srcdir"/../shared/yolo-master/*/; do
	[ -f "$dir/broken.onnx" ] || continue
	dir=${dir%/}
	ncase=$((ncase + 1))
	name=$(basename "$(dirname "$dir")")-$(basename "$dir")
	echo "$dir/broken.onnx" >>"$T/models"
	[ -f "$dir/dense.onnx" ] && echo "$dir/dense.onnx" >>"$T/models"
	[ -f "$dir/experts.yaml" ] || continue
	if "$BIN" -q "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/$name.onnx" 2>"$T/err"; then
		echo "$T/$name.onnx" >>"$T/models"
		nrep=$((nrep + 1))
	else
		echo "note: $dir: not repaired today, so no repaired model to check: $(cat "$T/err")"
	fi
done
[ "$ncase" -gt 0 ] || fail "no corpus case found"
[ "$nrep" -gt 0 ] || fail "no case repaired: nothing of ours was checked"
echo "$ncase cases, $(wc -l <"$T/models") models ($nrep repaired)"

# Negative controls: a node whose output is read removed (an undefined
# input) from the first model, and from the first whose opset is newer than
# python3-onnx knows.
"$py" - "$T/models" "$T" >"$T/neg" 2>&1 <<'PY' || fail "cannot build the negative controls: $(cat "$T/neg")"
import sys, onnx
models, out = open(sys.argv[1]).read().splitlines(), sys.argv[2]
def opset(m):
    return max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
done = set()
for p in models:
    m = onnx.load(p)
    new = opset(m) > onnx.defs.onnx_opset_version()
    if new in done:
        continue
    used = {i for n in m.graph.node for i in n.input}
    k = next(k for k, n in enumerate(m.graph.node) if k and any(o in used for o in n.output))
    del m.graph.node[k]
    q = "%s/neg-%s.onnx" % (out, "new" if new else "old")
    onnx.save(m, q)
    print(q)
    done.add(new)
PY
[ -s "$T/neg" ] || fail "no negative control built"

check_onnx() { "$py" "$top_srcdir/tests/onnx-check.py" "$@"; }
check_ort() { "$node" "$top_srcdir/tests/ort/load.js" "$@"; }

# The controls first: each must be refused by every checker that reads it.
while IFS= read -r neg; do
	check_ort "$neg" >"$T/out" 2>&1
	grep -q '^FAIL: ' "$T/out" && ok "ONNX Runtime refuses $(basename "$neg") (a node removed)" ||
		fail "ONNX Runtime accepts a model with a node removed: $(cat "$T/out")"
	check_onnx "$neg" >"$T/out" 2>&1
	case $(cat "$T/out") in
	FAIL:*) ok "onnx.checker refuses $(basename "$neg") (a node removed)" ;;
	"newer opset: "*) ;;
	*) fail "onnx.checker accepts a model with a node removed: $(cat "$T/out")" ;;
	esac
done <"$T/neg"

# One process per checker for all models; paths may hold spaces.
tr '\n' '\0' <"$T/models" | xargs -0 "$py" "$top_srcdir/tests/onnx-check.py" >"$T/py" 2>&1
tr '\n' '\0' <"$T/models" | xargs -0 "$node" "$top_srcdir/tests/ort/load.js" >"$T/ort" 2>&1
while IFS= read -r m; do
	if grep -qxF "ok: $m" "$T/py"; then
		ok "onnx.checker (full check): $m"
	elif ! grep -qxF "newer opset: $m" "$T/py"; then
		fail "onnx.checker: $(grep -F "$m" "$T/py" || tail -n 3 "$T/py")"
	fi
	if grep -qxF "ok: $m" "$T/ort"; then
		ok "ONNX Runtime session: $m"
	else
		fail "ONNX Runtime: $(grep -F "$m" "$T/ort" || tail -n 3 "$T/ort")"
	fi
done <"$T/models"
finish
