#!/usr/bin/python3
"""Writes the malformed inputs of tests/bad/ (committed; rerun after a
change: cd tests/bad && /usr/bin/python3 gen.py). Each is small and broken
in one way; cases.txt says how the tool must refuse it. The repairs start
from testdata/example (model.0: 4 experts, top-2, experts 1 and 2 missing).
The checker's cases (check_*.onnx) come from gen_check.py."""
import json, os, struct, zipfile, io
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

TD = '../../testdata/example'
EX = open(f'{TD}/broken.onnx', 'rb').read()


def w(name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(name, 'wb') as f:
        f.write(data)


def varint(v):
    o = b''
    while v >= 128:
        o += bytes([v & 127 | 128])
        v >>= 7
    return o + bytes([v])


def field(tag, payload):
    return bytes([tag]) + varint(len(payload)) + payload


def tiny(nodes, inputs=('x',), outputs=('y',), inits=(), opset=18):
    g = helper.make_graph(list(nodes), 'g',
                          [helper.make_tensor_value_info(i, TensorProto.FLOAT, [1, 4]) for i in inputs],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 4]) for o in outputs],
                          list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    return m


def bare(name, dims):
    t = TensorProto()
    t.name, t.data_type = name, TensorProto.FLOAT
    t.dims.extend(dims)
    return t


def save(name, m):
    w(name, m.SerializeToString())  # no onnx.checker: these are meant to be wrong


# --- protobuf level -----------------------------------------------------
w('empty.onnx', b'')
w('truncated.onnx', EX[:len(EX) // 2])
w('garbage.onnx', bytes(np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8)))
w('text.onnx', 'ir_version: 8\ngraph {\n  name: "g"\n}\n')
w('wiretype.onnx', b'\x08\x08' + field(0x0a, b'\x01'))           # ir_version (varint) as bytes
w('pastend.onnx', b'\x08\x08\x3a' + varint(1000000) + b'\x0a\x00')  # graph claims 1 MB
w('longvarint.onnx', b'\x08' + b'\xff' * 11)
w('group.onnx', b'\x08\x08\x3b\x3c')                                 # wire type 3
w('fieldzero.onnx', b'\x08\x08\x02\x00')                             # field number 0
w('nograph.onnx', b'\x08\x08')
g = field(0x12, b'g')
for _ in range(100):  # GraphProto.node > NodeProto.attribute > AttributeProto.g
    g = field(0x0a, field(0x2a, field(0x32, g)))
w('deep.onnx', b'\x08\x08' + field(0x3a, g))
w('zip.onnx', open(f'{TD}/model.pt', 'rb').read()[:2048])
w('safetensors.onnx', open(f'{TD}/model.safetensors', 'rb').read()[:4096])
# dims whose product overflows int64, with external data: refused before mapping
t = bare('w', [1 << 40, 1 << 40])
m = tiny([helper.make_node('Relu', ['x'], ['y'])])
t.data_location = TensorProto.EXTERNAL
for k, v in (('location', 'data.bin'), ('offset', '0'), ('length', '16')):
    e = t.external_data.add()
    e.key, e.value = k, v
m.graph.initializer.append(t)
save('dims_overflow.onnx', m)

# --- graph level ----------------------------------------------------------
save('cycle.onnx', tiny([helper.make_node('Relu', ['b'], ['a'], name='r1'),
                         helper.make_node('Add', ['x', 'a'], ['b'], name='r2'),
                         helper.make_node('Identity', ['b'], ['y'], name='out')]))
save('twoproducers.onnx', tiny([helper.make_node('Relu', ['x'], ['y'], name='r1'),
                                helper.make_node('Sigmoid', ['x'], ['y'], name='r2')]))
save('undefined.onnx', tiny([helper.make_node('Add', ['x', 'nope'], ['y'], name='add')]))
init = numpy_helper.from_array(np.zeros((1, 4), np.float32), 'w')
save('twoinits.onnx', tiny([helper.make_node('Add', ['x', 'w'], ['y'])], inits=[init, init]))
m = tiny([helper.make_node('Relu', ['x'], ['y'])])
m.graph.node[0].ClearField('op_type')
save('noop.onnx', m)
m = tiny([helper.make_node('Relu', ['x'], ['y'])])
m.graph.input[0].ClearField('name')
save('noname.onnx', m)
save('arity.onnx', tiny([helper.make_node('Add', ['x'], ['y'], name='half_add')]))
save('topk_one.onnx', tiny([helper.make_node('Constant', [], ['k'], value=numpy_helper.from_array(np.array([2], np.int64))),
                            helper.make_node('TopK', ['x', 'k'], ['y'], name='router_topk')]))
save('domain.onnx', tiny([helper.make_node('Relu', ['x'], ['y'], domain='com.example')]))
m = tiny([helper.make_node('Relu', ['x'], ['y'])])
m.graph.output[0].ClearField('type')
save('untyped.onnx', m)
then = helper.make_graph([helper.make_node('Relu', ['x'], ['t'])], 't', [],
                         [helper.make_tensor_value_info('t', TensorProto.FLOAT, None)])
els = helper.make_graph([helper.make_node('Neg', ['ghost'], ['u'])], 'e', [],
                        [helper.make_tensor_value_info('u', TensorProto.FLOAT, None)])
save('if_undefined.onnx', tiny([helper.make_node('Constant', [], ['c'], value=numpy_helper.from_array(np.array(True))),
                                helper.make_node('If', ['c'], ['y'], then_branch=then, else_branch=els)]))


# --- external data --------------------------------------------------------
def ext(name, loc, offset=None, length=None, dims=(1, 4)):
    t = bare('w', dims)
    t.data_location = TensorProto.EXTERNAL
    kv = [('location', loc)] + ([('offset', str(offset))] if offset is not None else []) + \
         ([('length', str(length))] if length is not None else [])
    for k, v in kv:
        e = t.external_data.add()
        e.key, e.value = k, v
    save(name, tiny([helper.make_node('Add', ['x', 'w'], ['y'])], inits=[t]))


w('data.bin', np.arange(4, dtype=np.float32).tobytes())
ext('ext_absolute.onnx', '/etc/passwd')
ext('ext_dotdot.onnx', '../bad/data.bin')
# data_link.bin -> data.bin is made by tests/bad.sh in its copy of this
# folder: make dist dereferences symlinks.
ext('ext_symlink.onnx', 'data_link.bin')
ext('ext_missing.onnx', 'nosuch.bin')
ext('ext_pastend.onnx', 'data.bin', offset=8, length=16)
ext('ext_offset.onnx', 'data.bin', offset=100)
ext('ext_length.onnx', 'data.bin', offset=0, length=8)
ext('ext_badnum.onnx', 'data.bin', offset='-4')

# --- experts.yaml ---------------------------------------------------------
Y = 'weights: ../../testdata/example/model.safetensors\n'
w('tabs.yaml', Y + 'moe:\n\t- scope: model.0\n\t  experts: 4\n\t  top_k: 2\n')
w('type.yaml', Y + 'moe:\n  - scope: model.0\n    experts: four\n    top_k: 2\n')
w('unknown.yaml', Y + 'moe:\n  - scope: model.0\n    experts: 4\n    top_k: 2\n    expertz: 4\n')
w('k_gt_e.yaml', Y + 'moe:\n  - scope: model.0\n    experts: 4\n    top_k: 5\n')
w('e_zero.yaml', Y + 'moe:\n  - scope: model.0\n    experts: 0\n    top_k: 1\n')
w('k_neg.yaml', Y + 'moe:\n  - scope: model.0\n    experts: 4\n    top_k: -1\n')
w('e_huge.yaml', Y + 'moe:\n  - scope: model.0\n    experts: 99999999999\n    top_k: 2\n')
w('e_big.yaml', Y + 'moe:\n  - scope: model.0\n    experts: 2000000000\n    top_k: 2\n')  # int, but a memory bomb
w('dupscope.yaml', Y + 'moe:\n  - {scope: model.0, experts: 4, top_k: 2}\n  - {scope: model.0, experts: 4, top_k: 2}\n')
w('noweights.yaml', 'weights: nosuch.safetensors\nmoe:\n  - {scope: model.0, experts: 4, top_k: 2}\n')
w('list.yaml', '- scope: model.0\n')
w('syntax.yaml', Y + 'moe: [ {scope: model.0, experts: 4\n')
w('nomoe.yaml', Y)
w('badscope.yaml', Y + 'moe:\n  - {scope: model.9, experts: 4, top_k: 2}\n')
w('pattern.yaml', Y + 'moe:\n  - {scope: model.0, experts: 4, top_k: 2, expert: "experts.x"}\n')
w('twodocs.yaml', Y + 'moe:\n  - {scope: model.0, experts: 4, top_k: 2}\n---\nweights: x\n')


# --- weights ----------------------------------------------------------------
def st(name, tensors, hl_override=None):
    """tensors: name -> (dtype, shape, begin, end); data area of 'size' bytes."""
    hdr = {k: {'dtype': d, 'shape': s, 'data_offsets': [b, e]} for k, (d, s, b, e) in tensors.items()}
    h = json.dumps(hdr).encode()
    size = max([e for (_, _, _, e) in tensors.values()] + [0])
    w(name, struct.pack('<Q', hl_override if hl_override is not None else len(h)) + h + bytes(size))


def st_yaml(name):
    w(name.replace('.safetensors', '.yaml'),
      f'weights: {name}\nmoe:\n  - {{scope: model.0, experts: 4, top_k: 2}}\n')


st('st_overlap.safetensors', {'a': ('F32', [4], 0, 16), 'b': ('F32', [4], 8, 24)})
st('st_range.safetensors', {'a': ('F32', [4], 0, 16)})
b = open('st_range.safetensors', 'rb').read()
w('st_range.safetensors', b[:-8])  # data area 8 bytes short of the offsets
st('st_dtype.safetensors', {'a': ('F16', [4], 0, 16)})
st('st_hlen.safetensors', {'a': ('F32', [4], 0, 16)}, hl_override=1 << 40)
st('st_ovf.safetensors', {'a': ('F32', [1 << 32, 1 << 32, 1 << 32], 0, 16)})
w('st_json.safetensors', struct.pack('<Q', 11) + b'{"a": {"dty')
# The template mismatch: the full example checkpoint, with the missing
# expert 1's first conv weight stored as [4,16,1,1] (same element count,
# so only the shape tells) or with half its input channels.
src = open(f'{TD}/model.safetensors', 'rb').read()
n = struct.unpack('<Q', src[:8])[0]
hdr = json.loads(src[8:8 + n])
data = src[8 + n:]


def reshaped(name, key, shape, frac):
    out, blob = {}, b''
    for k, v in hdr.items():
        if k == '__metadata__':
            continue
        b0, b1 = v['data_offsets']
        chunk, sh = data[b0:b1], v['shape']
        if k == key:
            sh, chunk = shape, chunk[:int(len(chunk) * frac)]
        out[k] = {'dtype': v['dtype'], 'shape': sh, 'data_offsets': [len(blob), len(blob) + len(chunk)]}
        blob += chunk
    h = json.dumps(out).encode()
    w(name, struct.pack('<Q', len(h)) + h + blob)


reshaped('st_shape.safetensors', 'model.0.experts.1.conv.0.weight', [4, 16, 1, 1], 1)
reshaped('st_half.safetensors', 'model.0.experts.1.conv.0.weight', [8, 4, 1, 1], 0.5)
# and one where that key is simply absent
out2 = {k: v for k, v in hdr.items() if k != 'model.0.experts.2.conv.3.weight'}
h = json.dumps(out2).encode()
w('st_nokey.safetensors', struct.pack('<Q', len(h)) + h + data)
# a lying dtype that still fits byte-wise: the conv weight as I32
out3 = dict(hdr)
out3['model.0.experts.1.conv.3.weight'] = dict(hdr['model.0.experts.1.conv.3.weight'], dtype='I32')
h = json.dumps(out3).encode()
w('st_int.safetensors', struct.pack('<Q', len(h)) + h + data)
for f in ('st_overlap', 'st_range', 'st_dtype', 'st_hlen', 'st_ovf', 'st_json', 'st_shape', 'st_half', 'st_nokey', 'st_int'):
    st_yaml(f + '.safetensors')


def npy(a):
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


b = npy(np.ones((8, 8, 1, 1), np.float32))
os.makedirs('npy_short', exist_ok=True)
w('npy_short/model.0.experts.1.conv.0.weight.npy', b[:-64])  # header claims 256 bytes
w('npy_short.yaml', 'weights: npy_short\nmoe:\n  - {scope: model.0, experts: 4, top_k: 2}\n')
w('npz_trunc.npz', open('../../testdata/unit/npz/plain.npz', 'rb').read()[:300])
w('npz_trunc.yaml', 'weights: npz_trunc.npz\nmoe:\n  - {scope: model.0, experts: 4, top_k: 2}\n')
w('pt_garbage.pt', b'PK\x03\x04' + bytes(200))
w('pt_garbage.yaml', 'weights: pt_garbage.pt\nmoe:\n  - {scope: model.0, experts: 4, top_k: 2}\n')
w('wrongext.txt', 'hello\n')
w('wrongext.yaml', 'weights: wrongext.txt\nmoe:\n  - {scope: model.0, experts: 4, top_k: 2}\n')

# A donor model nested 3000 If levels deep: protobuf-c's recursive unpack
# overflowed the stack before the reader's own depth check could run.
g = field(0x12, b'g')
for _ in range(3000):
    g = field(0x0a, field(0x2a, field(0x32, g)))
w('deep_donor.onnx', b'\x08\x08' + field(0x3a, g))
w('deep_donor.yaml', 'weights: deep_donor.onnx\nmoe:\n  - {scope: model.0, experts: 4, top_k: 2}\n')
w('fifo.yaml', 'weights: fifo.safetensors  # a FIFO tests/bad.sh makes\nmoe:\n  - {scope: model.0, experts: 4, top_k: 2}\n')

# One value of a present, non-template expert's folded weight off by 1%:
# every present expert is verified whole against the checkpoint.
m = onnx.load(f'{TD}/broken.onnx')
convs = [n for n in m.graph.node if n.op_type == 'Conv' and '/experts.3/' in n.name]
t = next(i for i in m.graph.initializer if i.name == convs[0].input[1])
a = numpy_helper.to_array(t).copy()
a.flat[a.size // 2] *= 1.01
t.CopyFrom(numpy_helper.from_array(a, t.name))
save('corrupt_expert.onnx', m)

# A weight-quantized export (quantize=8 style: int8 weights behind
# DequantizeLinear): the missing experts have no quantization scales, so
# the repair is refused and says to repair the float export first.
m = onnx.load(f'{TD}/broken.onnx')
inits = {t.name: t for t in m.graph.initializer}
dq, seen = [], {}
for n in m.graph.node:
    if n.op_type == 'Conv' and n.input[1] in inits:
        wn = n.input[1]
        if wn not in seen:
            a = numpy_helper.to_array(inits[wn]).astype(np.float32)
            s = (np.abs(a).reshape(a.shape[0], -1).max(1) / 127 + 1e-12).astype(np.float32)
            q = np.clip(np.round(a / s.reshape(-1, *([1] * (a.ndim - 1)))), -127, 127).astype(np.int8)
            m.graph.initializer.remove(inits[wn])
            m.graph.initializer.extend([numpy_helper.from_array(q, wn + '_q'), numpy_helper.from_array(s, wn + '_s'),
                                        numpy_helper.from_array(np.zeros(len(s), np.int8), wn + '_z')])
            dq.append(helper.make_node('DequantizeLinear', [wn + '_q', wn + '_s', wn + '_z'], [wn + '_dq'],
                                       axis=0, name=wn + '_DequantizeLinear'))
            seen[wn] = wn + '_dq'
        n.input[1] = seen[wn]
nodes = dq + list(m.graph.node)
del m.graph.node[:]
m.graph.node.extend(nodes)
save('quantized.onnx', m)
