#!/usr/bin/python3
"""Writes the committed seed corpora under fuzz/seeds/ (small: the fuzzers
grow their own working corpus). Run from the top of the tree:
/usr/bin/python3 fuzz/mkseeds.py"""
import io, json, os, shutil, struct, zipfile
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

S = 'fuzz/seeds'
TD = 'testdata'


def put(h, name, data):
    os.makedirs(f'{S}/{h}', exist_ok=True)
    with open(f'{S}/{h}/{name}', 'wb') as f:
        f.write(data)


def rd(p):
    with open(p, 'rb') as f:
        return f.read()


# --- ONNX models: real exports (plain and with If bodies), tiny ones ---
def tiny(nested=0, external=False):
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), 'w')
    body = None
    nodes = [helper.make_node('MatMul', ['x', 'w'], ['y'], name='/model.0/experts.0/MatMul')]
    if nested:
        then = helper.make_graph([helper.make_node('Identity', ['y'], ['t'])], 'then', [],
                                 [helper.make_tensor_value_info('t', TensorProto.FLOAT, None)])
        els = helper.make_graph([helper.make_node('Neg', ['y'], ['u'])], 'else', [],
                                [helper.make_tensor_value_info('u', TensorProto.FLOAT, None)])
        nodes += [helper.make_node('Constant', [], ['c'], value=numpy_helper.from_array(np.array(True))),
                  helper.make_node('If', ['c'], ['z'], then_branch=then, else_branch=els)]
    out = 'z' if nested else 'y'
    g = helper.make_graph(nodes, 'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 3])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 18)])
    m.ir_version = 8
    return m.SerializeToString()


for c in ('example', 'scripted_if', 'dynbatch'):
    put('model', f'{c}.onnx', rd(f'{TD}/{c}/broken.onnx'))
put('model', 'tiny.onnx', tiny())
put('model', 'tiny_if.onnx', tiny(nested=1))
for f in os.listdir(f'{TD}/unit/onnx'):
    put('model', f, rd(f'{TD}/unit/onnx/{f}'))
    put('onnxsrc', f, rd(f'{TD}/unit/onnx/{f}'))
put('onnxsrc', 'tiny.onnx', tiny())
put('onnxsrc', 'tiny_if.onnx', tiny(nested=1))

# --- experts.yaml ---
for c in os.listdir(TD):
    if os.path.exists(f'{TD}/{c}/experts.yaml'):
        put('spec', f'{c}.yaml', rd(f'{TD}/{c}/experts.yaml'))
put('spec', 'full.yaml', b'''version: 1
weights: model.pt
checkpoint_key: ema
moe:
  - scope: model.6
    experts: 8
    top_k: 2
    expert: "experts.{i}"
    weights: other.safetensors
    prefix: "module."
    checkpoint_key: model
    router_indices: /model.6/TopK_output_1
    router_weights: /model.6/Softmax_output_0
    input: /model.6/x
    output: /model.6/y
  - {scope: "model.8", experts: 2, top_k: 1}
''')
put('spec', 'anchors.yaml', b'base: &b {experts: 4, top_k: 2}\nmoe:\n  - <<: *b\n    scope: a\n  - *b\n')


# --- safetensors ---
def st(tensors, meta=None, pad=b''):
    hdr, data = {}, b''
    if meta:
        hdr['__metadata__'] = meta
    for name, (dt, arr) in tensors.items():
        b = arr.tobytes()
        hdr[name] = {'dtype': dt, 'shape': list(arr.shape), 'data_offsets': [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(hdr).encode() + pad
    return struct.pack('<Q', len(h)) + h + data


put('safetensors', 'example.safetensors', rd(f'{TD}/example/model.safetensors'))
put('safetensors', 'types.safetensors', st({
    'model.0.experts.1.conv.weight': ('F32', np.ones((2, 1, 3, 3), np.float32)),
    'h': ('F16', np.arange(4, dtype=np.float16)),
    'b': ('BF16', np.arange(4, dtype=np.uint16)),
    'd': ('F64', np.arange(3, dtype=np.float64)),
    'i': ('I64', np.arange(3, dtype=np.int64)),
    'u': ('U8', np.arange(5, dtype=np.uint8)),
    'k': ('BOOL', np.array([True, False])),
    's': ('F32', np.array(1.5, np.float32)),
    'z': ('F32', np.zeros((0, 4), np.float32)),
}, meta={'format': 'pt'}, pad=b'   '))

# --- npy / npz ---
def npy(a):
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


put('npy', 'f32.npy', npy(np.arange(12, dtype=np.float32).reshape(3, 4)))
put('npy', 'f16_fortran.npy', npy(np.asfortranarray(np.arange(6, dtype=np.float16).reshape(2, 3))))
put('npy', 'i64_scalar.npy', npy(np.array(7, dtype=np.int64)))
put('npy', 'be.npy', npy(np.arange(3, dtype='>f4')))
put('npy', 'v2.npy', rd(f'{TD}/unit/npz/v2/u16.npy'))
put('npy', 'bool.npy', npy(np.array([True, False])))
for f in ('plain.npz', 'compressed.npz'):
    put('npz', f, rd(f'{TD}/unit/npz/{f}'))
b = io.BytesIO()
with zipfile.ZipFile(b, 'w', zipfile.ZIP_STORED) as z:
    z.writestr('model.0.experts.1.conv.weight.npy', npy(np.ones((2, 1, 3, 3), np.float32)))
    z.writestr('d.npy', npy(np.arange(3, dtype=np.float64)))
put('npz', 'stored.npz', b.getvalue())

# --- the pipeline: each case's export + the selector byte (case | mode | dispatch) ---
cases = ['example', 'convkinds', 'detector_k1', 'detector_k2', 'dynbatch', 'scripted_if', 'sharedstem', 'single_gn']
for i, c in enumerate(cases):
    m = rd(f'{TD}/{c}/broken.onnx')
    put('pipeline', f'{c}.repair', m + bytes([i]))
    put('pipeline', f'{c}.sparse', m + bytes([i | 32]))
    if c in ('example', 'scripted_if', 'dynbatch'):
        put('pipeline', f'{c}.check', m + bytes([i | 16]))
        put('pipeline', f'{c}.diagnose', m + bytes([i | 8]))
for c in ('example', 'single_gn'):
    put('pipeline', f'{c}.dense', rd(f'{TD}/{c}/dense.onnx') + bytes([cases.index(c)]))

# --- torch.save checkpoints: the reader's fixtures (small ones) and a real one ---
for f in sorted(os.listdir(f'{TD}/pt')):
    if f.endswith('.pt') and os.path.getsize(f'{TD}/pt/{f}') < 30000:
        put('pt', f, rd(f'{TD}/pt/{f}'))
put('pt', 'example.pt', rd(f'{TD}/example/model.pt'))
