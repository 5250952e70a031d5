#!/bin/sh
# Inputs that are not ONNX models: exit 2, exactly one line on stderr
# naming the file (and the byte where the wire format breaks), no output.
. "$top_srcdir/tests/lib.sh"

mkmodel "$T/good.onnx" 5000
: >"$T/empty.onnx"
head -c 3000 "$T/good.onnx" >"$T/truncated.onnx"
head -c 1 "$T/good.onnx" >"$T/onebyte.onnx"
printf '\377\377\377\377\377\377\377\377\377\377\377' >"$T/longvarint.onnx"
head -c 100000 /dev/urandom >"$T/garbage.onnx"
printf 'ir_version: 8\ngraph {\n}\n' >"$T/text.onnx"
printf 'PK\003\004\024\000\000\000\010\000' >"$T/zip.onnx"
mkdir "$T/folder.onnx"
# Well-formed protobuf, but no graph: not a model we can repair.
{ byte 0x08; byte 8; } >"$T/nograph.onnx"
# A graph nested past any sane depth (If bodies inside If bodies...):
# refused before protobuf-c's recursive unpack could exhaust the stack.
i=0
{ byte 0x12; byte 1; printf g; } >"$T/g0"
while [ $i -lt 100 ]; do
	# GraphProto.node(1) > NodeProto.attribute(5) > AttributeProto.g(6) > GraphProto
	field_bytes 0x32 "$T/g0" >"$T/a"
	field_bytes 0x2a "$T/a" >"$T/nd"
	field_bytes 0x0a "$T/nd" >"$T/g0"
	i=$((i + 1))
done
{ byte 0x08; byte 8; field_bytes 0x3a "$T/g0"; } >"$T/deep.onnx"
mkfifo "$T/fifo.onnx"

for f in empty truncated onebyte longvarint garbage text zip folder nograph deep fifo; do
	[ -e "$T/$f.onnx" ] || { fail "$f: the case could not be made"; continue; }
	expect 2 "$f" -- "$BIN" --passthrough "$T/$f.onnx" -o "$T/out.onnx" && one_line_err "$f"
	grep -q "$T/$f.onnx: " "$T/err" || fail "$f: message does not name the file: $(cat "$T/err")"
	[ -e "$T/out.onnx" ] && fail "$f: wrote an output"
	# Diagnosis and --check fail the same way.
	expect 2 "$f (--check)" -- "$BIN" --check "$T/$f.onnx" && one_line_err "$f --check"
	# Bytes that break the wire format: the message says where (README).
	case $f in truncated | onebyte | longvarint | garbage | text | zip)
		size=$(wc -c <"$T/$f.onnx" | tr -d ' ')
		grep -q "at byte [0-9][0-9]* of $size[^0-9]" "$T/err" && ok "$f: names the byte offset" ||
			fail "$f: the message should name the byte where the wire format breaks: $(cat "$T/err")" ;;
	esac
done
"$BIN" --check "$T/truncated.onnx" 2>"$T/err"
grep -q 'protobuf parse failed at byte [0-9]* of 3000' "$T/err" &&
	ok "truncated: names the byte offset" || fail "truncated: $(cat "$T/err")"
"$BIN" --check "$T/deep.onnx" 2>"$T/err"
grep -q 'nested deeper' "$T/err" && ok "deep nesting: says so" || fail "deep: $(cat "$T/err")"
expect 2 "missing file" -- "$BIN" --check "$T/none.onnx" && one_line_err "missing"
finish
