#!/bin/sh
# Every malformed or hostile input of tests/bad/ (see cases.txt): the
# expected exit status, exactly one line on stderr holding the expected
# message (none for a status below 2: those inputs are valid), no control
# character on stderr, no output written, no input changed, and each run
# within 10 s and 1 GiB of resident memory, under a 4 GiB address-space
# cap (prlimit --as; not in sanitizer builds, whose shadow memory
# reserves terabytes of address space: there the 1 GiB bound holds).
. "$top_srcdir/tests/lib.sh"

EX=$top_srcdir/testdata/example
[ -f "$top_srcdir/tests/bad/cases.txt" ] || { echo "no tests/bad/cases.txt"; exit 99; }
# GNU time measures the peak resident memory (Debian package time;
# tools/setup-debian installs it).
[ -x /usr/bin/time ] || { echo "FAIL: /usr/bin/time is missing: apt-get install time" >&2; exit 99; }
command -v prlimit >/dev/null && command -v timeout >/dev/null ||
	{ echo "FAIL: prlimit and timeout (util-linux, coreutils) are needed" >&2; exit 99; }
bad_copy
case ${SAN_CFLAGS:-} in
*sanitize*) CAP= ;;
*) CAP="prlimit --as=4294967296 --" ;;
esac
LIMIT_KB=1048576
# Everything the cases read, before and after.
inputs() { (cd "$B" && find . "$EX" -type f -exec cksum {} + | sort); }
before=$(inputs)
mkdir "$T/out"
# Bytes a terminal acts on: C0 controls but newline, DEL, C1 controls
# (UTF-8 C2 80-9F), U+2028/U+2029 and the bidi embeddings (E2 80 A8-AE).
ctl=$(printf '[\001-\011\013-\037\177]')
c1=$(printf '\302[\200-\237]')
sep=$(printf '\342\200[\250-\256]')

# run ARGS...: the tool from $B, bounded; stderr in $T/err, peak RSS (KB) in $rss.
run() {
	# shellcheck disable=SC2086 # CAP and the arguments split on blanks
	(cd "$B" && exec /usr/bin/time -f %M -o "$T/time" timeout 10 $CAP "$BIN" -q "$@") 2>"$T/err"
	got=$?
	rss=$(tail -n 1 "$T/time")
}

# check WANT MSG ARGS: prints the first broken promise, nothing when all hold.
check() {
	if [ "$got" -eq 124 ]; then
		echo "did not finish within 10 s"
	elif [ "$got" -ne "$1" ]; then
		echo "exit $got, want $1; stderr: $(head -c 600 "$T/err")"
	elif [ "$1" -ge 2 ] && { [ "$(wc -l <"$T/err")" -ne 1 ] || ! grep -q '^onnx-moe-repair: ' "$T/err"; }; then
		echo "want one 'onnx-moe-repair: ' line on stderr, got: $(head -c 600 "$T/err")"
	elif [ "$1" -lt 2 ] && [ -s "$T/err" ]; then
		echo "want nothing on stderr (-q), got: $(head -c 600 "$T/err")"
	elif [ -n "$2" ] && ! grep -qF -- "$2" "$T/err"; then
		echo "want '$2', got: $(head -c 600 "$T/err")"
	elif LC_ALL=C grep -q -e "$ctl" -e "$c1" -e "$sep" "$T/err"; then
		echo "stderr holds control characters: $(od -c "$T/err" | head -5)"
	elif [ "$rss" -gt "$LIMIT_KB" ]; then
		echo "peak resident memory $rss KiB, more than 1 GiB"
	fi
}

ncase=0 nknown=0
while IFS= read -r line; do
	case $line in '#'* | '') continue ;; esac
	# "!STATUS": a known failure, kept so that fixing it shows (an
	# unexpected pass fails the test until the '!' is removed).
	known=0
	case $line in '!'*) known=1 line=${line#!} ;; esac
	want=$(printf %s "$line" | sed 's/ *|.*//')
	args=$(printf %s "$line" | sed 's/^[^|]*| *//; s/ *|.*//; s|@EX@|'"$EX"'|g')
	msg=$(printf %s "$line" | sed 's/^[^|]*|[^|]*| *//')
	case " $args " in
	*" --check "* | *" -o "*) out= ;;
	*) out="-o $T/out/out.onnx" ;;
	esac
	[ "$want" -lt 2 ] && out= # valid inputs: diagnosis only, nothing to write
	ncase=$((ncase + 1))
	# shellcheck disable=SC2086 # args split on blanks, as written
	run $args $out
	why=$(check "$want" "$msg")
	[ -z "$(ls -A "$T/out")" ] || { why="${why:+$why; }wrote $(ls -A "$T/out")"; rm -f "$T/out/"*; }
	if [ "$known" -eq 1 ] && [ -n "$why" ]; then
		nknown=$((nknown + 1))
		ok "$args: known failure (see cases.txt): $why"
	elif [ "$known" -eq 1 ]; then
		fail "$args: marked as a known failure but now passes; remove its '!' in cases.txt"
	elif [ -n "$why" ]; then
		fail "$args: $why"
	else
		ok "$args (${rss} KiB)"
	fi
done <"$B/cases.txt"

# An empty raw_data is (NULL, 0): written back byte for byte, without the
# undefined memcpy from NULL (UBSan fails this in sanitizer builds).
run empty_raw.onnx --passthrough -o "$T/out/pass.onnx"
why=$(check 0 "")
if [ -n "$why" ]; then
	fail "empty raw_data, --passthrough: $why"
elif ! cmp -s "$B/empty_raw.onnx" "$T/out/pass.onnx"; then
	fail "empty raw_data, --passthrough: the copy differs from the input"
else
	ok "empty raw_data, --passthrough: byte for byte"
fi

[ "$(inputs)" = "$before" ] || fail "an input changed"
[ "$ncase" -ge 40 ] || fail "only $ncase cases"
echo "$ncase cases, $nknown known failures"
finish
