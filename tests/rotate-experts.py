#!/usr/bin/python3
"""Put a repaired model's re-inserted experts in the wrong places.

    rotate-experts.py REPAIRED BROKEN OUT

The initializers REPAIRED has and BROKEN lacks (the re-inserted experts'),
grouped by name pattern (digits masked) and shape, are rotated within each
group: expert i gets expert i+1's weights, as a wrong checkpoint mapping
would place them. A group of one is zeroed instead. Prints the number of
tensors changed; 0 when nothing was re-inserted (OUT is still written).
tests/repair.sh runs the case's references on OUT: they must call it wrong,
or their "right" verdict on the repair proves nothing about the experts.
"""
import collections
import re
import sys

import onnx
from onnx import numpy_helper

repaired, broken, out = sys.argv[1:4]
had = {t.name for t in onnx.load(broken, load_external_data=False).graph.initializer}
m = onnx.load(repaired)
groups = collections.defaultdict(list)
for t in m.graph.initializer:
    if t.name not in had and len(t.dims) >= 2:  # weights, not biases or scalars
        groups[(re.sub(r"\d+", "#", t.name), tuple(t.dims))].append(t)
n = 0
for g in groups.values():
    a = [numpy_helper.to_array(t).copy() for t in g]
    for j, t in enumerate(g):
        t.CopyFrom(numpy_helper.from_array(a[(j + 1) % len(g)] if len(g) > 1 else a[j] * 0, t.name))
        n += 1
onnx.save(m, out)
print(n)
