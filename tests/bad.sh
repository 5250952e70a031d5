#!/bin/sh
# Every malformed input of tests/bad/ (see cases.txt): the expected exit
# status, exactly one line on stderr holding the expected message, no
# output written, and no input changed.
. "$top_srcdir/tests/lib.sh"

EX=$top_srcdir/testdata/example
[ -f "$top_srcdir/tests/bad/cases.txt" ] || { echo "no tests/bad/cases.txt"; exit 99; }
# A copy, to add the symlink that make dist would have dereferenced.
# The YAML files name weights as ../../testdata/..., hence the layout;
# the symlink and the FIFO are made here (make dist would not keep them).
mkdir "$T/tests" && cp -R "$top_srcdir/tests/bad" "$T/tests/bad" && chmod -R u+w "$T/tests" &&
	ln -s data.bin "$T/tests/bad/data_link.bin" && mkfifo "$T/tests/bad/fifo.safetensors" &&
	ln -s "$top_srcdir/testdata" "$T/testdata" || exit 99
B=$T/tests/bad
# Everything the cases read, before and after.
inputs() { (cd "$B" && find . "$EX" -type f -exec cksum {} + | sort); }
before=$(inputs)
mkdir "$T/out"
ncase=0
while IFS= read -r line; do
	case $line in '#'* | '') continue ;; esac
	want=$(printf %s "$line" | sed 's/ *|.*//')
	args=$(printf %s "$line" | sed 's/^[^|]*| *//; s/ *|.*//; s|@EX@|'"$EX"'|g')
	msg=$(printf %s "$line" | sed 's/^[^|]*|[^|]*| *//')
	case " $args " in
	*" --check "* | *" -o "*) out= ;;
	*) out="-o $T/out/out.onnx" ;;
	esac
	ncase=$((ncase + 1))
	# shellcheck disable=SC2086 # args split on blanks, as written
	(cd "$B" && exec "$BIN" -q $args $out) 2>"$T/err"
	got=$?
	if [ "$got" -ne "$want" ]; then
		fail "$args: exit $got, want $want; stderr: $(cat "$T/err")"
	elif ! one_line_err "$args"; then
		:
	elif ! grep -qF -- "$msg" "$T/err"; then
		fail "$args: want '$msg', got: $(cat "$T/err")"
	else
		ok "$args"
	fi
	[ -z "$(ls -A "$T/out")" ] || { fail "$args: wrote $(ls -A "$T/out")"; rm -f "$T/out/"*; }
done <"$B/cases.txt"
[ "$(inputs)" = "$before" ] || fail "an input changed"
[ "$ncase" -ge 40 ] || fail "only $ncase cases"
echo "$ncase cases"
finish
