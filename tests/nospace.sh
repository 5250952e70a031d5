#!/bin/sh
# A full disk (ENOSPC from a small tmpfs): exit 2 with one line, no partial
# output, no temporary left, the previous output and the input untouched,
# also for --in-place and --report. Needs root for mount; skips otherwise.
. "$top_srcdir/tests/lib.sh"

FS=$T/fs
mkdir "$FS"
if ! mount -t tmpfs -o size=64k,mode=0755 tmpfs "$FS" 2>/dev/null; then
	echo "SKIP: cannot mount a tmpfs here (needs root)"
	exit 77
fi
trap 'umount "$FS" 2>/dev/null; chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT

# A repair whose output (tens of KB) cannot fit in the 8 KB left.
EX=$top_srcdir/testdata/example
printf old >"$FS/out.onnx"
head -c 56000 /dev/urandom >"$FS/fill"
s0=$(sum "$FS/out.onnx")
expect 2 "repair into a full file system" -- "$BIN" -q "$EX/broken.onnx" --experts "$EX/experts.yaml" -o "$FS/out.onnx" &&
	one_line_err "full fs" && grep -q 'No space left on device' "$T/err" || fail "full fs: $(cat "$T/err")"
[ "$(ls -A "$FS" | sort | tr '\n' ' ')" = "fill out.onnx " ] || fail "full fs: left $(ls -A "$FS")"
[ "$(sum "$FS/out.onnx")" = "$s0" ] || fail "full fs: the old output changed"

# --in-place: the input itself stays whole when its replacement cannot be written.
rm -f "$FS/out.onnx" "$FS/fill"
mkmodel "$FS/m.onnx" 40000
s1=$(sum "$FS/m.onnx")
expect 2 "--in-place on a full file system" -- "$BIN" -q --passthrough --in-place "$FS/m.onnx" &&
	one_line_err "--in-place full" && grep -q 'No space left on device' "$T/err" || fail "--in-place: $(cat "$T/err")"
[ "$(ls -A "$FS")" = m.onnx ] || fail "--in-place: left $(ls -A "$FS")"
[ "$(sum "$FS/m.onnx")" = "$s1" ] || fail "--in-place: the input changed"

# A report that does not fit: the model is written (elsewhere), the report
# is not, and the old report stays.
printf '{"old": 1}\n' >"$FS/r.json"
head -c 24000 /dev/urandom >"$FS/fill" 2>/dev/null # fills what is left
mkmodel "$T/big.onnx" 30000
expect 2 "--report into a full file system" -- "$BIN" -q --passthrough "$T/big.onnx" -o "$T/big.out.onnx" --report "$FS/r.json" &&
	one_line_err "--report full" && grep -q 'No space left on device' "$T/err" || fail "--report: $(cat "$T/err")"
[ "$(cat "$FS/r.json")" = '{"old": 1}' ] || fail "--report: the old report changed"
[ "$(ls -A "$FS" | sort | tr '\n' ' ')" = "fill m.onnx r.json " ] || fail "--report: left $(ls -A "$FS")"
finish
