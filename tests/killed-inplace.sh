#!/bin/sh
# --in-place killed midway (SIGKILL): the input is still the whole old
# model and nothing else is left in its folder.
. "$top_srcdir/tests/lib.sh"

[ -d /proc/self/fd ] || { echo "SKIP: needs /proc"; exit 77; }
mkdir "$T/in"
# 128 tensors of 1 MiB: written in 128 steps, long enough to catch midway.
mkmodel_chunks "$T/in/big.onnx" 128 1048576
s0=$(sum "$T/in/big.onnx")

# pos_of_tmp PID: write position of PID's file open for writing in $T/in
# (the unnamed O_TMPFILE shows as "$T/in/#NNN (deleted)"), or nothing.
pos_of_tmp() {
	for fd in /proc/"$1"/fd/*; do
		case $(readlink "$fd" 2>/dev/null) in
		"$T/in/big.onnx") ;; # the input, mapped read-only
		"$T/in/"*)
			sed -n 's/^pos:[[:space:]]*//p' /proc/"$1"/fdinfo/"${fd##*/}" 2>/dev/null
			return ;;
		esac
	done
}

caught=0
for try in 1 2 3 4 5 6 7 8 9 10; do
	"$BIN" -q --passthrough --in-place "$T/in/big.onnx" &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		p=$(pos_of_tmp "$pid")
		# Mid-write: the temporary open, not all bytes out (the write
		# itself outruns this loop, so kill at first sight).
		if [ -n "$p" ] && [ "$p" -lt 67108864 ]; then
			kill -9 "$pid" && caught=1
			break
		fi
	done
	wait "$pid" 2>/dev/null
	[ "$caught" -eq 1 ] && break
done
if [ "$caught" -ne 1 ]; then
	echo "SKIP: the write finished before it could be caught ten times"
	exit 77
fi
ok "--in-place killed with SIGKILL after $p bytes"
[ "$(ls -A "$T/in")" = big.onnx ] || fail "left behind: $(ls -A "$T/in")"
[ "$(sum "$T/in/big.onnx")" = "$s0" ] || fail "the input changed"
finish
