#!/usr/bin/python3
"""Convert an export to float16 the way ultralytics' quantize=16 does on CPU.

    to_fp16.py IN OUT

YOLO-Master's exporter converts a CPU export with onnxruntime's float16
tool, keeping the model's inputs and outputs float32 (keep_io_types). This
is a clean-room rendition of what that conversion does to a graph, written
from its documented behaviour:
  - shape inference first; every float value type, in every graph, becomes
    float16, Casts to float become Casts to float16, and the float tensors
    of Constant nodes and of initializers read by converted nodes become
    float16;
  - float inputs and outputs stay float32 behind Casts named
    graph_input_cast_N / graph_output_cast_N;
  - ops without float16 kernels (TopK, Resize, Range, CumSum, Min, Max,
    Upsample, NonMaxSuppression, RoiAlign) stay float32 between Casts, and
    initializers only they read stay float32;
  - the Casts it adds are appended to the end of the node list, out of
    topological order, as the tool leaves them.
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx import TensorProto as T

BLOCK = {'NonMaxSuppression', 'TopK', 'RoiAlign', 'Resize', 'Range', 'CumSum', 'Min', 'Max', 'Upsample'}


def half(t):
    if t.data_type == T.FLOAT:
        a = np.clip(numpy_helper.to_array(t).astype(np.float32), -65504, 65504)
        t.CopyFrom(numpy_helper.from_array(a.astype(np.float16), t.name))


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: to_fp16.py IN OUT')
    m = onnx.shape_inference.infer_shapes(onnx.load(sys.argv[1]))
    g = m.graph
    rename, tail, fp16 = {}, [], set()
    for i, v in enumerate(g.input):
        if v.type.tensor_type.elem_type == T.FLOAT:
            rename[v.name] = f'graph_input_cast_{i}'
            tail.append(helper.make_node('Cast', [v.name], [rename[v.name]], to=T.FLOAT16, name=f'graph_input_cast{i}'))
    for i, v in enumerate(g.output):
        if v.type.tensor_type.elem_type == T.FLOAT:
            rename[v.name] = f'graph_output_cast_{i}'
            tail.append(helper.make_node('Cast', [rename[v.name]], [v.name], to=T.FLOAT, name=f'graph_output_cast{i}'))
    fp16.update(rename.values())
    floats = {t.name: t for t in g.initializer if t.data_type == T.FLOAT}
    read16, blocked = set(), []

    def walk(graph, top):
        vis = list(graph.value_info) + ([] if top else list(graph.input) + list(graph.output))
        for v in vis:
            if v.type.tensor_type.elem_type == T.FLOAT:
                v.type.tensor_type.elem_type = T.FLOAT16
                fp16.add(v.name)
        for n in graph.node:
            n.input[:] = [rename.get(x, x) for x in n.input]
            n.output[:] = [rename.get(x, x) for x in n.output]
            if n.op_type in BLOCK:
                blocked.append(n)
                continue
            read16.update(x for x in n.input if x in floats)
            for a in n.attribute:
                if n.op_type == 'Cast' and a.name == 'to' and a.i == T.FLOAT:
                    a.i = T.FLOAT16
                if a.type == onnx.AttributeProto.TENSOR:
                    half(a.t)
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g, False)

    walk(g, True)
    for name in read16:
        half(floats[name])
        fp16.add(name)
    for n in blocked:
        for i, x in enumerate(n.input):
            if x in fp16:
                y = f'{n.name}_input_cast_{i}'
                tail.append(helper.make_node('Cast', [x], [y], to=T.FLOAT, name=f'{n.name}_input_cast{i}'))
                n.input[i] = y
        for i, x in enumerate(n.output):
            if x in fp16:
                y = f'{n.name}_output_cast_{i}'
                tail.append(helper.make_node('Cast', [y], [x], to=T.FLOAT16, name=f'{n.name}_output_cast{i}'))
                n.output[i] = y
    g.node.extend(tail)
    onnx.save(m, sys.argv[2])


if __name__ == '__main__':
    main()
