#!/usr/bin/python3
"""Writes the hostile inputs of tests/bad/ (second round; committed, rerun
after a change: cd tests/bad && /usr/bin/python3 hostile.py). Each is
small and hostile in one way: a decompression or allocation bomb, depth,
a hang, a forged archive, a tag the YAML reader must not drop, bytes a
message must not echo. cases.txt says how the tool must answer each.

Written from the formats' specifications only (zip, pickle opcodes,
safetensors, ONNX protobuf through python3-onnx): no torch, no reader of
the tool. The one kind too large to commit, a 150 000-node chain, is
written at test time by tests/mkchain.c."""
import io
import json
import struct
import zipfile
import zlib

import numpy as np
from onnx import TensorProto, helper, numpy_helper

DATE = (1980, 1, 1, 0, 0, 0)  # fixed, so regenerating changes nothing


def w(name, data):
    with open(name, 'wb') as f:
        f.write(data.encode() if isinstance(data, str) else data)


def yaml_for(weights, name=None):
    w(name or weights.rsplit('.', 1)[0] + '.yaml',
      f'weights: {weights}\nmoe:\n  - {{scope: model.0, experts: 4, top_k: 2}}\n')


# --- zip, by hand where the records must lie --------------------------------
def local(name, data, method=0, raw=None):
    """One local record: header, name, data (raw: the bytes stored)."""
    stored = raw if raw is not None else data
    crc = zlib.crc32(data) & 0xffffffff
    n = name.encode()
    return struct.pack('<IHHHHHIIIHH', 0x04034b50, 20, 0, method, 0, 0x21, crc,
                       len(stored), len(data), len(n), 0) + n + stored


def central(name, data, off, method=0, raw=None, usize=None):
    stored = raw if raw is not None else data
    crc = zlib.crc32(data) & 0xffffffff
    n = name.encode()
    return struct.pack('<IHHHHHHIIIHHHHHII', 0x02014b50, 20, 20, 0, method, 0, 0x21, crc,
                       len(stored), usize if usize is not None else len(data), len(n), 0, 0, 0, 0, 0,
                       off) + n


def end(entries, cd_off, cd):
    return cd + struct.pack('<IHHHHIIH', 0x06054b50, 0, 0, entries, entries, len(cd), cd_off, 0)


def zipped(members):
    """members: (name, bytes, deflate?) through Python's zipfile, reproducibly."""
    b = io.BytesIO()
    with zipfile.ZipFile(b, 'w') as z:
        for name, data, defl in members:
            i = zipfile.ZipInfo(name, date_time=DATE)
            i.compress_type = zipfile.ZIP_DEFLATED if defl else zipfile.ZIP_STORED
            z.writestr(i, data)
    return b.getvalue()


def npy(a):
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


# --- pickle opcodes (protocol 2), as torch.save writes a state_dict ----------
def S(s):
    b = s.encode()
    return b'X' + struct.pack('<I', len(b)) + b


def L(n):
    b = n.to_bytes((n.bit_length() + 8) // 8 or 1, 'little', signed=True)
    return b'\x8a' + bytes([len(b)]) + b


def G(mod, name):
    return b'c' + mod.encode() + b'\n' + name.encode() + b'\n'


def tup(*items):
    return b'(' + b''.join(items) + b't'


def tensor(key, numel, size, stride, offset=0):
    storage = tup(S('storage'), G('torch', 'FloatStorage'), S(key), S('cpu'), L(numel)) + b'Q'
    args = tup(storage, L(offset), tup(*map(L, size)), tup(*map(L, stride)), b'\x89',
               G('collections', 'OrderedDict') + b')R')
    return G('torch._utils', '_rebuild_tensor_v2') + args + b'R'


def state_dict(tensors):
    return b'\x80\x02}(' + b''.join(S(k) + t for k, t in tensors) + b'u.'


def pt(name, pkl, storages=(), deflate=()):
    w(name, zipped([('arch/data.pkl', pkl, False)] +
                   [(f'arch/data/{k}', v, k in deflate) for k, v in storages]))
    yaml_for(name)


# --- memory: decompression and allocation bombs -------------------------------
# A storage of 48 MiB of zeros, deflated to a few KB: honest, but over the
# --max-memory 32M the case passes; refused before it is inflated.
pt('bomb_budget.pt', state_dict([('w', tensor('0', 12 << 20, [12 << 20], [1]))]),
   [('0', bytes(48 << 20))], deflate={'0'})

# An .npz member declaring 4 GB inflated from a few hundred bytes: past
# what deflate can produce, refused from the directory alone.
a = npy(np.zeros(1000, np.float32))
raw = zlib.compress(a, 9)[2:-4]  # raw deflate, as zip stores it
usize = 0xf0000000
rec = local('a.npy', a, 8, raw)
rec = rec[:22] + struct.pack('<I', usize) + rec[26:]
w('bomb_ratio.npz', rec + end(1, len(rec), central('a.npy', a, 0, 8, raw, usize)))
yaml_for('bomb_ratio.npz')

# Overlapping members: b.npy's whole record sits inside a.npy's data, so
# the same bytes count twice (Fifield's construction multiplies this).
for ext in ('npz', 'pt'):
    na, nb = ('a.npy', 'b.npy') if ext == 'npz' else ('arch/data/0', 'arch/data/1')
    inner = local(nb, npy(np.ones(4, np.float32)))
    outer_data = inner + npy(np.zeros(2, np.float32))
    outer = local(na, outer_data)
    off_b = 30 + len(na.encode())
    cd = central(na, outer_data, 0) + central(nb, npy(np.ones(4, np.float32)), off_b)
    members = outer
    if ext == 'pt':  # a pickle after them, so the archive is otherwise complete
        pkl = state_dict([('w', tensor('0', 1, [1], [1]))])
        pr = local('arch/data.pkl', pkl)
        cd += central('arch/data.pkl', pkl, len(members))
        members += pr
    w(f'overlap.{ext}', members + end(3 if ext == 'pt' else 2, len(members), cd))
    yaml_for(f'overlap.{ext}', 'overlap.yaml' if ext == 'pt' else 'overlap_npz.yaml')

# A pickle that builds ever-larger objects: a list of 1000 (key, None)
# pairs, memoised, then OrderedDict(list) 10 000 times: 7 bytes of stream
# for each 1000-entry dict, 100 KB of memory apiece.
pairs = b']q\x00(' + b''.join(tup(S(f'k{i}'), b'N') for i in range(1000)) + b'e0'
grow = pairs + G('collections', 'OrderedDict') + b'q\x010' + b'h\x01h\x00\x85R0' * 10000
pt('grow.pt', b'\x80\x02' + grow + b'N.')

# Tensor views that repeat their storage: 2^20 x 2^21 elements, stride 0,
# over one float (8 TiB dense); and 100 transposed views of one 1 MiB
# storage, deflated (honest views whose copies add up to 100 MiB).
pt('stride0.pt', state_dict([('w', tensor('0', 1, [1 << 20, 1 << 21], [0, 0]))]), [('0', bytes(4))])
pt('views.pt', state_dict([(f'v{i}', tensor('0', 1 << 18, [512, 512], [1, 512])) for i in range(100)]),
   [('0', bytes(1 << 20))], deflate={'0'})

# A safetensors header of 100 MB (only its length is stored: refused
# before reading), and one of 120 KB of tiny values (40 bytes of tree
# per byte to parse).
w('st_big.safetensors', struct.pack('<Q', 100_000_000) + b'{"a":{"dtype":"F32"}}')
yaml_for('st_big.safetensors')
h = b'{"a":[' + b','.join([b'0'] * 60_000) + b']}'
w('st_vals.safetensors', struct.pack('<Q', len(h)) + h)
yaml_for('st_vals.safetensors')


# --- depth and hangs ------------------------------------------------------------
def model(nodes, inputs, outputs, inits=(), name='g'):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 18)])
    m.ir_version = 8
    return m.SerializeToString()


def vi(n, shape=None):
    return helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)


# The 150 000-node chains (4 MB each) are made by tests/mkchain.c at test time.

# A shape guard If(Equal(Gather(Shape(t), 0), 1)) on t = Unsqueeze(v60),
# where each v reads the one before twice (Gather(v, v)): a rank question
# that walks both operands costs 2^60 steps.
nodes = [helper.make_node('Gather', [f'v{i}' if i else 'x'] * 2, [f'v{i + 1}']) for i in range(60)]
nodes += [helper.make_node('Unsqueeze', ['v60', 'ax'], ['t']),
          helper.make_node('Shape', ['t'], ['s']),
          helper.make_node('Constant', [], ['d'], value=numpy_helper.from_array(np.array(0, np.int64))),
          helper.make_node('Gather', ['s', 'd'], ['g']),
          helper.make_node('Constant', [], ['one'], value=numpy_helper.from_array(np.array(1, np.int64))),
          helper.make_node('Equal', ['g', 'one'], ['c'])]
# int64 throughout: Gather's indices are integers, so the model is valid
# and only the cost of its shape questions is on trial.
i64 = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, None)
th = helper.make_graph([helper.make_node('Squeeze', ['t', 'ax'], ['o1'])], 'th', [], [i64('o1')])
el = helper.make_graph([helper.make_node('Identity', ['t'], ['o2'])], 'el', [], [i64('o2')])
nodes.append(helper.make_node('If', ['c'], ['y'], then_branch=th, else_branch=el, name='guard'))
w('rank_blowup.onnx', model(nodes, [i64('x')], [i64('y')],
                            [numpy_helper.from_array(np.array([0], np.int64), 'ax')]))

# YAML nested 30 000 levels deep (libyaml's scanner is quadratic in depth).
w('deep.yaml', 'weights: ../../testdata/example/model.safetensors\nmoe: ' + '[' * 30000 + ']' * 30000 + '\n')

# --- accepted today, must be refused ------------------------------------------
# A checkpoint whose local header names another member than the central
# directory: readers trusting one or the other see different files.
b = bytearray(zipped([('arch/data.pkl', state_dict([]), False)]))
at = b.index(b'arch/data.pkl')  # the local header's copy comes first
b[at:at + 13] = b'arch/data.pk_'
w('localhdr.pt', bytes(b))
yaml_for('localhdr.pt')
w('pytag.yaml', 'weights: !!python/object/apply:os.system ["id"]\n'
                'moe:\n  - {scope: model.0, experts: 4, top_k: 2}\n')

# --- undefined behaviour ----------------------------------------------------------
# An initializer with an empty raw_data (memcpy from NULL when written).
t = TensorProto()
t.name, t.data_type, t.raw_data = 'e', TensorProto.FLOAT, b''
t.dims.extend([0])
w('empty_raw.onnx', model([helper.make_node('Relu', ['x'], ['y'])], [vi('x', [1, 4])], [vi('y', [1, 4])], [t]))

# --- messages ---------------------------------------------------------------------
# A tensor name of terminal controls (clear screen, window title, BEL, a
# C1 CSI, U+2028, a bidi override), defined twice so the error names it.
evil = 'w\x1b[2J\x1b]0;owned\x07\x9b1m\u2028\u202e'
ini = numpy_helper.from_array(np.zeros((1, 4), np.float32), evil)
w('evil_name.onnx', model([helper.make_node('Add', ['x', evil], ['y'])], [vi('x', [1, 4])], [vi('y', [1, 4])],
                          [ini, ini]))
# Weights named through a symlink to another file (made by tests/bad.sh):
# its first 8 bytes must not come back as a "header length".
w('secret.txt', 'Sup3rS3cret-token\n')
yaml_for('link.safetensors')
# experts.yaml as a FIFO, and a model reading external data from a FIFO
# (both made by tests/bad.sh).
t = TensorProto()
t.name, t.data_type, t.data_location = 'w', TensorProto.FLOAT, TensorProto.EXTERNAL
t.dims.extend([1, 4])
e = t.external_data.add()
e.key, e.value = 'location', 'fifo.bin'
w('ext_fifo.onnx', model([helper.make_node('Add', ['x', 'w'], ['y'])], [vi('x', [1, 4])], [vi('y', [1, 4])], [t]))
