#!/bin/sh
# `make fuzz`: builds each libFuzzer harness with clang (ASan + UBSan +
# fuzzer coverage over the whole library) and runs it for FUZZ_SECONDS,
# one at a time (in-process, no -jobs), starting from the committed seeds plus the
# working corpus kept in the build tree. Crashes land in
# fuzz/crashes/HARNESS/ of the build tree; the run fails if one appears.
#
# Environment (set by the Makefile): FUZZ_CC, srcdir, builddir, CPPFLAGS,
# LIBS, TESTDATA; the library's sources are the arguments.
# FUZZ_TARGETS selects harnesses (default: all), FUZZ_SECONDS (default 60)
# the time each runs, FUZZ_FLAGS extra libFuzzer flags.
set -u
: "${FUZZ_CC:?}" "${srcdir:?}" "${builddir:?}"
secs=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-"model spec safetensors npz npy onnxsrc pt pipeline"}
mkdir -p "$builddir/fuzz/obj" || exit 1
out=$(cd "$builddir/fuzz" && pwd) # absolute: libFuzzer runs inside it (fork mode logs to .)
srcdir=$(cd "$srcdir" && pwd)
cflags="-g -O1 -std=c11 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all"

objs=
for f in "$@" fuzz/fuzz.c; do
	case $f in *.c) ;; *) continue ;; esac
	src=$srcdir/$f
	[ -f "$builddir/$f" ] && src=$builddir/$f # generated: src/onnx.pb-c.c
	o=$out/obj/$(echo "$f" | tr / _).o
	if [ ! -f "$o" ] || [ "$src" -nt "$o" ] || [ -n "$(find "$srcdir/src" "$srcdir/passes" "$srcdir/fuzz" -name '*.h' -newer "$o" 2>/dev/null | head -1)" ]; then
		echo "  FUZZCC   $f"
		# shellcheck disable=SC2086
		$FUZZ_CC $cflags $CPPFLAGS -c "$src" -o "$o" || exit 1
	fi
	objs="$objs $o"
done

status=0
for h in $targets; do
	bin=$out/fuzz_$h
	echo "  FUZZLD   $bin"
	# shellcheck disable=SC2086
	$FUZZ_CC $cflags -fsanitize=fuzzer $CPPFLAGS -DFUZZ_TESTDATA="\"$TESTDATA\"" \
		"$srcdir/fuzz/fuzz_$h.c" $objs $LIBS -o "$bin" || exit 1
	mkdir -p "$out/corpus/$h" "$out/crashes/$h"
	seeds=$srcdir/fuzz/seeds/$h
	[ -d "$seeds" ] || seeds=
	regress=$srcdir/fuzz/regress/$h
	[ -d "$regress" ] || regress=
	echo "fuzz_$h: ${secs}s"
	# shellcheck disable=SC2086
	(cd "$out" && exec "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$out/crashes/$h/" ${FUZZ_FLAGS:-} \
		"$out/corpus/$h" $seeds $regress) >"$out/fuzz_$h.log" 2>&1
	rc=$?
	grep -E '^#[0-9]+.*(DONE|INITED)|^stat::(number_of_executed_units|peak_rss_mb)|^(==[0-9]+==)?ERROR|^SUMMARY' "$out/fuzz_$h.log"
	if [ $rc -ne 0 ] || [ -n "$(ls -A "$out/crashes/$h")" ]; then
		echo "fuzz_$h: FAILED (exit $rc); see $out/fuzz_$h.log and $out/crashes/$h/" >&2
		status=1
	fi
done
exit $status
