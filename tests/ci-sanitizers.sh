#!/bin/sh
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer, in an
# out-of-tree build. CI: sh tests/ci-sanitizers.sh [BUILD] from anywhere;
# BUILD defaults to build-san in the source tree. Exit status is make
# check's.
#
# Autoconf refuses a build folder for a source tree configured in place;
# then the tracked files are copied (git ls-files) into BUILD/tree and built
# from there, with node_modules linked for the ONNX Runtime tests.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-san}
mkdir -p "$build"
build=$(cd "$build" && pwd)
if [ -f "$src/config.status" ]; then
	command -v git >/dev/null || { echo "$src is configured in place: run make distclean there, or install git" >&2; exit 2; }
	rm -rf "$build/tree"
	mkdir "$build/tree"
	(cd "$src" && git ls-files -z | xargs -0 tar -cf - --no-recursion) | tar -C "$build/tree" -xf -
	[ -d "$src/node_modules" ] && ln -s "$src/node_modules" "$build/tree/node_modules"
	src=$build/tree
	mkdir -p "$build/obj"
	build=$build/obj
fi
[ -x "$src/configure" ] || (cd "$src" && autoreconf -fi)
cd "$build"
# Leaks and undefined behaviour fail the test that triggered them.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS UBSAN_OPTIONS
"$src/configure" -q --enable-sanitizers
make -j2
make -j2 check
