#!/bin/sh
# valgrind memcheck over the corpus: every case of testdata/ and, when
# present, ../shared/corpus is repaired (from model.safetensors and from
# model.pt; dense and sparse), checked and diagnosed, and every tests/bad
# case refused, with no memory error and no leak. Skips without valgrind, and for sanitizer
# builds (ASan and valgrind do not mix).
. "$top_srcdir/tests/lib.sh"

command -v valgrind >/dev/null || { echo "SKIP: valgrind not installed (apt-get install valgrind)"; exit 77; }
case ${SAN_CFLAGS:-} in *sanitize*) echo "SKIP: sanitizer build (ASan and valgrind do not mix)"; exit 77 ;; esac
node=${NODE:-node}
command -v "$node" >/dev/null || { echo "FAIL: node missing (tools/setup-debian installs it)" >&2; exit 1; }
VG="valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible --track-fds=no"

# vg WANT WHAT ARGS...: the tool under memcheck must exit WANT (99: memcheck found errors).
vg() {
	want=$1 what=$2
	shift 2
	# shellcheck disable=SC2086
	$VG "$BIN" -q "$@" 2>"$T/err" >/dev/null
	got=$?
	if [ "$got" -eq 99 ]; then
		fail "$what: memcheck: $(head -c 3000 "$T/err")"
	elif [ "$got" -ne "$want" ]; then
		fail "$what: exit $got, want $want: $(head -c 600 "$T/err")"
	else
		ok "$what"
	fi
}

n=0
for dir in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/corpus/*/ "$top_srcdir"/../shared/corpus/*/*/; do
	[ -f "$dir/broken.onnx" ] && [ -f "$dir/experts.yaml" ] || continue
	case=$(basename "$dir")
	n=$((n + 1))
	vg 0 "$case: repair" "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/out.onnx" --report "$T/r.json"
	vg 0 "$case: the repaired model needs nothing" --check "$T/out.onnx" --experts "$dir/experts.yaml"
	vg 0 "$case: sparse repair" "$dir/broken.onnx" --experts "$dir/experts.yaml" -o "$T/sparse.onnx" --dispatch sparse
	vg 0 "$case: the sparse model needs nothing" --check "$T/sparse.onnx" --experts "$dir/experts.yaml"
	if [ -f "$dir/model.pt" ]; then
		sed "s|^weights:.*|weights: $dir/model.pt|" "$dir/experts.yaml" >"$T/pt.yaml"
		vg 0 "$case: repair from model.pt" "$dir/broken.onnx" --experts "$T/pt.yaml" -o "$T/out.onnx"
	fi
	vg 1 "$case: --check" --check "$dir/broken.onnx" --experts "$dir/experts.yaml"
	vg 1 "$case: diagnosis" "$dir/broken.onnx"
	if [ -f "$dir/dense.onnx" ]; then
		# A dense export needs nothing (0), unless it holds the exporter's
		# shape-guard Ifs, which are there to fold (1): known from the
		# model's ops, not from the tool.
		nif=$("$node" -e 'console.log(JSON.parse(process.argv[1]).If || 0)' "$("$node" "$top_srcdir/tests/ort/ops.js" "$dir/dense.onnx")") ||
			{ fail "$case: cannot count the If nodes of dense.onnx"; continue; }
		vg "$([ "$nif" -gt 0 ] && echo 1 || echo 0)" "$case: diagnosis of the dense export ($nif If)" "$dir/dense.onnx"
	fi
done
[ "$n" -gt 0 ] || fail "no corpus case found"

# The refusals: error paths free what they allocated too.
EX=$top_srcdir/testdata/example
bad_copy
cd "$B" || exit 99
while IFS= read -r line; do
	case $line in '#'* | '') continue ;; esac
	# Known failures (see cases.txt) crash or hang: tests/bad.sh keeps them.
	case $line in '!'*) echo "skip: known failure: $line"; continue ;; esac
	want=$(printf %s "$line" | sed 's/ *|.*//')
	args=$(printf %s "$line" | sed 's/^[^|]*| *//; s/ *|.*//; s|@EX@|'"$EX"'|g')
	case " $args " in *" --check "* | *" -o "*) out= ;; *) out="-o $T/bad.onnx" ;; esac
	[ "$want" -lt 2 ] && out=
	rm -f "$T/bad.onnx"
	# shellcheck disable=SC2086
	vg "$want" "bad: $args" $args $out
done <"$B/cases.txt"
finish
