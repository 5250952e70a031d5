# Sourced by the integration tests (run by `make check`, which exports
# top_srcdir and top_builddir). POSIX sh: the tests run under dash too.
set -u
: "${top_builddir:?run through make check}"
: "${top_srcdir:?run through make check}"
BIN=$top_builddir/onnx-moe-repair
T=$(mktemp -d "${TMPDIR:-/tmp}/moe-test.XXXXXX") || exit 99
trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT
NFAIL=0

fail() { echo "FAIL: $*" >&2; NFAIL=$((NFAIL + 1)); }
ok() { echo "ok: $*"; }
finish() { [ "$NFAIL" -eq 0 ] || { echo "$NFAIL failure(s)" >&2; exit 1; }; exit 0; }

# expect STATUS DESCRIPTION -- CMD...: runs CMD, stderr to $T/err.
expect() {
	want=$1 what=$2
	shift 3
	"$@" 2>"$T/err"
	got=$?
	if [ "$got" -ne "$want" ]; then
		fail "$what: exit $got, want $want; stderr: $(cat "$T/err")"
		return 1
	fi
	ok "$what"
}

# One line on stderr, "onnx-moe-repair: ...".
one_line_err() {
	n=$(wc -l <"$T/err")
	if [ "$n" -ne 1 ] || ! grep -q '^onnx-moe-repair: ' "$T/err"; then
		fail "$1: want one 'onnx-moe-repair: ' line on stderr, got $n: $(cat "$T/err")"
		return 1
	fi
}

sum() { cksum <"$1"; }

# The ONNX Runtime side (tests/ort/): compare.js judges a model against a
# case's eager references, ops.js counts its ops.
node=${NODE:-node}
cmp="$top_srcdir/tests/ort/compare.js"
ops="$top_srcdir/tests/ort/ops.js"
# opcount MODEL OP: how many OP nodes MODEL has, bodies included.
opcount() { "$node" -e "const c=JSON.parse(process.argv[1]);console.log(c[process.argv[2]]||0)" \
	"$("$node" "$ops" "$1")" "$2"; }

# each_case FN: FN DIR NAME for every corpus case, a broken export with its
# experts.yaml (testdata/ and, when present, ../shared/corpus and
# ../shared/yolo-master); NAME tells the cases apart. None found fails.
each_case() {
	_n=0
	for _d in "$top_srcdir"/testdata/*/ "$top_srcdir"/../shared/corpus/*/*/ "$top_srcdir"/../shared/yolo-master/*/; do
		[ -f "$_d/broken.onnx" ] && [ -f "$_d/experts.yaml" ] || continue
		_d=${_d%/}
		_n=$((_n + 1))
		"$1" "$_d" "$(basename "$(dirname "$_d")")_$(basename "$_d")"
	done
	[ "$_n" -gt 0 ] || fail "no corpus case found"
}

# needs_onnx_ort WHY: exits 77 (SKIP) unless /usr/bin/python3 imports onnx
# (WHY says what for) and node finds onnxruntime-node.
needs_onnx_ort() {
	if ! /usr/bin/python3 -c 'import onnx' 2>/dev/null; then
		echo "SKIP: /usr/bin/python3 with the onnx module (Debian python3-onnx) is needed $1"
		exit 77
	fi
	if ! (cd "$top_srcdir" && "${NODE:-node}" -e "require.resolve('onnxruntime-node')") >/dev/null 2>&1; then
		echo "SKIP: onnxruntime-node missing: run npm install --ignore-scripts in $top_srcdir"
		exit 77
	fi
}

# --- tiny protobuf writer, enough for synthetic ONNX models -------------
byte() { printf "\\$(printf %03o "$1")"; }
varint() {
	v=$1
	while [ "$v" -ge 128 ]; do byte $(((v & 127) | 128)); v=$((v >> 7)); done
	byte "$v"
}
# field_bytes TAG FILE: a length-delimited field whose payload is FILE.
field_bytes() { byte "$1"; varint "$(wc -c <"$2" | tr -d ' ')"; cat "$2"; }
field_str() { byte "$1"; varint "${#2}"; printf %s "$2"; }
kv() { # StringStringEntryProto key/value, as a field of tag 0x6a
	{ field_str 0x0a "$1"; field_str 0x12 "$2"; } >"$T/.kv"
	field_bytes 0x6a "$T/.kv"
}

# mkmodel OUT NBYTES [LOCATION [OFFSET [LENGTH]]]: a ModelProto whose graph
# holds one uint8 initializer 'w' of NBYTES, embedded (raw_data) or in the
# external file LOCATION. Fields in number order, as protobuf-c writes
# them, so a lossless round trip is byte-identical.
mkmodel() {
	out=$1 n=$2
	{
		byte 0x08; varint "$n"          # dims
		byte 0x10; byte 2               # data_type UINT8
		field_str 0x42 w                # name
		if [ $# -ge 3 ]; then
			kv location "$3"
			[ $# -ge 4 ] && kv offset "$4"
			[ $# -ge 5 ] && kv length "$5"
			byte 0x70; byte 1       # data_location EXTERNAL
		else
			byte 0x4a; varint "$n"; head -c "$n" /dev/zero | tr '\0' '\1'
		fi
	} >"$T/.tensor"
	{ field_str 0x12 g; field_bytes 0x2a "$T/.tensor"; } >"$T/.graph"
	{ byte 0x10; byte 18; } >"$T/.opset"
	{
		byte 0x08; byte 8               # ir_version 8
		field_bytes 0x3a "$T/.graph"
		field_bytes 0x42 "$T/.opset"
	} >"$out"
}

# bad_copy: copies tests/bad to $T/tests/bad (set as $B) with what make
# dist would not keep or what is too large to commit: the symlinks, the
# FIFOs and the 150 000-node chains (tests/mkchain). The YAML files
# name weights as ../../testdata/..., hence the layout.
bad_copy() {
	mkchain=$top_builddir/tests/mkchain
	[ -x "$mkchain" ] || { echo "FAIL: $mkchain not built (make check builds it)" >&2; exit 99; }
	mkdir "$T/tests" && cp -R "$top_srcdir/tests/bad" "$T/tests/bad" && chmod -R u+w "$T/tests" &&
		ln -s data.bin "$T/tests/bad/data_link.bin" && ln -s secret.txt "$T/tests/bad/link.safetensors" &&
		mkfifo "$T/tests/bad/fifo.safetensors" "$T/tests/bad/fifo.bin" "$T/tests/bad/fifo_experts.yaml" &&
		"$mkchain" ids 150000 >"$T/tests/bad/chain_ids.onnx" &&
		"$mkchain" relu 150000 >"$T/tests/bad/chain_relu.onnx" &&
		ln -s "$top_srcdir/testdata" "$T/testdata" || exit 99
	B=$T/tests/bad
}

# readme_block TAG N: the Nth code block of README.md marked
# "<!-- TAG runs this block -->", so the documented commands are the ones
# tested. Fails when there is no such block.
readme_block() {
	awk -v tag="$1" -v want="$2" '
		$0 == "<!-- " tag " runs this block -->" { n++; if (n == want) arm = 1; next }
		arm == 1 && /^```/ { arm = 2; next }
		arm == 2 && /^```/ { done = 1; exit }
		arm == 2 { print }
		END { exit !done }' "$top_srcdir/README.md"
}

# mkmodel_chunks OUT N SIZE: a ModelProto with N embedded uint8
# initializers w0..w(N-1) of SIZE bytes each: written in N steps, so a
# test can catch the write midway (one large tensor is one write()).
mkmodel_chunks() {
	out=$1 n=$2 size=$3
	head -c "$size" /dev/zero | tr '\0' '\1' >"$T/.data"
	{ field_str 0x12 g; } >"$T/.graph"
	i=0
	while [ "$i" -lt "$n" ]; do
		{
			byte 0x08; varint "$size"
			byte 0x10; byte 2
			field_str 0x42 "w$i"
			field_bytes 0x4a "$T/.data"
		} >"$T/.tensor"
		field_bytes 0x2a "$T/.tensor" >>"$T/.graph"
		i=$((i + 1))
	done
	{ byte 0x10; byte 18; } >"$T/.opset"
	{
		byte 0x08; byte 8
		field_bytes 0x3a "$T/.graph"
		field_bytes 0x42 "$T/.opset"
	} >"$out"
	rm -f "$T/.data"
}

# repair_copy DIR NAME COPY [HOOK]: COPY, a transformed copy of the case in
# DIR (simplified, at a newer opset, in float16), is flagged by diagnosis,
# then repaired dense and sparse from DIR's experts.yaml to a model that
# ONNX Runtime judges with compare.js ${copy_judge:---right} against DIR's
# eager references and that diagnosis passes. HOOK OUT DISPATCH runs on
# each repair for checks of the test's own.
repair_copy() {
	_dir=$1 _name=$2 _copy=$3 _hook=${4:-}
	expect 1 "$_name: diagnosis flags the copy" -- "$BIN" -q "$_copy"
	for _d in dense sparse; do
		_out=$T/$_name.$_d.onnx
		expect 0 "$_name: $_d repair of the copy" -- \
			"$BIN" -q "$_copy" --experts "$_dir/experts.yaml" --dispatch $_d -o "$_out" || continue
		# shellcheck disable=SC2086 # copy_judge is option and value
		"$node" "$cmp" "$_out" "$_dir" ${copy_judge:---right} >"$T/ort" 2>&1 &&
			ok "$_name: $_d repair matches eager PyTorch (${copy_judge:---right})" ||
			fail "$_name: $_d repair: ONNX Runtime: $(tail -n 1 "$T/ort")"
		[ -z "$_hook" ] || "$_hook" "$_out" "$_d"
		expect 0 "$_name: diagnosis passes the $_d repair" -- "$BIN" -q "$_out"
	done
}
