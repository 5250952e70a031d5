#!/bin/sh
# What must never be overwritten: the input (unless --in-place), the
# model's external data, folders and devices; and a failed write leaves
# nothing behind, the target untouched. (A read-only output folder:
# tests/readonly.sh.)
. "$top_srcdir/tests/lib.sh"

mkmodel "$T/m.onnx" 100000
s0=$(sum "$T/m.onnx")
expect 2 "-o the input is refused" -- "$BIN" --passthrough "$T/m.onnx" -o "$T/m.onnx" && one_line_err "-o input"
grep -q 'in-place' "$T/err" || fail "refusal should point to --in-place: $(cat "$T/err")"
(cd "$T" && "$BIN" --passthrough m.onnx -o ./m.onnx 2>/dev/null)
[ $? -eq 2 ] || fail "-o ./m.onnx (same file, other spelling) not refused"
ln "$T/m.onnx" "$T/hard.onnx"
expect 2 "-o a hard link to the input is refused" -- "$BIN" --passthrough "$T/m.onnx" -o "$T/hard.onnx"
ln -s m.onnx "$T/sym.onnx"
expect 2 "-o a symlink to the input is refused" -- "$BIN" --passthrough "$T/m.onnx" -o "$T/sym.onnx"
[ "$(sum "$T/m.onnx")" = "$s0" ] || fail "input changed"
rm "$T/hard.onnx" "$T/sym.onnx"

cp "$T/m.onnx" "$T/ip.onnx"
chmod 640 "$T/ip.onnx"
expect 0 "--in-place replaces the input" -- "$BIN" --passthrough --in-place "$T/ip.onnx"
cmp -s "$T/ip.onnx" "$T/m.onnx" || fail "--in-place result differs"
[ "$(stat -c %a "$T/ip.onnx")" = 640 ] || fail "--in-place lost the file mode: $(stat -c %a "$T/ip.onnx")"

head -c 200 /dev/zero >"$T/w.bin"
mkmodel "$T/e.onnx" 200 w.bin
expect 2 "-o the external data file is refused" -- "$BIN" --passthrough "$T/e.onnx" -o "$T/w.bin" && one_line_err "-o w.bin"
[ "$(sum "$T/w.bin")" = "$(head -c 200 /dev/zero | cksum)" ] || fail "external data changed"

expect 2 "-o DIR/ that does not exist" -- "$BIN" --passthrough "$T/m.onnx" -o "$T/nodir/"
expect 2 "-o /dev/null is refused (a device is never replaced)" -- "$BIN" --passthrough "$T/m.onnx" -o /dev/null
[ -c /dev/null ] || fail "/dev/null replaced!"
expect 2 "-o into a missing folder" -- "$BIN" --passthrough "$T/m.onnx" -o "$T/missing/x.onnx" && one_line_err "missing folder"

# A file-size limit hit mid-write: EFBIG (SIGXFSZ is ignored), exit 2, no
# partial output, no temporary, the previous output intact.
mkmodel "$T/big.onnx" 4000000
mkdir "$T/lim"
printf old >"$T/lim/out.onnx"
(ulimit -f 2000 && exec "$BIN" --passthrough "$T/big.onnx" -o "$T/lim/out.onnx") 2>"$T/err"
rc=$?
[ "$rc" -eq 2 ] && one_line_err "ulimit -f" && grep -q 'File too large' "$T/err" &&
	ok "write over the file-size limit fails cleanly" || fail "ulimit -f: rc $rc, $(cat "$T/err")"
[ "$(ls -A "$T/lim")" = out.onnx ] && [ "$(cat "$T/lim/out.onnx")" = old ] ||
	fail "ulimit -f: left $(ls -A "$T/lim") / changed the old output"
finish
