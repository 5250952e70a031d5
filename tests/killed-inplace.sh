#!/bin/sh
# --in-place killed midway (SIGKILL): the input is still the whole old
# model and nothing else is left in its folder. The kill lands at a chosen
# byte of the new file every run (tests/killat.so, preloaded).
. "$top_srcdir/tests/lib.sh"

shim=$top_builddir/tests/killat.so
[ -f "$shim" ] || { echo "FAIL: $shim not built (make check builds it)" >&2; exit 99; }
mkdir "$T/in"
mkmodel_chunks "$T/in/big.onnx" 128 1048576
s0=$(sum "$T/in/big.onnx")

for at in 1 33554432; do
	KILLAT_BYTES=$at KILLAT_DIR=$T/in/ LD_PRELOAD=$shim ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
		"$BIN" -q --passthrough --in-place "$T/in/big.onnx" 2>"$T/err"
	rc=$?
	[ "$rc" -eq 137 ] || { fail "want the tool killed (137) after $at bytes, got exit $rc: $(cat "$T/err")"; continue; }
	ok "--in-place killed with SIGKILL after $at bytes"
	[ "$(ls -A "$T/in")" = big.onnx ] || fail "killed after $at bytes: left behind: $(ls -A "$T/in")"
	[ "$(sum "$T/in/big.onnx")" = "$s0" ] || fail "killed after $at bytes: the input changed"
done
finish
