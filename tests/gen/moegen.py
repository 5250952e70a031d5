"""Building blocks for the MoE export corpus.

Networks are written the way detector authors write them (spatial routers,
sparse `if mask.any()` dispatch with `index_add_`, shared paths) and exported
the way YOLO exporters do it (tracer, zeros dummy, constant folding).  Every
MoE layer can also run a dense path (all experts, GatherElements of the top-k,
weighted sum), which exports correctly and serves as the known-good model.

Run with Debian's /usr/bin/python3 (python3-torch, python3-onnx, numpy).
"""
import collections
import json
import os
import re
import struct
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

CLIP = 1e4


def norm(kind, c):
	if kind == "gn":
		return nn.GroupNorm(2, c)
	return nn.BatchNorm2d(c)


class Expert(nn.Module):
	"""One expert; `kind` picks the conv flavour.  Experts of a layer share
	their structure, only the weights differ, as in every real MoE."""

	def __init__(self, c, h, kind):
		super().__init__()
		if kind in ("bn", "gn"):
			layers = [nn.Conv2d(c, h, 1, bias=False), norm(kind, h), nn.SiLU(),
				nn.Conv2d(h, c, 1, bias=False), norm(kind, c)]
		elif kind == "bias":
			layers = [nn.Conv2d(c, h, 1), nn.SiLU(), nn.Conv2d(h, c, 3, 1, 1)]
		elif kind == "dw":
			layers = [nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.SiLU(),
				nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h),
				nn.SiLU(), nn.Conv2d(h, c, 1)]
		elif kind == "k3":
			layers = [nn.Conv2d(c, h, 3, 1, 1, bias=False), nn.BatchNorm2d(h), nn.SiLU(),
				nn.Conv2d(h, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)]
		else:
			raise ValueError(kind)
		self.conv = nn.Sequential(*layers)

	def forward(self, x):
		return self.conv(x)


class SpatialRouter(nn.Module):
	"""Pooled conv router: logits per position, averaged, softmax, top-k,
	renormalised.  The final BatchNorm is what gets fitted to data."""

	def __init__(self, c, e, k, hidden=8, pool=4):
		super().__init__()
		self.k = k
		self.pool = pool
		self.net = nn.Sequential(nn.Conv2d(c, hidden, 3, 1, 1, bias=False),
			nn.BatchNorm2d(hidden), nn.SiLU(), nn.Conv2d(hidden, e, 1, bias=False),
			nn.BatchNorm2d(e))

	def logits(self, x):
		h = F.avg_pool2d(x, self.pool)
		return self.net(h).mean((2, 3)).float()

	def forward(self, x):
		p = self.logits(x).softmax(1)
		w, idx = p.topk(self.k, 1)
		w = w / (w.sum(1, keepdim=True) + 1e-9)
		return w, idx

	def standardize(self, mean, std, target):
		bn = self.net[4]
		s = target / std
		bn.weight.data *= s
		bn.bias.data = (bn.bias.data - mean) * s

	def shift(self):
		return self.net[4].bias


class StatRouter(nn.Module):
	"""Router from per-channel mean and std through a Linear."""

	def __init__(self, c, e, k):
		super().__init__()
		self.k = k
		self.gate = nn.Linear(2 * c, e)

	def logits(self, x):
		s = torch.cat([x.mean((2, 3)), x.std((2, 3))], 1)
		return self.gate(s)

	def forward(self, x):
		p = self.logits(x).softmax(1)
		w, idx = p.topk(self.k, 1)
		w = w / (w.sum(1, keepdim=True) + 1e-9)
		return w, idx

	def standardize(self, mean, std, target):
		s = (target / std)[:, None]
		self.gate.weight.data *= s
		self.gate.bias.data = (self.gate.bias.data - mean) * s[:, 0]

	def shift(self):
		return self.gate.bias


def dense_mix(outs, w, idx):
	"""outs: list of E expert outputs [B,C,H,W]; top-k picked by
	GatherElements, weighted sum.  Computes every expert: exports right."""
	st = torch.stack(outs, 1)
	y = 0
	for j in range(idx.shape[1]):
		i = idx[:, j].view(-1, 1, 1, 1, 1).expand(-1, 1, *st.shape[2:])
		y = y + torch.gather(st, 1, i).squeeze(1) * w[:, j].view(-1, 1, 1, 1)
	return y


class MoE(nn.Module):
	"""Spatial-router MoE: shared path + clipped sparse expert sum."""

	def __init__(self, c, e, k, kind="bn", hidden=8):
		super().__init__()
		self.dense = False
		self.router = SpatialRouter(c, e, k)
		self.experts = nn.ModuleList(Expert(c, hidden, kind) for _ in range(e))
		self.shared_expert = nn.Sequential(nn.Conv2d(c, c, 1, bias=False),
			nn.BatchNorm2d(c), nn.SiLU())

	def forward(self, x):
		w, idx = self.router(x)
		if self.dense:
			y = dense_mix([ex(x) for ex in self.experts], w, idx)
		else:
			y = torch.zeros_like(x)
			for e, ex in enumerate(self.experts):
				mask = idx == e
				if mask.any():
					b, s = torch.where(mask)
					y.index_add_(0, b, ex(x[b]) * w[b, s].view(-1, 1, 1, 1))
		return self.shared_expert(x) + y.clamp(-CLIP, CLIP)


class SharedStemMoE(nn.Module):
	"""Experts are 1x1 projections of a shared inverted stem; dispatch over
	torch.unique(idx).tolist(), which the tracer freezes to the dummy's experts."""

	def __init__(self, c, e, k, hidden=16):
		super().__init__()
		self.dense = False
		self.router = StatRouter(c, e, k)
		self.shared_feature = nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False),
			nn.BatchNorm2d(hidden), nn.SiLU(),
			nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden, bias=False),
			nn.BatchNorm2d(hidden), nn.SiLU())
		self.expert_projections = nn.ModuleList(
			nn.Sequential(nn.Conv2d(hidden, c, 1, bias=False), nn.BatchNorm2d(c))
			for _ in range(e))

	def forward(self, x):
		w, idx = self.router(x)
		f = self.shared_feature(x)
		if self.dense:
			y = dense_mix([p(f) for p in self.expert_projections], w, idx)
		else:
			y = torch.zeros_like(x)
			for e in torch.unique(idx).tolist():
				b, s = torch.where(idx == e)
				y.index_add_(0, b, self.expert_projections[e](f[b]) * w[b, s].view(-1, 1, 1, 1))
		return x + y


class ScriptedMoE(nn.Module):
	"""Meant for torch.jit.script: the `if` on a tensor becomes an ONNX If
	around every expert (all present, but behind control flow)."""

	def __init__(self, c, e, k, kind="bias", hidden=8):
		super().__init__()
		self.router = SpatialRouter(c, e, k)
		self.experts = nn.ModuleList(Expert(c, hidden, kind) for _ in range(e))

	def forward(self, x):
		w, idx = self.router(x)
		y = torch.zeros_like(x)
		i = 0
		for ex in self.experts:
			m = (idx == i).to(w.dtype)
			if bool(m.sum() > 0):
				we = (w * m).sum(1)
				y = y + ex(x) * we.view(-1, 1, 1, 1)
			i += 1
		return x + y


def stem(cin, cout, stride=2):
	return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
		nn.BatchNorm2d(cout), nn.SiLU())


class Net(nn.Module):
	"""Detector-style wrapper: checkpoint keys `model.N...`, node scopes
	`/model/model.N/...`."""

	def __init__(self, layers):
		super().__init__()
		self.model = nn.Sequential(*layers)

	def forward(self, x):
		return self.model(x)


def moe_layers(net):
	"""[(scope, layer)] for the MoE layers, in forward order."""
	return [(f"model.{i}", m) for i, m in enumerate(net.model)
		if isinstance(m, (MoE, SharedStemMoE, ScriptedMoE))]


def set_dense(net, on):
	for _, m in moe_layers(net):
		if hasattr(m, "dense"):
			m.dense = on


# --- data and fitting -----------------------------------------------------

def candidates(g, n, c, hw):
	"""Images with global structure (per-image channel offsets, contrast and
	low-frequency patterns), so pooled routers see different inputs."""
	base = torch.randn(n, c, hw, hw, generator=g)
	low = F.interpolate(torch.randn(n, c, 4, 4, generator=g), size=(hw, hw),
		mode="bilinear", align_corners=False)
	off = torch.randn(n, c, 1, 1, generator=g)
	amp = torch.rand(n, 1, 1, 1, generator=g) * 1.5 + 0.25
	return (base * amp + 1.5 * low + off).float()


def randomize_norms(net, g):
	"""Non-trivial affine parameters, so folding BN into Conv matters."""
	for m in net.modules():
		if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
			m.weight.data = torch.rand(m.weight.shape, generator=g) + 0.5
			m.bias.data = torch.randn(m.bias.shape, generator=g) * 0.2


@torch.no_grad()
def fit_norms(net, x):
	"""BatchNorm statistics fitted on data, through the dense path so every
	expert sees every image (the sparse path would starve some)."""
	for m in net.modules():
		if isinstance(m, nn.BatchNorm2d):
			m.reset_running_stats()
			m.momentum = None
	set_dense(net, True)
	net.train()
	for i in range(0, len(x), 64):
		net(x[i:i + 64])
	net.eval()
	set_dense(net, False)
	for m in net.modules():
		if isinstance(m, nn.BatchNorm2d):
			m.momentum = 0.1


@torch.no_grad()
def route(net, x, layers=None):
	"""Per MoE scope: (router input, idx [N,k]) for inputs x, eager sparse path."""
	layers = layers or moe_layers(net)
	seen = {}
	hooks = []
	for scope, m in layers:
		def hook(mod, inp, out, scope=scope):
			seen[scope] = (inp[0], out[1])
		hooks.append(m.router.register_forward_hook(hook))
	try:
		net(x)
	finally:
		for h in hooks:
			h.remove()
	return seen


@torch.no_grad()
def balance(net, x, target=1.5, rounds=60):
	"""Router init tweaks: standardize each router's logits over the data, then
	nudge their shifts until every expert is picked by a fair share of images.
	Layers in forward order, as a later layer's input depends on earlier ones."""
	for scope, m in moe_layers(net):
		r = m.router
		xin = route(net, x)[scope][0]
		lg = r.logits(xin)
		r.standardize(lg.mean(0), lg.std(0) + 1e-6, target)
		e = lg.shape[1]
		want = len(x) * r.k / e
		for _ in range(rounds):
			idx = r(xin)[1]
			cnt = torch.bincount(idx.flatten(), minlength=e).float()
			if cnt.min() >= 0.4 * want:
				break
			r.shift().data += 0.3 * (want - cnt) / want
		else:
			raise SystemExit(f"{scope}: router balancing failed, counts {cnt.tolist()}")


def cover(net, x, minimum):
	"""Greedy choice of images that together route to every expert of every
	layer.  Returns indices into x; fails loudly when x cannot cover."""
	seen = route(net, x)
	sets = []
	for n in range(len(x)):
		sets.append({(s, int(e)) for s, (_, idx) in seen.items() for e in idx[n]})
	need = {(s, e) for s, m in moe_layers(net) for e in range(len(experts_of(m)))}
	chosen = []
	left = set(need)
	while left:
		best = max(range(len(x)), key=lambda n: (len(sets[n] & left), -n))
		if not sets[best] & left:
			raise SystemExit(f"cannot cover experts {sorted(left)} with {len(x)} candidates")
		chosen.append(best)
		left -= sets[best]
	for n in range(len(x)):
		if len(chosen) >= minimum:
			break
		if n not in chosen:
			chosen.append(n)
	return chosen


def experts_of(m):
	return m.expert_projections if isinstance(m, SharedStemMoE) else m.experts


# --- writers --------------------------------------------------------------

def write_safetensors(path, sd):
	"""The safetensors format by hand: u64 LE header size, JSON header
	(8-byte aligned with spaces), then the raw little-endian tensors."""
	dt = {torch.float32: "F32", torch.int64: "I64", torch.float16: "F16",
		torch.int32: "I32"}
	head = {"__metadata__": {"format": "pt"}}
	blobs = []
	off = 0
	for k, v in sd.items():
		v = v.detach().contiguous().cpu()
		b = v.numpy().astype(v.numpy().dtype.newbyteorder("<")).tobytes()
		head[k] = {"dtype": dt[v.dtype], "shape": list(v.shape),
			"data_offsets": [off, off + len(b)]}
		blobs.append(b)
		off += len(b)
	h = json.dumps(head, separators=(",", ":")).encode()
	h += b" " * (-len(h) % 8)
	with open(path, "wb") as f:
		f.write(struct.pack("<Q", len(h)))
		f.write(h)
		for b in blobs:
			f.write(b)


def export(net, dummy, path, opset, dynamic):
	"""YOLO-exporter style: tracer, zeros dummy, constant folding, named I/O."""
	kw = {}
	if dynamic:
		kw["dynamic_axes"] = {"images": {0: "batch"}, "output0": {0: "batch"}}
	with warnings.catch_warnings():
		warnings.simplefilter("ignore")
		torch.onnx.export(net, dummy, path, opset_version=opset,
			do_constant_folding=True, input_names=["images"],
			output_names=["output0"], **kw)
	m = onnx.load(path)
	onnx.checker.check_model(m)
	return m


def op_counts(g, acc=None):
	"""Op histogram including If/Loop subgraphs."""
	acc = acc if acc is not None else collections.Counter()
	for n in g.node:
		acc[n.op_type] += 1
		for a in n.attribute:
			if a.type == onnx.AttributeProto.GRAPH:
				op_counts(a.g, acc)
			for sg in a.graphs:
				op_counts(sg, acc)
	return acc


def node_names(g, acc=None):
	acc = acc if acc is not None else []
	for n in g.node:
		acc.append(n.name)
		for a in n.attribute:
			if a.type == onnx.AttributeProto.GRAPH:
				node_names(a.g, acc)
	return acc


def experts_in_graph(m, scope, pattern):
	"""Expert indices whose nodes the export holds, found by node scope."""
	prefix = pattern.split("{i}")[0]
	rx = re.compile("/" + re.escape(scope) + "/" + re.escape(prefix) + r"(\d+)/")
	alt = re.compile("/" + re.escape(scope.split(".")[-1]) + "/" + re.escape(prefix) + r"(\d+)/")
	got = set()
	for name in node_names(m.graph):
		for r in (rx, alt):
			hit = r.search(name)
			if hit:
				got.add(int(hit.group(1)))
	return sorted(got)


def save_case(out, name, net, *, c, hw, opset=17, batch=1, dynamic=False,
		scripted=None, pairs=3, seed=0, ncand=256):
	"""Fit, pick covering references, export broken (+dense), write all files.
	`scripted`: a function turning the eager net into the one to export."""
	d = os.path.join(out, name)
	os.makedirs(d, exist_ok=True)
	for f in os.listdir(d):
		os.unlink(os.path.join(d, f))
	g = torch.Generator().manual_seed(seed + 1)
	randomize_norms(net, g)
	x = candidates(g, ncand, c, hw)
	fit_norms(net, x)
	balance(net, x)
	net.eval()

	layers = moe_layers(net)
	chosen = cover(net, x, pairs * batch)
	while len(chosen) % batch:
		chosen.append(next(n for n in range(len(x)) if n not in chosen))
	ins = [x[chosen[i:i + batch]] for i in range(0, len(chosen), batch)]

	with torch.no_grad():
		outs = [net(t) for t in ins]
		set_dense(net, True)
		for t, o in zip(ins, outs):
			dd = (net(t) - o).abs().max().item()
			assert dd < 1e-5, f"{name}: dense path differs from sparse by {dd}"
		set_dense(net, False)

	# Prove coverage from the very tensors that are written out.
	covered = {s: set() for s, _ in layers}
	for t in ins:
		for s, (_, idx) in route(net, t).items():
			covered[s] |= {int(e) for e in idx.flatten()}
	uncovered = {s: sorted(set(range(len(experts_of(m)))) - covered[s]) for s, m in layers}
	if any(uncovered.values()):
		raise SystemExit(f"{name}: references miss experts {uncovered}")

	# A static batch is exported at its size; a dynamic one from one sample.
	dummy = torch.zeros(1 if dynamic else batch, c, hw, hw)
	kept = {s: sorted({int(e) for e in idx.flatten()})
		for s, (_, idx) in route(net, dummy).items()}

	sd = net.state_dict()
	write_safetensors(os.path.join(d, "model.safetensors"), sd)
	torch.save(sd, os.path.join(d, "model.pt"))

	with torch.no_grad():
		target = scripted(net) if scripted else net
		if scripted:
			for t, o in zip(ins, outs):
				dd = (target(t) - o).abs().max().item()
				assert dd < 1e-5, f"{name}: scripted differs from eager by {dd}"
		broken = export(target, dummy, os.path.join(d, "broken.onnx"), opset, dynamic)
		dense = None
		if not scripted:
			set_dense(net, True)
			dense = export(net, dummy, os.path.join(d, "dense.onnx"), opset, dynamic)
			set_dense(net, False)

	spec = ["weights: model.safetensors", "moe:"]
	for s, m in layers:
		spec += [f"  - scope: {s}", f"    experts: {len(experts_of(m))}",
			f"    top_k: {m.router.k}"]
		if isinstance(m, SharedStemMoE):
			spec.append("    expert: expert_projections.{i}")
	with open(os.path.join(d, "experts.yaml"), "w") as f:
		f.write("\n".join(spec) + "\n")

	# The traced export must hold exactly the dummy's experts (or all of
	# them, behind If, when scripted); otherwise the case proves nothing.
	for s, m in layers:
		pat = "expert_projections.{i}" if isinstance(m, SharedStemMoE) else "experts.{i}"
		have = experts_in_graph(broken, s, pat)
		want = list(range(len(experts_of(m)))) if scripted else kept[s]
		if have != want:
			raise SystemExit(f"{name}: {s}: export holds experts {have}, expected {want}")
		if dense is not None:
			have = experts_in_graph(dense, s, pat)
			if have != list(range(len(experts_of(m)))):
				raise SystemExit(f"{name}: {s}: dense export holds only experts {have}")

	for i, (t, o) in enumerate(zip(ins, outs)):
		np.save(os.path.join(d, f"in_{i}.npy"), t.numpy().astype("<f4"))
		np.save(os.path.join(d, f"out_{i}.npy"), o.numpy().astype("<f4"))

	meta = {"torch": torch.__version__, "opset": opset, "batch": batch,
		"dynamic": dynamic, "scripted": bool(scripted), "kept_by_dummy": kept,
		"uncovered": uncovered, "pairs": len(ins),
		"ops_broken": dict(op_counts(broken.graph)),
		"ops_dense": dict(op_counts(dense.graph)) if dense is not None else None}
	with open(os.path.join(d, "meta.json"), "w") as f:
		json.dump(meta, f, indent=1)
		f.write("\n")
	print(f"{name}: opset {opset}, {len(ins)} pairs, kept {kept}")
