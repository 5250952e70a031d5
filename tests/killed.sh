#!/bin/sh
# A write killed midway (SIGKILL, no chance to clean up) leaves no partial
# output and no temporary file, and an existing output is untouched.
. "$top_srcdir/tests/lib.sh"

[ -d /proc/self/fd ] || { echo "SKIP: needs /proc"; exit 77; }
# 128 tensors of 1 MiB: written in 128 steps, long enough to catch midway.
mkmodel_chunks "$T/big.onnx" 128 1048576
mkdir "$T/out"
printf old >"$T/out/m.onnx"

# pos_in_out PID: write position of PID's open file in $T/out, or nothing.
pos_in_out() {
	for fd in /proc/"$1"/fd/*; do
		case $(readlink "$fd" 2>/dev/null) in
		"$T/out/"*) sed -n 's/^pos:[[:space:]]*//p' /proc/"$1"/fdinfo/"${fd##*/}" 2>/dev/null; return ;;
		esac
	done
}

caught=0
for try in 1 2 3 4 5 6 7 8 9 10; do
	"$BIN" -q --passthrough "$T/big.onnx" -o "$T/out/m.onnx" &
	pid=$!
	# Kill once 8 MiB of the output are written, but well before the
	# end: with all bytes out the rename may come before the kill lands,
	# and the old output be replaced as it should.
	while kill -0 "$pid" 2>/dev/null; do
		p=$(pos_in_out "$pid")
		if [ -n "$p" ] && [ "$p" -ge 8388608 ] && [ "$p" -lt 67108864 ]; then
			kill -9 "$pid" && caught=1
			break
		fi
	done
	wait "$pid" 2>/dev/null
	[ "$caught" -eq 1 ] && break
	printf old >"$T/out/m.onnx" # it finished first: try again
done
if [ "$caught" -ne 1 ]; then
	echo "SKIP: the write finished before it could be caught ten times"
	exit 77
fi
ok "killed with SIGKILL after $p bytes of the output"
[ "$(ls -A "$T/out")" = m.onnx ] || fail "left behind: $(ls -A "$T/out")"
[ "$(cat "$T/out/m.onnx")" = old ] || fail "the existing output changed"
finish
