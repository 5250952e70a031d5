#!/usr/bin/python3
"""Large traced MoE exports for the benchmark, written directly with onnx.helper.

The graph copies, node for node, what torch.onnx.export's tracer emits for
testdata/example (opset 17): a router (AveragePool, Conv+SiLU, Conv,
ReduceMean, Cast, Softmax, TopK, renormalisation), then per expert that the
dummy routed to: Equal -> NonZero -> Transpose -> Split -> Squeeze, Gather
of the rows, the expert's Conv/SiLU/Conv (BatchNorm folded into weights
named onnx::Conv_N), the weight gathered through Shape/Flatten/Reshape, Mul,
Expand, ScatterElements (axis 0) into zeros, Add chain.  Layers chain: layer
l reads layer l-1's routed sum.  The checkpoint (safetensors, written by
hand) holds every expert with its BatchNorm statistics, so the tool's
Conv+BN folding check runs as on real exports.

    gen.py OUTDIR --layers 32 --channels 256 --experts 16 --top-k 2

writes OUTDIR/broken.onnx, model.safetensors, experts.yaml (and with
--external, broken.onnx.data; with --ref N, in_i.npy/out_i.npy computed in
NumPy from the dense mixture, for ONNX Runtime checks of small models; with
--dense, dense.onnx: what the exporter gives for the module's dense path,
every expert on the whole input, GatherElements picking the top-k).
--batch B exports at a static batch of B.  --expert mixed gives experts the
ops a sparse dispatch must restack beyond Conv and SiLU: Conv -> unfolded
BatchNormalization -> Clip(0, 6) -> MaxPool 3x3 -> Conv -> per-channel
scale (a checkpoint tensor) -> residual Add of the expert's input; --expert
ghost a GhostNet module: Conv -> SiLU, a second Conv -> SiLU on that,
both concatenated on channels, sliced to width, Conv.
Needs Debian's python3-onnx and python3-numpy only.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

EPS = 1e-5
F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


class Ckpt:
	"""A safetensors file written in two passes: shapes first, then bytes,
	so a multi-GiB checkpoint never sits in memory."""

	def __init__(self):
		self.items = []  # (name, dtype, shape, fill)

	def add(self, name, shape, fill, dtype="F32"):
		self.items.append((name, dtype, tuple(shape), fill))

	def write(self, path):
		header, off = {"__metadata__": {"format": "pt"}}, 0
		for name, dt, shape, _ in self.items:
			n = int(np.prod(shape)) * (8 if dt == "I64" else 4)
			header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
			off += n
		h = json.dumps(header, separators=(",", ":")).encode()
		h += b" " * (-len(h) % 8)
		with open(path, "wb") as f:
			f.write(struct.pack("<Q", len(h)))
			f.write(h)
			for _, _, _, fill in self.items:
				f.write(np.ascontiguousarray(fill()).tobytes())


class Gen:
	def __init__(self, a, dense=False):
		self.a = a
		self.dense = dense  # the dense export: all experts, GatherElements dispatch
		self.nodes, self.inits = [], []
		self.ckpt = Ckpt()
		self.onnx_id = 100  # onnx::Conv_N numbering, as the exporter's
		self.data = None    # external data file, when --external
		self.dpos = 0
		self.ref = []       # per layer: what the NumPy reference needs

	# --- graph helpers -----------------------------------------------------

	def node(self, op, name, ins, nout=1, **attrs):
		outs = [f"{name}_output_{i}" for i in range(nout)]
		self.nodes.append(helper.make_node(op, ins, outs, name=name, **attrs))
		return outs if nout > 1 else outs[0]

	def const(self, name, value, dtype=np.int64):
		arr = np.array(value, dtype=dtype)
		t = onnx.numpy_helper.from_array(arr)
		return self.node("Constant", name, [], value=t)

	def conv_init(self, arr):
		name = f"onnx::Conv_{self.onnx_id}"
		self.onnx_id += 1
		arr = np.ascontiguousarray(arr, dtype=np.float32)
		if self.data is not None and arr.nbytes >= 1024:
			t = TensorProto(name=name, data_type=F32, dims=arr.shape)
			t.data_location = TensorProto.EXTERNAL
			for k, v in (("location", self.data_name), ("offset", str(self.dpos)), ("length", str(arr.nbytes))):
				e = t.external_data.add()
				e.key, e.value = k, v
			self.data.write(arr.tobytes())
			self.dpos += arr.nbytes
		else:
			t = helper.make_tensor(name, F32, arr.shape, arr.tobytes(), raw=True)
		self.inits.append(t)
		return name

	# --- weights -----------------------------------------------------------

	def conv_bn(self, key_w, key_bn, cout, cin, k, seed):
		"""Registers conv weight + BN statistics in the checkpoint; returns a
		function giving the folded (W, b) when the export needs them."""
		def w():
			r = np.random.default_rng(seed)
			return (r.standard_normal((cout, cin, k, k), dtype=np.float32) / np.sqrt(cin * k * k)).astype(np.float32)

		def bn():
			r = np.random.default_rng(seed + 1)
			g = r.uniform(0.5, 1.5, cout).astype(np.float32)
			b = (0.1 * r.standard_normal(cout)).astype(np.float32)
			mu = (0.1 * r.standard_normal(cout)).astype(np.float32)
			var = r.uniform(0.5, 1.5, cout).astype(np.float32)
			return g, b, mu, var

		self.ckpt.add(key_w, (cout, cin, k, k), w)
		for i, part in enumerate(("weight", "bias", "running_mean", "running_var")):
			self.ckpt.add(f"{key_bn}.{part}", (cout,), lambda i=i: bn()[i])
		self.ckpt.add(f"{key_bn}.num_batches_tracked", (), lambda: np.array(0, np.int64), "I64")

		def folded():
			g, b, mu, var = bn()
			sc = g / np.sqrt(var + EPS)
			return (w() * sc[:, None, None, None]).astype(np.float32), (b - mu * sc).astype(np.float32)
		return folded

	# --- one layer ---------------------------------------------------------

	def layer(self, l, x):
		a = self.a
		B, C, E, k, H, hw = a.batch, a.channels, a.experts, a.top_k, a.channels * a.hidden, a.hw
		s = f"/model/model.{l}"
		seed = 1000 * l
		rng = np.random.default_rng(a.seed + l)
		missing = set(rng.choice(E, a.missing, replace=False).tolist()) if a.missing else set()
		present = [i for i in range(E) if i not in missing]
		ref = {"present": present, "experts": []}

		# Router.
		r0 = self.conv_bn(f"model.{l}.router.net.0.weight", f"model.{l}.router.net.1", 8, C, 3, seed + 1)
		r3 = self.conv_bn(f"model.{l}.router.net.3.weight", f"model.{l}.router.net.4", E, 8, 1, seed + 3)
		w0, b0 = r0()
		w3, b3 = r3()
		ref["router"] = (w0, b0, w3, b3)
		ap = self.node("AveragePool", f"{s}/router/AveragePool", [x], ceil_mode=0, kernel_shape=[2, 2],
			       pads=[0, 0, 0, 0], strides=[2, 2])
		c0 = self.node("Conv", f"{s}/router/net/net.0/Conv", [ap, self.conv_init(w0), self.conv_init(b0)],
			       dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
		sg = self.node("Sigmoid", f"{s}/router/net/net.2/Sigmoid", [c0])
		m0 = self.node("Mul", f"{s}/router/net/net.2/Mul", [c0, sg])
		c3 = self.node("Conv", f"{s}/router/net/net.3/Conv", [m0, self.conv_init(w3), self.conv_init(b3)],
			       dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1])
		rm = self.node("ReduceMean", f"{s}/router/ReduceMean", [c3], axes=[2, 3], keepdims=0)
		ca = self.node("Cast", f"{s}/router/Cast", [rm], to=F32)
		sm = self.node("Softmax", f"{s}/router/Softmax", [ca], axis=1)
		kk = self.const(f"{s}/router/Constant_1", [k])
		tv, ti = self.node("TopK", f"{s}/router/TopK", [sm, kk], nout=2, axis=1, largest=1, sorted=1)
		ax = self.const(f"{s}/router/Constant_3", [1])
		rs = self.node("ReduceSum", f"{s}/router/ReduceSum", [tv, ax], keepdims=1)
		ep = self.const(f"{s}/router/Constant_2", 1e-9, np.float32)
		ad = self.node("Add", f"{s}/router/Add", [rs, ep])
		wts = self.node("Div", f"{s}/router/Div", [tv, ad])

		# Experts: every one in the checkpoint, the routed ones in the graph.
		cn = [0]

		def c(v, dtype=np.int64):
			name = f"{s}/Constant" + (f"_{cn[0]}" if cn[0] else "")
			cn[0] += 1
			return self.const(name, v, dtype)

		nn = {}

		def nm(op):
			i = nn.get(op, 0)
			nn[op] = i + 1
			return f"{s}/{op}" + (f"_{i}" if i else "")

		folds = {}
		for i in range(E):
			p = f"model.{l}.experts.{i}"
			folds[i] = self.expert_weights(p, C, H, seed + 10 + 4 * i)
		if a.ref:
			ref["experts"] = [folds[i]() for i in range(E)]
		self.ref.append(ref)
		if self.dense:
			return self.dense_dispatch(l, s, x, ti, wts, folds, c, nm)

		acc = None
		for j, i in enumerate(present):
			eq = self.node("Equal", nm("Equal"), [ti, c(i)])
			nz = self.node("NonZero", nm("NonZero"), [eq])
			tr = self.node("Transpose", nm("Transpose"), [nz], perm=[1, 0])
			sp = self.node("Split", nm("Split"), [tr, c([1, 1])], nout=2, axis=1)
			rows = self.node("Squeeze", nm("Squeeze"), [sp[0], c([1])])
			slot = self.node("Squeeze", nm("Squeeze"), [sp[1], c([1])])
			g = self.node("Gather", nm("Gather"), [x, rows], axis=0)
			y = self.expert(f"{s}/experts.{i}", f"model.{l}.experts.{i}", g, folds[i], c)
			sh = self.node("Shape", nm("Shape"), [wts])
			kd = self.node("Gather", nm("Gather"), [sh, c([1])], axis=0)
			fl = self.node("Flatten", nm("Flatten"), [wts], axis=2)
			mu = self.node("Mul", nm("Mul"), [rows, kd])
			ix = self.node("Add", nm("Add"), [slot, mu])
			gw = self.node("Gather", nm("Gather"), [fl, ix], axis=0)
			sh1 = self.node("Shape", nm("Shape"), [ix])
			rw = self.node("Reshape", nm("Reshape"), [gw, c([-1])], allowzero=0)
			cc = self.node("Concat", nm("Concat"), [sh1], axis=0)
			rw = self.node("Reshape", nm("Reshape"), [rw, cc], allowzero=0)
			rw = self.node("Reshape", nm("Reshape"), [rw, c([-1, 1, 1, 1])], allowzero=0)
			wy = self.node("Mul", nm("Mul"), [y, rw])
			# Scatter back into zeros of the input's shape, then accumulate.
			if acc is None:
				shape = c([1, C, hw, hw])
			else:
				sl = self.node("Slice", nm("Slice"), [acc, c([0, 0, 0, 0]), c([1] + [2**63 - 1] * 3), c([0, 1, 2, 3])])
				shape = self.node("Shape", nm("Shape"), [sl])
			ex = self.node("Expand", nm("Expand"), [wy, shape])
			u = rows
			for d in (1, 2, 3):
				u = self.node("Unsqueeze", nm("Unsqueeze"), [u, c([d])])
			ex1 = self.node("Expand", nm("Expand"), [u, self.node("Shape", nm("Shape"), [ex])])
			z = c(np.zeros((B, C, hw, hw), np.float32), np.float32)
			sc = self.node("ScatterElements", nm("ScatterElements"), [z, ex1, ex], axis=0)
			if acc is None:
				acc = self.node("Add", nm("Add"), [c(np.zeros((B, C, hw, hw), np.float32), np.float32), sc])
			else:
				acc = self.node("Add", nm("Add"), [acc, sc])
		return acc

	def expert_weights(self, p, C, H, seed):
		"""Registers expert p's tensors in the checkpoint; returns a function
		giving what the export and the reference need of them."""
		if self.a.expert == "ghost":
			# GhostNet's module: primary and cheap halves concatenated, cut to width.
			f0 = self.conv_bn(f"{p}.conv.0.weight", f"{p}.conv.1", H // 2, C, 1, seed)
			f3 = self.conv_bn(f"{p}.conv.3.weight", f"{p}.conv.4", H // 2, H // 2, 1, seed + 2)
			f6 = self.conv_bn(f"{p}.conv.6.weight", f"{p}.conv.7", C, H - 2, 1, 300007 + seed)
			return lambda: f0() + f3() + f6()
		f0 = self.conv_bn(f"{p}.conv.0.weight", f"{p}.conv.1", H, C, 1, seed)
		f3 = self.conv_bn(f"{p}.conv.3.weight", f"{p}.conv.4", C, H, 1, seed + 2)
		if self.a.expert == "conv":
			return lambda: f0() + f3()
		# Unfolded BatchNormalization after the first Conv, and a layer scale.
		def bn():
			r = np.random.default_rng(100003 + seed)
			return (r.uniform(0.5, 1.5, H).astype(np.float32), (0.1 * r.standard_normal(H)).astype(np.float32),
				(0.1 * r.standard_normal(H)).astype(np.float32), r.uniform(0.5, 1.5, H).astype(np.float32))

		def gamma():
			return np.random.default_rng(200003 + seed).uniform(0.5, 1.5, (C, 1, 1)).astype(np.float32)
		for i, part in enumerate(("weight", "bias", "running_mean", "running_var")):
			self.ckpt.add(f"{p}.norm.{part}", (H,), lambda i=i: bn()[i])
		self.ckpt.add(f"{p}.gamma", (C, 1, 1), gamma)
		return lambda: f0() + f3() + bn() + (gamma(),)

	def expert(self, e, p, x, fold, c):
		"""One expert's nodes on x, named under e as the exporter names them."""
		t = fold()
		(w0, b0, w3, b3) = t[:4]
		y = self.node("Conv", f"{e}/conv/conv.0/Conv", [x, self.conv_init(w0), self.conv_init(b0)],
			      dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1])
		if self.a.expert == "ghost":
			y = self.node("Mul", f"{e}/conv/conv.2/Mul", [y, self.node("Sigmoid", f"{e}/conv/conv.2/Sigmoid", [y])])
			z = self.node("Conv", f"{e}/conv/conv.3/Conv", [y, self.conv_init(w3), self.conv_init(b3)],
				      dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1])
			z = self.node("Mul", f"{e}/conv/conv.5/Mul", [z, self.node("Sigmoid", f"{e}/conv/conv.5/Sigmoid", [z])])
			y = self.node("Concat", f"{e}/Concat", [y, z], axis=1)
			h = self.a.channels * self.a.hidden
			y = self.node("Slice", f"{e}/Slice", [y, c([0]), c([h - 2]), c([1]), c([1])])
			w6, b6 = t[4:6]
			return self.node("Conv", f"{e}/conv/conv.6/Conv", [y, self.conv_init(w6), self.conv_init(b6)],
					 dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1])
		if self.a.expert == "conv":
			sg = self.node("Sigmoid", f"{e}/conv/conv.2/Sigmoid", [y])
			y = self.node("Mul", f"{e}/conv/conv.2/Mul", [y, sg])
			return self.node("Conv", f"{e}/conv/conv.3/Conv", [y, self.conv_init(w3), self.conv_init(b3)],
					 dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1])
		g, b, mu, var = t[4:8]
		bn = [self.named_init(f"{p}.norm.{k}", v) for k, v in
		      (("weight", g), ("bias", b), ("running_mean", mu), ("running_var", var))]
		y = self.node("BatchNormalization", f"{e}/norm/BatchNormalization", [y] + bn, epsilon=EPS, momentum=0.9)
		y = self.node("Clip", f"{e}/act/Clip", [y, c(0.0, np.float32), c(6.0, np.float32)])
		y = self.node("MaxPool", f"{e}/pool/MaxPool", [y], ceil_mode=0, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
			      strides=[1, 1])
		y = self.node("Conv", f"{e}/conv/conv.3/Conv", [y, self.conv_init(w3), self.conv_init(b3)],
			      dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1])
		y = self.node("Mul", f"{e}/Mul", [y, self.named_init(f"{p}.gamma", t[8])])
		return self.node("Add", f"{e}/Add", [y, x])

	def named_init(self, name, arr):
		"""An initializer named like its checkpoint key, as unfolded parameters are."""
		self.inits.append(helper.make_tensor(name, F32, arr.shape, np.ascontiguousarray(arr, np.float32).tobytes(), raw=True))
		return name

	def dense_dispatch(self, l, s, x, ti, wts, folds, c, nm):
		"""The dense path as the exporter traces it: every expert on x,
		stacked on axis 1, GatherElements of each slot's expert, weighted sum."""
		a = self.a
		B, C, hw = a.batch, a.channels, a.hw
		u = [self.node("Unsqueeze", nm("Unsqueeze"), [self.expert(f"{s}/experts.{i}", f"model.{l}.experts.{i}", x, folds[i], c),
							      c([1])]) for i in sorted(folds)]
		st = self.node("Concat", nm("Concat"), u, axis=1)
		acc = None
		for j in range(a.top_k):
			ij = self.node("Gather", nm("Gather"), [ti, c(j)], axis=1)
			ij = self.node("Reshape", nm("Reshape"), [ij, c([-1, 1, 1, 1, 1])], allowzero=0)
			ij = self.node("Expand", nm("Expand"), [ij, c([B, 1, C, hw, hw])])
			ge = self.node("GatherElements", nm("GatherElements"), [st, ij], axis=1)
			sq = self.node("Squeeze", nm("Squeeze"), [ge, c([1])])
			wj = self.node("Gather", nm("Gather"), [wts, c(j)], axis=1)
			wj = self.node("Reshape", nm("Reshape"), [wj, c([-1, 1, 1, 1])], allowzero=0)
			p = self.node("Mul", nm("Mul"), [sq, wj])
			acc = p if acc is None else self.node("Add", nm("Add"), [acc, p])
		return acc

	def graph(self, name):
		a = self.a
		x = "images"
		for l in range(a.layers):
			x = self.layer(l, x)
		self.nodes[-1].output[0] = "output0"
		shape = [a.batch, a.channels, a.hw, a.hw]
		g = helper.make_graph(self.nodes, "main_graph", [helper.make_tensor_value_info("images", F32, shape)],
				      [helper.make_tensor_value_info("output0", F32, shape)], self.inits)
		m = helper.make_model(g, producer_name="pytorch", producer_version="1.13.0",
				      opset_imports=[helper.make_opsetid("", 17)])
		m.ir_version = 8
		with open(os.path.join(a.outdir, name), "wb") as f:
			f.write(m.SerializeToString())

	def build(self):
		a = self.a
		os.makedirs(a.outdir, exist_ok=True)
		if a.external:
			self.data_name = "broken.onnx.data"
			self.data = open(os.path.join(a.outdir, self.data_name), "wb")
		self.graph("broken.onnx")
		if self.data:
			self.data.close()
		self.ckpt.write(os.path.join(a.outdir, "model.safetensors"))
		with open(os.path.join(a.outdir, "experts.yaml"), "w") as f:
			f.write("weights: model.safetensors\nmoe:\n")
			for l in range(a.layers):
				f.write(f"  - scope: model.{l}\n    experts: {a.experts}\n    top_k: {a.top_k}\n")
		for i in range(a.ref):
			self.reference(i)
		if a.dense:
			Gen(a, dense=True).graph("dense.onnx")

	# --- NumPy reference: the dense mixture every expert would give ----------

	def reference(self, i):
		a = self.a
		r = np.random.default_rng(a.seed + 7919 * (i + 1))
		x = r.standard_normal((a.batch, a.channels, a.hw, a.hw)).astype(np.float32)
		np.save(os.path.join(a.outdir, f"in_{i}.npy"), x)
		y = x.astype(np.float64)
		for ref in self.ref:
			y = self.ref_layer(ref, y)
		np.save(os.path.join(a.outdir, f"out_{i}.npy"), y.astype(np.float32))

	@staticmethod
	def conv1(x, w, b):
		return np.einsum("oi,bihw->bohw", w[:, :, 0, 0].astype(np.float64), x) + b[None, :, None, None]

	def ref_layer(self, ref, x):
		w0, b0, w3, b3 = ref["router"]
		B, C, h, w = x.shape
		p = x.reshape(B, C, h // 2, 2, w // 2, 2).mean(axis=(3, 5))
		pp = np.pad(p, ((0, 0), (0, 0), (1, 1), (1, 1)))
		y = np.zeros((B, w0.shape[0]) + p.shape[2:])
		for dy in range(3):
			for dx in range(3):
				y += np.einsum("oi,bihw->bohw", w0[:, :, dy, dx].astype(np.float64),
					       pp[:, :, dy:dy + p.shape[2], dx:dx + p.shape[3]])
		y += b0[None, :, None, None]
		y = y / (1 + np.exp(-y))
		lg = self.conv1(y, w3, b3).mean(axis=(2, 3))
		pr = np.exp(lg - lg.max(axis=1, keepdims=True))
		pr /= pr.sum(axis=1, keepdims=True)
		idx = np.argsort(-pr, axis=1, kind="stable")[:, :self.a.top_k]
		tv = np.take_along_axis(pr, idx, axis=1)
		wt = tv / (tv.sum(axis=1, keepdims=True) + 1e-9)
		out = np.zeros_like(x)
		for b in range(B):
			for j in range(self.a.top_k):
				out[b] += wt[b, j] * self.ref_expert(ref["experts"][idx[b, j]], x[b:b + 1])[0]
		return out

	def ref_expert(self, t, x):
		e0w, e0b, e3w, e3b = t[:4]
		z = self.conv1(x, e0w, e0b)
		if self.a.expert == "ghost":
			z = z / (1 + np.exp(-z))
			y = self.conv1(z, e3w, e3b)
			y = y / (1 + np.exp(-y))
			z = np.concatenate([z, y], axis=1)[:, :-2]
			return self.conv1(z, t[4], t[5])
		if self.a.expert == "conv":
			z = z / (1 + np.exp(-z))
			return self.conv1(z, e3w, e3b)
		g, b, mu, var, gamma = t[4:]
		z = (z - mu[None, :, None, None]) / np.sqrt(var[None, :, None, None].astype(np.float64) + EPS) \
			* g[None, :, None, None] + b[None, :, None, None]
		z = np.clip(z, 0, 6)
		h, w = z.shape[2:]
		zp = np.pad(z, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
		z = np.max([zp[:, :, dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3)], axis=0)
		return self.conv1(z, e3w, e3b) * gamma[None] + x


def main():
	p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
	p.add_argument("outdir")
	p.add_argument("--layers", type=int, default=4)
	p.add_argument("--channels", type=int, default=32)
	p.add_argument("--hidden", type=int, default=4, help="expert hidden width, times channels")
	p.add_argument("--experts", type=int, default=8)
	p.add_argument("--top-k", type=int, default=2)
	p.add_argument("--missing", type=int, default=None,
		       help="experts missing per layer (default: all but top-k, as a batch-1 dummy leaves)")
	p.add_argument("--hw", type=int, default=8, help="spatial size of the input (even)")
	p.add_argument("--external", action="store_true", help="weights in broken.onnx.data")
	p.add_argument("--ref", type=int, default=0, help="write N NumPy reference pairs (small models)")
	p.add_argument("--seed", type=int, default=0)
	p.add_argument("--batch", type=int, default=1, help="static batch of the export")
	p.add_argument("--expert", choices=("conv", "mixed", "ghost"), default="conv",
		       help="conv: Conv-SiLU-Conv; mixed: Conv-BN-Clip-MaxPool-Conv-scale-residual; "
		       "ghost: GhostNet halves concatenated, sliced, Conv")
	p.add_argument("--dense", action="store_true", help="also write dense.onnx, the dense-path export")
	a = p.parse_args()
	if a.missing is None:
		a.missing = a.experts - a.top_k
	if not (0 <= a.missing < a.experts and 1 <= a.top_k <= a.experts and a.hw % 2 == 0):
		sys.exit("gen.py: need 0 <= missing < experts, 1 <= top-k <= experts, even hw")
	Gen(a).build()


if __name__ == "__main__":
	import onnx.numpy_helper  # noqa: F401  (Debian's onnx does not import it eagerly)
	main()
