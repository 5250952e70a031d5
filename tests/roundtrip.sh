#!/bin/sh
# Lossless I/O: load -> save with no pass gives the same bytes, for every
# model of the shared corpus (when present), of testdata/, and synthetic
# ones (embedded and external data); also through -o -, -o DIR and the
# default IN.repaired.onnx name.
. "$top_srcdir/tests/lib.sh"

n=0
rt() { # rt MODEL: byte-identical through a file and through stdout
	n=$((n + 1))
	if ! "$BIN" -q --passthrough "$1" -o "$T/rt.onnx" 2>"$T/err"; then
		fail "round trip $1: $(cat "$T/err")"
		return
	fi
	cmp -s "$1" "$T/rt.onnx" || fail "round trip $1: bytes differ"
	"$BIN" -q --passthrough "$1" -o - >"$T/rt-stdout.onnx" 2>"$T/err" && cmp -s "$1" "$T/rt-stdout.onnx" ||
		fail "round trip $1 through -o -: $(cat "$T/err")"
}

corpus=${MOE_CORPUS:-$top_srcdir/../shared/corpus}
if [ -d "$corpus" ]; then
	for f in $(find "$corpus" -name '*.onnx' | sort); do rt "$f"; done
	ok "corpus: $n models round-trip byte-identically"
else
	echo "skip: no corpus at $corpus"
fi
m=$n
# testdata/unit/ holds reader fixtures, some broken on purpose (a dangling
# external data reference): not models.
if [ -d "$top_srcdir/testdata" ]; then
	for f in $(find "$top_srcdir/testdata" -path '*/testdata/unit' -prune -o -name '*.onnx' ! -name '*.repaired.onnx' -print | sort); do
		rt "$f"
	done
fi
ok "testdata: $((n - m)) models round-trip byte-identically"

mkmodel "$T/syn.onnx" 3000000
rt "$T/syn.onnx"
head -c 4096 /dev/urandom >"$T/w.bin"
mkmodel "$T/ext.onnx" 1000 w.bin 96 1000
rt "$T/ext.onnx"
ok "synthetic models (3 MB embedded, external data) round-trip"

# Default name beside the input; -o DIR for several inputs.
mkdir "$T/a" "$T/b" "$T/out"
cp "$T/syn.onnx" "$T/a/one.onnx"
cp "$T/syn.onnx" "$T/b/two"
"$BIN" -q --passthrough "$T/a/one.onnx" "$T/b/two" 2>"$T/err" &&
	cmp -s "$T/a/one.repaired.onnx" "$T/syn.onnx" && cmp -s "$T/b/two.repaired.onnx" "$T/syn.onnx" &&
	ok "without -o: IN.repaired.onnx beside each input" || fail "default names: $(cat "$T/err"; ls "$T/a" "$T/b")"
"$BIN" -q --passthrough -o "$T/out" "$T/a/one.onnx" "$T/b/two" 2>"$T/err" &&
	cmp -s "$T/out/one.onnx" "$T/syn.onnx" && cmp -s "$T/out/two" "$T/syn.onnx" &&
	ok "-o DIR: one file per input under its own name" || fail "-o DIR: $(cat "$T/err"; ls "$T/out")"
[ "$(ls -A "$T/out" | wc -l)" -eq 2 ] || fail "-o DIR left extra files: $(ls -A "$T/out")"
finish
