#!/bin/sh
# A write killed midway (SIGKILL, no chance to clean up) leaves no partial
# output and no temporary file, and an existing output is untouched. The
# kill lands at a chosen byte of the output every run: tests/killat.so,
# preloaded, makes the tool kill itself there.
. "$top_srcdir/tests/lib.sh"

shim=$top_builddir/tests/killat.so
[ -f "$shim" ] || { echo "FAIL: $shim not built (make check builds it)" >&2; exit 99; }
# 128 tensors of 1 MiB: the output is written in many steps.
mkmodel_chunks "$T/big.onnx" 128 1048576
mkdir "$T/out"
printf old >"$T/out/m.onnx"

for at in 1 8388608 67108864; do
	# ASan (sanitizer builds) insists on coming first; the shim is plain C.
	KILLAT_BYTES=$at KILLAT_DIR=$T/out/ LD_PRELOAD=$shim ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
		"$BIN" -q --passthrough "$T/big.onnx" -o "$T/out/m.onnx" 2>"$T/err"
	rc=$?
	[ "$rc" -eq 137 ] || { fail "want the tool killed (137) after $at bytes, got exit $rc: $(cat "$T/err")"; continue; }
	ok "killed with SIGKILL after $at bytes of the output"
	[ "$(ls -A "$T/out")" = m.onnx ] || fail "killed after $at bytes: left behind: $(ls -A "$T/out")"
	[ "$(cat "$T/out/m.onnx")" = old ] || fail "killed after $at bytes: the existing output changed"
done
# The shim does nothing unasked: the same write, not killed, replaces it.
"$BIN" -q --passthrough "$T/big.onnx" -o "$T/out/m.onnx" && cmp -s "$T/big.onnx" "$T/out/m.onnx" &&
	ok "the write completes when not killed" || fail "the unkilled write did not produce the model"
finish
