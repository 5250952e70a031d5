#!/bin/sh
# Regenerates the zip fixtures of tests/unit/check_zip.c (run from this folder).
# Info-ZIP makes stored.zip/deflated.zip; Python's zipfile makes the zip64 one
# the way numpy.savez does (force_zip64 local headers, data descriptor-free).
set -e
d=$(mktemp -d)
printf 'hello, stored\n' > "$d/a.txt"
/usr/bin/python3 -c "import sys; sys.stdout.write('moe ' * 500)" > "$d/b.txt"
rm -f stored.zip deflated.zip zip64.zip
(cd "$d" && zip -q -0 -X "$OLDPWD/stored.zip" a.txt b.txt)
(cd "$d" && zip -q -9 -X "$OLDPWD/deflated.zip" a.txt b.txt)
/usr/bin/python3 - "$d" <<'PY'
import sys, zipfile
d = sys.argv[1]
with zipfile.ZipFile('zip64.zip', 'w', zipfile.ZIP_DEFLATED) as z:
    for n in ('a.txt', 'b.txt'):
        with open(d + '/' + n, 'rb') as f, z.open(n, 'w', force_zip64=True) as w:
            w.write(f.read())
    with z.open('c.bin', 'w', force_zip64=True) as w:
        w.write(b'')
PY
rm -r "$d"
