#!/bin/sh
# External data (data_location EXTERNAL): locations resolve against the
# model's folder; absolute paths, "..", symlinks, missing files and ranges
# past the end are refused with one clear line. Output elsewhere keeps
# the references where the data there is the same bytes, else copies it.
. "$top_srcdir/tests/lib.sh"

mkdir "$T/m" "$T/m/sub" "$T/other"
head -c 300 /dev/urandom >"$T/m/w.bin"
cp "$T/m/w.bin" "$T/m/sub/w.bin"

bad() { # bad DESCRIPTION PATTERN MODEL
	expect 2 "$1" -- "$BIN" --check "$3" && one_line_err "$1"
	grep -q -- "$2" "$T/err" || fail "$1: message lacks '$2': $(cat "$T/err")"
}
mkmodel "$T/m/ok.onnx" 100 w.bin 200 100
mkmodel "$T/m/oksub.onnx" 300 sub/w.bin
mkmodel "$T/m/dotslash.onnx" 300 ./w.bin
mkmodel "$T/m/nolen.onnx" 50 w.bin 250 # no length: dims x type bytes
for f in ok oksub dotslash nolen; do
	"$BIN" --check "$T/m/$f.onnx" 2>"$T/err"
	[ $? -le 1 ] && ok "valid location ($f)" || fail "valid location $f: $(cat "$T/err")"
done

mkmodel "$T/m/abs.onnx" 300 "$T/m/w.bin"
bad "absolute location" "is absolute" "$T/m/abs.onnx"
mkmodel "$T/m/sub/up.onnx" 300 ../w.bin
bad "'..' location" "'\.\.'" "$T/m/sub/up.onnx"
mkmodel "$T/m/updeep.onnx" 300 sub/../w.bin
bad "'..' inside the location" "'\.\.'" "$T/m/updeep.onnx"
ln -s w.bin "$T/m/link.bin"
mkmodel "$T/m/link.onnx" 300 link.bin
bad "symlinked data file" "symlink" "$T/m/link.onnx"
ln -s sub "$T/m/lsub"
mkmodel "$T/m/lsub.onnx" 300 lsub/w.bin
bad "data file behind a symlinked folder" "symlink" "$T/m/lsub.onnx"
mkmodel "$T/m/missing.onnx" 300 nope.bin
bad "missing data file" "No such file" "$T/m/missing.onnx"
mkmodel "$T/m/past.onnx" 100 w.bin 250 100
bad "offset+length past the end" "runs past the end" "$T/m/past.onnx"
mkmodel "$T/m/nolenpast.onnx" 100 w.bin 250
bad "no length, dims need more than the file has" "runs past the end" "$T/m/nolenpast.onnx"
mkmodel "$T/m/offpast.onnx" 100 w.bin 301
bad "offset past the end" "past the end" "$T/m/offpast.onnx"
mkmodel "$T/m/short.onnx" 100 w.bin 0 99
bad "length disagrees with dims" "need 100" "$T/m/short.onnx"
mkmodel "$T/m/neg.onnx" 100 w.bin -5
bad "negative offset" "non-negative" "$T/m/neg.onnx"
mkmodel "$T/m/dir.onnx" 100 sub
bad "location is a folder" "not a regular file" "$T/m/dir.onnx"

# Output: same folder keeps the locations; another folder keeps them where
# the data there is the same file or identical bytes, and otherwise gets
# its own copy of the tensors (OUT.data, or --external-data's file),
# leaving whatever is there under the old name alone.
expect 0 "output beside the input" -- "$BIN" --passthrough "$T/m/ok.onnx" -o "$T/m/ok2.onnx"
cmp -s "$T/m/ok.onnx" "$T/m/ok2.onnx" || fail "same-folder output differs"
[ ! -e "$T/m/ok2.onnx.data" ] || fail "same-folder output copied the data"
tail -c +201 "$T/m/w.bin" >"$T/want" # the tensor's 100 bytes, at offset 200
# self_contained DESCRIPTION MODEL DATA: MODEL loads with the input's data
# file gone, and DATA holds the tensor's bytes.
self_contained() {
	mv "$T/m/w.bin" "$T/w.bin.away"
	"$BIN" --check "$2" 2>"$T/err"
	rc=$?
	mv "$T/w.bin.away" "$T/m/w.bin"
	[ $rc -le 1 ] && ok "$1: loads without the input's data" || fail "$1: reload: $(cat "$T/err")"
	cmp -s "$T/want" "$3" && ok "$1: the data file holds the tensor" || fail "$1: $3 lacks the tensor's bytes"
}
expect 0 "output in a folder without the data" -- "$BIN" --passthrough "$T/m/ok.onnx" -o "$T/other/ok.onnx"
self_contained "output in a folder without the data" "$T/other/ok.onnx" "$T/other/ok.onnx.data"
[ "$(ls "$T/other" | tr '\n' ' ')" = "ok.onnx ok.onnx.data " ] || fail "other folder: left $(ls -A "$T/other")"
rm "$T/other/ok.onnx" "$T/other/ok.onnx.data"
head -c 300 /dev/zero >"$T/other/w.bin"
mkdir "$T/other/d"
expect 0 "output in a folder with different data under that name" -- "$BIN" --passthrough "$T/m/ok.onnx" -o "$T/other/ok.onnx" --external-data d/x.bin
head -c 300 /dev/zero | cmp -s - "$T/other/w.bin" || fail "different data: the file under the old name changed"
self_contained "different data, --external-data" "$T/other/ok.onnx" "$T/other/d/x.bin"
rm -r "$T/other/ok.onnx" "$T/other/d"
expect 2 "--external-data over a copy the output still references" -- "$BIN" --passthrough "$T/m/ok.onnx" -o "$T/m/sub/ok.onnx" --external-data w.bin &&
	one_line_err "data file over a kept copy"
grep -q "still references" "$T/err" || fail "kept copy: $(cat "$T/err")"
cp "$T/m/w.bin" "$T/other/w.bin"
expect 0 "output in a folder with an identical copy" -- "$BIN" --passthrough "$T/m/ok.onnx" -o "$T/other/ok.onnx"
cmp -s "$T/m/ok.onnx" "$T/other/ok.onnx" || fail "identical copy: the locations should be kept"
rm "$T/other/w.bin" "$T/other/ok.onnx"
ln "$T/m/w.bin" "$T/other/w.bin"
expect 0 "output in a folder with a hard link to the data" -- "$BIN" --passthrough "$T/m/ok.onnx" -o "$T/other/ok.onnx"
cmp -s "$T/m/ok.onnx" "$T/other/ok.onnx" || fail "hard link: the locations should be kept"
"$BIN" --check "$T/other/ok.onnx" 2>"$T/err"
[ $? -le 1 ] && ok "the output loads from its folder" || fail "output reload: $(cat "$T/err")"
finish
