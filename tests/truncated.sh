#!/bin/sh
# An input cut short while the tool reads it (a checkpoint or a model
# rewritten during the run): the pages past its new end raise SIGBUS in
# whichever thread reads them. The run stops with one line naming the file
# and exit status 2, like any bad input, and leaves no output for the input
# at hand; what an earlier input of the same run wrote stays, whole.
# tests/killat.so, preloaded, truncates the file right after the tool maps
# it, or once the output has its first byte (the save reads new weights).
. "$top_srcdir/tests/lib.sh"

shim=$top_builddir/tests/killat.so
[ -f "$shim" ] || { echo "FAIL: $shim not built (make check builds it)" >&2; exit 99; }
PY=${PYTHON:-/usr/bin/python3}
"$PY" -c "import onnx, numpy" 2>/dev/null ||
	{ echo "FAIL: $PY lacks onnx/numpy (tools/setup-debian installs python3-onnx, python3-numpy)" >&2; exit 1; }

# cut FILE [@N | BYTES DIR] -- CMD...: CMD with FILE truncated once
# mapped (the N-th time it is), or once BYTES bytes are written under DIR.
cut() {
	_f=$1 _nth=1 _bytes=0 _dir=
	shift
	case $1 in
	@*) _nth=${1#@}; shift ;;
	--) ;;
	*) _bytes=$1 _dir=$2; shift 2 ;;
	esac
	shift
	env KILLAT_TRUNCATE="$_f" KILLAT_NTH="$_nth" KILLAT_BYTES="$_bytes" KILLAT_DIR="$_dir" LD_PRELOAD="$shim" \
		ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" "$@" 2>"$T/err"
}

# snap DIR: what DIR holds, for judge.
snap() { ls -A "$1" >"$T/snap"; }
# judge WHAT FILE RC DIR: exit 2, one line naming FILE, and DIR (the
# output's folder) holding the files it held at snap.
judge() {
	what=$1 file=$2 rc=$3 dir=$4
	[ "$rc" -eq 2 ] || { fail "$what: exit $rc, want 2: $(cat "$T/err")"; return; }
	one_line_err "$what" || return
	grep -q "^onnx-moe-repair: $file: shorter than when opened, byte [0-9]* is gone .*; rerun once the file is complete$" "$T/err" ||
		{ fail "$what: want the file named and what to do: $(cat "$T/err")"; return; }
	ls -A "$dir" | cmp -s - "$T/snap" ||
		{ fail "$what: the output folder changed: $(ls -A "$dir" | tr '\n' ' ')"; return; }
	ok "$what: one line, exit 2, nothing written"
}

fresh() { rm -rf "$1" && mkdir -p "$1" && snap "$1"; }

# The bundled example, its model and its checkpoint each cut once mapped.
X=$T/x
O=$T/out
for f in broken.onnx model.safetensors; do
	rm -rf "$X" && cp -R "$top_srcdir/testdata/example" "$X" && chmod -R u+w "$X"
	fresh "$O"
	cut "$X/$f" -- "$BIN" -q "$X/broken.onnx" --experts "$X/experts.yaml" -o "$O/o.onnx"
	judge "$f cut once mapped" "$X/$f" $? "$O"
done

# A PyTorch checkpoint (a zip) cut once mapped.
P=$T/pt
cp -R "$top_srcdir/testdata/fp16_eps" "$P" && chmod -R u+w "$P"
fresh "$O"
cut "$P/best.pt" -- "$BIN" -q "$P/broken.onnx" --experts "$P/experts.yaml" -o "$O/o.onnx"
judge "best.pt cut once mapped" "$P/best.pt" $? "$O"

# Two inputs in one run, their checkpoint cut when the second maps it:
# the first output is the one a run without the cut writes; the second
# is not written, and the run stops.
rm -rf "$X" && cp -R "$top_srcdir/testdata/example" "$X" && chmod -R u+w "$X" && cp "$X/broken.onnx" "$X/second.onnx"
mkdir "$T/ref" && "$BIN" -q "$X/broken.onnx" --experts "$X/experts.yaml" -o "$T/ref" || fail "the example's repair"
fresh "$O"
cut "$X/model.safetensors" @2 -- "$BIN" -q "$X/broken.onnx" "$X/second.onnx" --experts "$X/experts.yaml" -o "$O"
rc=$?
if cmp -s "$O/broken.onnx" "$T/ref/broken.onnx"; then
	mv "$O/broken.onnx" "$T/first.onnx"
	judge "two inputs, the checkpoint cut for the second" "$X/model.safetensors" $rc "$O"
else
	fail "two inputs: the first output is not the uncut run's: $(ls -A "$O"); $(cat "$T/err")"
fi

# Generated models (bench/gen.py). New weights of 16 KiB and more are
# built from the checkpoint while the output is written, on the save's
# helper thread.
G=$T/g
"$PY" "$top_srcdir/bench/gen.py" "$G" --layers 3 --channels 64 --experts 4 --top-k 2 --missing 2 >/dev/null ||
	fail "gen.py"
cp "$G/model.safetensors" "$T/keep.safetensors" || fail "copy"
snap "$G"
cut "$G/model.safetensors" 1 "$G/" -- "$BIN" -q "$G/broken.onnx" --experts "$G/experts.yaml" -o "$G/o.onnx"
judge "checkpoint cut once the output has a byte" "$G/model.safetensors" $? "$G"
cp "$T/keep.safetensors" "$G/model.safetensors"
# The shim does nothing unasked, and the same run, uncut, repairs.
LD_PRELOAD=$shim ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
	"$BIN" -q "$G/broken.onnx" --experts "$G/experts.yaml" -o "$G/o.onnx" 2>"$T/err" &&
	[ -s "$G/o.onnx" ] && ok "uncut, the same run repairs" || fail "uncut run: $(cat "$T/err")"

# A model's external data, read by the present experts' check.
E=$T/e
"$PY" "$top_srcdir/bench/gen.py" "$E" --layers 2 --channels 16 --experts 4 --top-k 2 --missing 2 --external >/dev/null ||
	fail "gen.py --external"
snap "$E"
cut "$E/broken.onnx.data" -- "$BIN" -q "$E/broken.onnx" --experts "$E/experts.yaml" -o "$E/o.onnx"
judge "external data cut once mapped" "$E/broken.onnx.data" $? "$E"
finish
