#!/usr/bin/python3
"""Writes testdata/pt/: torch.save checkpoints and, for each, the expected
tensors in a form the C tests read without any reader under test:
NAME.ref (one line per tensor: key onnx_dtype ndim dims... byte_offset nbytes)
and NAME.bin (the tensors' bytes, little-endian, contiguous, concatenated).
Run with Debian's python3-torch: /usr/bin/python3 tests/gen/make_pt_fixtures.py
Every file is reproducible except bad_legacy.pt and bad_torchscript.pt, whose
bytes vary between runs (object ids, timestamps) but not their meaning."""
import argparse
import os
import sys
import zipfile

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import ptmods  # noqa: E402

out = os.path.join(here, "..", "..", "testdata", "pt")
os.makedirs(out, exist_ok=True)

ONNX = {torch.float32: 1, torch.uint8: 2, torch.int8: 3, torch.int16: 5, torch.int32: 6,
        torch.int64: 7, torch.bool: 9, torch.float16: 10, torch.float64: 11, torch.bfloat16: 16}


def raw(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def ref(name, tensors):
    """tensors: (key, tensor) in the order the reader is expected to add them."""
    off = 0
    with open(os.path.join(out, name + ".ref"), "w") as m, \
            open(os.path.join(out, name + ".bin"), "wb") as b:
        for k, t in tensors:
            data = raw(t)
            dims = " ".join(str(d) for d in t.shape)
            m.write(f"{k} {ONNX[t.dtype]} {t.dim()} {dims} {off} {len(data)}\n".replace("  ", " "))
            b.write(data)
            off += len(data)


def save(name, obj, expect, **kw):
    torch.save(obj, os.path.join(out, name + ".pt"), **kw)
    ref(name, list(expect.items()))


def net(seed):
    torch.manual_seed(seed)
    m = ptmods.Net()
    for mod in m.modules():  # non-trivial BN statistics
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-1, 1)
            mod.running_var.uniform_(0.5, 2)
            mod.num_batches_tracked.fill_(seed)
    # what detector trainers hang on a model: none of it is a weight
    m.stride = torch.tensor([8.0, 16.0])
    m.names = {0: "person", 1: "car"}
    m.args = argparse.Namespace(imgsz=64, half=True)
    return m


m = net(1)
save("sd_fp32", m.state_dict(), m.state_dict())
h = net(2).half()
save("sd_fp16", h.state_dict(), h.state_dict())
m = net(3)
save("module", m, m.state_dict())
# protocol 4 brings FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE, EMPTY_SET
save("module_p4", m, m.state_dict(), pickle_protocol=4)
a = net(4).half()
save("det_noema", {"model": a, "ema": None, "epoch": 3, "optimizer": None}, a.state_dict())
a, b = net(5).half(), net(6).half()
save("det_ema", {"model": a, "ema": b, "epoch": 7, "optimizer": None,
                 "train_args": {"lr": 0.01, "names": ["a", "b"]},
                 "train_metrics": np.arange(3, dtype=np.float32), "date": "2026-11-29"},
     b.state_dict())
ref("det_ema_model", list(a.state_dict().items()))  # the same file read with key 'model'

base = torch.arange(24, dtype=torch.float32).reshape(4, 6) * 0.5 - 3
nc = {"base": base, "t": base.t(), "rows": base[1:3], "col": base[:, 2],
      "step": base[::2, 1::3], "expand": torch.tensor([1.5, -2.0]).expand(3, 2),
      "sub": base[2].as_subclass(ptmods.Tagged), "param": torch.nn.Parameter(base[3, 1:4])}
save("noncontig", nc, nc)

torch.manual_seed(9)
bf = {"w": torch.randn(3, 5).to(torch.bfloat16), "wt": torch.randn(4, 3).to(torch.bfloat16).t(),
      "scalar": torch.tensor(2.5, dtype=torch.bfloat16), "empty": torch.zeros(0, 3)}
save("bf16", bf, bf)


def stamp(name):
    """A fixed date, so regenerating leaves unchanged files unchanged."""
    return zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))


def rewrite(src, dst, edit, extra=None):
    """Copies a checkpoint's members, letting edit(name, data) change them
    (None drops one) and adding the members in extra."""
    with zipfile.ZipFile(os.path.join(out, src)) as zi, \
            zipfile.ZipFile(os.path.join(out, dst), "w", zipfile.ZIP_STORED) as zo:
        for i in zi.infolist():
            d = edit(i.filename, zi.read(i.filename))
            if d is not None:
                zo.writestr(stamp(i.filename), d)
        for n, d in (extra or {}).items():
            zo.writestr(stamp(n), d)


# Malformed files for the error tests.
rewrite("sd_fp32.pt", "bad_short_storage.pt",
        lambda n, d: d[:len(d) // 2] if n.endswith("/data/0") else d)
# torch 1.13 writes no byteorder member (little-endian is implied); 2.x does.
rewrite("sd_fp32.pt", "bad_bigendian.pt", lambda n, d: d, {"sd_fp32/byteorder": b"big"})
rewrite("sd_fp32.pt", "little.pt", lambda n, d: d, {"sd_fp32/byteorder": b"little"})
rewrite("sd_fp32.pt", "bad_nopickle.pt",
        lambda n, d: None if n.endswith("/data.pkl") else d)
torch.save({"w": torch.ones(2)}, os.path.join(out, "bad_legacy.pt"),
           _use_new_zipfile_serialization=False)


def node(mods, params=None):
    n = ptmods.Node()
    n._parameters = params or {}
    n._buffers = {}
    n._modules = mods
    return n


cyc = node({})
cyc._modules["again"] = cyc
torch.save(cyc, os.path.join(out, "bad_cyclic.pt"))
wide = node({}, {"w": torch.ones(1)})
for _ in range(40):  # 2**40 module paths through shared children
    wide = node({"a": wide, "b": wide})
torch.save(wide, os.path.join(out, "bad_wide.pt"))
# A 9-dim tensor is refused only when it is among the weights asked for.
nine = torch.zeros([1] * 9)
save("dims9", {"model": {"w": base[0]}, "optimizer": {"big": nine, "p": torch.nn.Parameter(nine)}},
     {"w": base[0]})
torch.save({"w": base, "big": nine}, os.path.join(out, "bad_dims9.pt"))
torch.save({"q": torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)},
           os.path.join(out, "bad_qint.pt"))
torch.jit.script(torch.nn.Linear(2, 2)).save(os.path.join(out, "bad_torchscript.pt"))
