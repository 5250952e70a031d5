#!/usr/bin/python3
"""Declare an exported model at a newer opset, as torch >= 2.4 exports it.

    opset_up.py IN OUT OPSET

ultralytics (and so YOLO-Master) exports at the newest opset torch knows
minus one: 19 to 22 with today's torch. Debian's torch 1.13 stops at 17, so
the tests take the corpus' exports (opset 13 to 18) up instead. Between
13 and 23 the ops these exports use keep their meaning, except for the
changes rewritten here:
  - opset 18: the Reduce ops other than ReduceSum take axes as an input;
  - opset 20: GridSample's modes 'bilinear'/'bicubic' are named
    'linear'/'cubic'.
An op whose form changed in a way not rewritten here (DFT at 20, a
GroupNormalization before 21) stops the script instead of making a model
that means something else. The IR version is the one the target opset came
with (19-20: 9, 21-22: 10, 23: 11). Python's onnx 1.12 cannot check opsets
above 18; the tests judge the result in ONNX Runtime.
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

REDUCE_18 = {'ReduceL1', 'ReduceL2', 'ReduceLogSum', 'ReduceLogSumExp', 'ReduceMax',
             'ReduceMean', 'ReduceMin', 'ReduceProd', 'ReduceSumSquare'}
GRID_20 = {'bilinear': b'linear', 'bicubic': b'cubic'}
IR = {19: 9, 20: 9, 21: 10, 22: 10, 23: 11}


def die(msg):
    sys.stderr.write(f'opset_up.py: {msg}\n')
    sys.exit(2)


def up_graph(g, src, dst, fresh):
    nodes = []
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                up_graph(a.g, src, dst, fresh)
            for sub in a.graphs:
                up_graph(sub, src, dst, fresh)
        if n.op_type in REDUCE_18 and src < 18 <= dst:
            axes = [a for a in n.attribute if a.name == 'axes']
            if axes:
                name = fresh(f'{n.name or n.op_type}_axes')
                nodes.append(helper.make_node('Constant', [], [name], value=numpy_helper.from_array(
                    np.array(axes[0].ints, dtype=np.int64), name)))
                n.attribute.remove(axes[0])
                n.input.extend([''] * (1 - len(n.input)) + [name])
        elif n.op_type == 'GridSample' and src < 20 <= dst:
            for a in n.attribute:
                if a.name == 'mode' and a.s.decode() in GRID_20:
                    a.s = GRID_20[a.s.decode()]
        elif (n.op_type == 'DFT' and src < 20 <= dst) or (n.op_type == 'GroupNormalization' and src < 21 <= dst):
            die(f'{n.op_type} changed form before opset {dst}; not rewritten here')
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)


def main():
    if len(sys.argv) != 4:
        die('usage: opset_up.py IN OUT OPSET')
    m = onnx.load(sys.argv[1])
    dst = int(sys.argv[3])
    if dst not in IR:
        die(f'opset {dst}: give 19 to 23')
    ops = [o for o in m.opset_import if o.domain in ('', 'ai.onnx')]
    if len(ops) != 1 or not 13 <= ops[0].version <= dst:
        die(f'{sys.argv[1]}: default-domain opset {[o.version for o in ops]}: only 13 to {dst} go up unchanged')
    src = ops[0].version
    names = set()

    def collect(g):
        for v in list(g.input) + list(g.output) + list(g.initializer):
            names.add(v.name)
        for n in g.node:
            names.update(n.output)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    collect(a.g)

    collect(m.graph)

    def fresh(base):
        k, name = 0, base
        while name in names:
            k += 1
            name = f'{base}_{k}'
        names.add(name)
        return name

    up_graph(m.graph, src, dst, fresh)
    ops[0].version = dst
    m.ir_version = IR[dst]
    onnx.save(m, sys.argv[2])


if __name__ == '__main__':
    main()
