#!/usr/bin/python3
# Regenerates the donor .onnx fixtures of tests/unit/check_onnxsrc.c (run
# from this folder with Debian's python3-onnx). Kept tiny on purpose.
import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

def model(inits, nodes, name):
    g = h.make_graph(nodes, 'donor', [h.make_tensor_value_info('x', T.FLOAT, [1])],
                     [h.make_tensor_value_info('y', T.FLOAT, [1])], initializer=inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 18)]), 'onnx/' + name)

w = np.arange(6, dtype=np.float32).reshape(2, 3)
then = h.make_graph([h.make_node('Constant', [], ['sub.c'], value=nh.from_array(np.array([9], np.int64)))],
                    'then', [], [h.make_tensor_value_info('sub.c', T.INT64, [1])])
other = h.make_graph([h.make_node('Constant', [], ['sub.d'], value_int=4)],
                     'else', [], [h.make_tensor_value_info('sub.d', T.INT64, [])])
model([
    nh.from_array(w, 'model.1.experts.0.w'),                                  # raw_data
    h.make_tensor('typed.f32', T.FLOAT, [3], [1.0, 2.5, -4.0]),               # float_data
    h.make_tensor('typed.f16', T.FLOAT16, [2], [1.5, -2.0]),          # int32_data (bits)
    h.make_tensor('typed.i64', T.INT64, [2], [-3, 1 << 40]),                  # int64_data
    h.make_tensor('typed.i8', T.INT8, [2], [-1, 5]),                          # int32_data
    h.make_tensor('typed.f64', T.DOUBLE, [1], [0.25]),                        # double_data
    h.make_tensor('typed.u64', T.UINT64, [1], [1 << 63]),                     # uint64_data
], [
    h.make_node('Constant', [], ['c.value'], value=nh.from_array(np.array([[1, 2]], np.float32))),
    h.make_node('Constant', [], ['c.floats'], value_floats=[0.5, 1.5]),
    h.make_node('Constant', [], ['c.int'], value_int=-7),
    h.make_node('Constant', [], ['cond'], value=nh.from_array(np.array(True))),
    h.make_node('If', ['cond'], ['y'], then_branch=then, else_branch=other),
    # The tracer's aliases of equal parameters, in each spelling of the
    # default domain; another domain's Identity is not one.
    h.make_node('Identity', ['model.1.experts.0.w'], ['alias.unset']),
    h.make_node('Identity', ['typed.f32'], ['alias.ai'], domain='ai.onnx'),
    h.make_node('Identity', ['typed.f32'], ['alias.other'], domain='com.example'),
], 'donor.onnx')

ext = nh.from_array(w, 'ext.w')
ext.data_location = T.EXTERNAL
e = ext.external_data.add(); e.key = 'location'; e.value = 'weights.bin'
ext.ClearField('raw_data')
model([ext], [], 'external.onnx')
# make_tensor refuses inconsistent tensors: edit them after the fact.
bad = h.make_tensor('bad.raw', T.FLOAT, [4], b'\0' * 16, raw=True)
bad.raw_data = b'\0' * 12
model([bad], [], 'badraw.onnx')
bad = h.make_tensor('bad.count', T.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
del bad.float_data[2:]
model([bad], [], 'badcount.onnx')
model([h.make_tensor('s', T.STRING, [1], [b'x'])], [], 'string.onnx')
