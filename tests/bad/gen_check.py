#!/usr/bin/python3
"""Writes the checker's malformed inputs of tests/bad/ (committed; rerun
after a change: cd tests/bad && /usr/bin/python3 gen_check.py). Each model
is valid protobuf and broken in one way a runtime refuses; cases.txt says
how the checker must refuse it (exit 2, one line, nothing written)."""
import numpy as np
from onnx import helper, numpy_helper, TensorProto


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(list(nodes), 'g',
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    return m


def plain(nodes, inits=(), opset=18):
    """x [1,4] float in, y [1,4] float out."""
    return model(nodes, [('x', TensorProto.FLOAT, [1, 4])], [('y', TensorProto.FLOAT, [1, 4])], inits, opset)


def save(name, m):
    with open(name, 'wb') as f:
        f.write(m.SerializeToString())  # no onnx.checker: these are meant to be wrong


def raw(name, dtype, dims, nbytes):
    t = TensorProto()
    t.name, t.data_type = name, dtype
    t.dims.extend(dims)
    t.raw_data = bytes(nbytes)
    return t


# --- tensors -----------------------------------------------------------------
# The router weight: dims whose product overflows, 4608 bytes of data.
save('check_dims_overflow.onnx',
     plain([helper.make_node('Mul', ['x', 'router.w'], ['y'])],
           [raw('router.w', TensorProto.FLOAT, [1 << 31, 1 << 31, 1 << 20], 4608)]))
save('check_raw_length.onnx',
     plain([helper.make_node('Add', ['x', 'w'], ['y'])], [raw('w', TensorProto.FLOAT, [1, 4], 12)]))
t = TensorProto()
t.name, t.data_type = 'w', TensorProto.FLOAT
t.dims.extend([1, 4])
t.float_data.extend([1, 2, 3])
save('check_typed_length.onnx', plain([helper.make_node('Add', ['x', 'w'], ['y'])], [t]))
save('check_negative_dim.onnx',
     plain([helper.make_node('Add', ['x', 'w'], ['y'])], [raw('w', TensorProto.FLOAT, [1, -4], 0)]))

# --- element types: an fp32 router weight times fp16 expert outputs -------------
w = numpy_helper.from_array(np.ones((1, 4), np.float32), 'router.w')
save('check_fp32_into_fp16.onnx',
     model([helper.make_node('Relu', ['x'], ['expert'], name='expert'),
            helper.make_node('Mul', ['expert', 'router.w'], ['y'], name='weigh')],
           [('x', TensorProto.FLOAT16, [1, 4])], [('y', TensorProto.FLOAT16, [1, 4])], [w]))


# --- attribute ranges --------------------------------------------------------
def conv(name, **attrs):
    wt = numpy_helper.from_array(np.ones((8, 4, 3, 3), np.float32), 'w')
    save(name, model([helper.make_node('Conv', ['x', 'w'], ['y'], name='conv', **attrs)],
                     [('x', TensorProto.FLOAT, [1, 4, 8, 8])], [('y', TensorProto.FLOAT, None)], [wt]))


conv('check_conv_group0.onnx', group=0)
conv('check_conv_pads.onnx', pads=[-1, 0, 0, 0])
conv('check_conv_strides.onnx', strides=[1, 0])
k = numpy_helper.from_array(np.array([1 << 40], np.int64), 'k')
save('check_topk_k.onnx',
     model([helper.make_node('TopK', ['x', 'k'], ['y', 'i'], name='router_topk')],
           [('x', TensorProto.FLOAT, [1, 4])],
           [('y', TensorProto.FLOAT, None), ('i', TensorProto.INT64, None)], [k]))

# --- model structure -----------------------------------------------------------
save('check_opset.onnx', plain([helper.make_node('Relu', ['x'], ['y'])], opset=10000))
then = helper.make_graph([helper.make_node('Relu', ['x'], ['t'])], 'then', [],
                         [helper.make_tensor_value_info('t', TensorProto.FLOAT, None)])
els = helper.make_graph([helper.make_node('Neg', ['x'], ['e1']), helper.make_node('Abs', ['x'], ['e2'])], 'else', [],
                        [helper.make_tensor_value_info('e1', TensorProto.FLOAT, None),
                         helper.make_tensor_value_info('e2', TensorProto.FLOAT, None)])
save('check_if_arity.onnx',
     plain([helper.make_node('Constant', [], ['c'], value=numpy_helper.from_array(np.array(True))),
            helper.make_node('If', ['c'], ['y'], name='gate', then_branch=then, else_branch=els)]))
# A value name with a NUL: protobuf-c would cut it to 'y'.
save('check_nul_name.onnx', plain([helper.make_node('Relu', ['x'], ['y\x00evil']),
                                   helper.make_node('Identity', ['y\x00evil'], ['y'])]))
# A name with a terminal escape sequence: printed escaped, not interpreted.
save('check_escape.onnx', plain([helper.make_node('Add', ['x', '\x1b[31mghost'], ['y'], name='add')]))
