#!/bin/sh
# A folder we cannot write to: every write into it (a new output, replacing
# an output, -o DIR, the report) fails with exit 2 and one line, and leaves
# the folder as it was. root ignores permission bits, so as root the runs
# drop the capabilities that let it (setpriv), or the folder is made
# immutable (chattr +i). Either way a probe write must fail first: where
# neither makes the folder refuse root, this test says SKIP, never passes
# without having run the tool against a folder that refuses it.
. "$top_srcdir/tests/lib.sh"
trap 'chattr -i "$T/ro" 2>/dev/null; chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT

mkmodel "$T/m.onnx" 100000
mkdir "$T/ro"
cp "$T/m.onnx" "$T/ro/old.onnx"
chmod 555 "$T/ro"
s1=$(sum "$T/ro/old.onnx")

# probe: succeeds iff a file can be created in $T/ro by run_ro.
probe() { run_ro sh -c ': >"$1/probe" && rm -f "$1/probe"' sh "$T/ro" 2>/dev/null; }
caps=-dac_override,-dac_read_search,-fowner,-linux_immutable
how="permission bits"
run_ro() { "$@"; }
if probe; then
	how="setpriv (no CAP_DAC_OVERRIDE)"
	run_ro() { setpriv --inh-caps "$caps" --bounding-set "$caps" -- "$@"; }
	if ! command -v setpriv >/dev/null || probe; then
		run_ro() { "$@"; }
		how="chattr +i"
		chattr +i "$T/ro" 2>/dev/null
		if probe; then
			echo "SKIP: cannot make a folder refuse writes here (running as uid $(id -u), setpriv cannot drop CAP_DAC_OVERRIDE, chattr +i fails)"
			exit 77
		fi
	fi
fi
echo "the folder refuses writes by: $how"

expect 2 "read-only output folder: new file" -- run_ro "$BIN" --passthrough "$T/m.onnx" -o "$T/ro/new.onnx" &&
	one_line_err "new file"
expect 2 "read-only output folder: replacing a file" -- run_ro "$BIN" --passthrough "$T/m.onnx" -o "$T/ro/old.onnx" &&
	one_line_err "replacing"
cp "$T/m.onnx" "$T/two.onnx"
expect 2 "read-only -o DIR with two inputs: both fail" -- \
	run_ro "$BIN" -q --passthrough "$T/m.onnx" "$T/two.onnx" -o "$T/ro"
[ "$(grep -c '^onnx-moe-repair: ' "$T/err")" -eq 2 ] || fail "-o DIR: want one line per input: $(cat "$T/err")"
expect 2 "--report into a read-only folder" -- run_ro "$BIN" -q "$T/m.onnx" --report "$T/ro/r.json" &&
	one_line_err "report"
chattr -i "$T/ro" 2>/dev/null
[ "$(ls -A "$T/ro")" = old.onnx ] || fail "read-only folder: left $(ls -A "$T/ro")"
[ "$(sum "$T/ro/old.onnx")" = "$s1" ] || fail "read-only folder: old.onnx changed"
finish
