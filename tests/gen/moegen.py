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


class Skip(nn.Module):
	"""m(x), plus x when `add` (a Bottleneck's shortcut switch): a flag
	that only a pickled module records."""

	def __init__(self, m, add=True):
		super().__init__()
		self.m = m
		self.add = add

	def forward(self, x):
		return x + self.m(x) if self.add else self.m(x)


class Scale(nn.Module):
	"""m(x) times a gain kept as a Python float, not a tensor: a constant
	that only a pickled module records."""

	def __init__(self, m, s=1.0):
		super().__init__()
		self.m = m
		self.s = s

	def forward(self, x):
		return self.m(x) * self.s


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
	expert_pattern = "experts.{i}"

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
	expert_pattern = "expert_projections.{i}"

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
	expert_pattern = "experts.{i}"

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


# --- export patterns of the YOLO-Master models (clean-room) ------------------
#
# Each class below reproduces one way real MoE detectors write the routing
# and the dispatch, so that the traced export has the same ONNX pattern.

def sparse_dispatch(x, w, idx, experts, mask_fn=None, combine=None, zeros=None):
	"""The `if mask.any()` dispatch with index_add_, as the detectors write
	it.  w and idx are [B, k]; mask_fn(i) gives the [B, k] bool mask of
	expert i (default idx == i); combine(out, wt) the weighted rows (default
	out * wt); zeros the accumulator (default torch.zeros_like(x))."""
	y = torch.zeros_like(x) if zeros is None else zeros
	for e, ex in enumerate(experts):
		mask = (idx == e) if mask_fn is None else mask_fn(e)
		if mask.any():
			b, s = torch.where(mask)
			wt = w[b, s].view(-1, 1, 1, 1)
			out = ex(x[b])
			y.index_add_(0, b, out * wt if combine is None else combine(out, wt))
	return y


class ReshapeRouter(SpatialRouter):
	"""A router that hands its top-k on reshaped: view(B, k), then
	[B, k, 1, 1] (the weights through a cast), as broadcast-ready tensors."""

	def forward(self, x):
		b = x.shape[0]
		p = self.logits(x).softmax(1)
		w, idx = p.topk(self.k, 1)
		w = w / (w.sum(1, keepdim=True) + 1e-6)
		idx = idx.view(b, self.k)
		return w.float().view(b, self.k, 1, 1), idx.view(b, self.k, 1, 1)


class ReshapedIndexMoE(nn.Module):
	"""The layer flattens the router's [B, k, 1, 1] back with reshape(B, -1),
	slices the first k and casts the ids to int64 before comparing them
	with each expert id: Equal(Cast(Slice(Reshape(Reshape(Reshape(TopK)))))."""
	expert_pattern = "experts.{i}"

	def __init__(self, c, e, k, kind="bn", hidden=8):
		super().__init__()
		self.dense = False
		self.k = k
		self.routing = ReshapeRouter(c, e, k)
		self.experts = nn.ModuleList(Expert(c, hidden, kind) for _ in range(e))
		self.shared_expert = nn.Sequential(nn.Conv2d(c, c, 1, bias=False),
			nn.BatchNorm2d(c), nn.SiLU())

	@property
	def router(self):
		return self.routing

	def forward(self, x):
		b = x.shape[0]
		w, idx = self.routing(x)
		idx = idx.reshape(b, -1)[:, :self.k].long()
		w = w.reshape(b, -1)[:, :self.k]
		if self.dense:
			y = dense_mix([ex(x) for ex in self.experts], w, idx)
		else:
			y = sparse_dispatch(x, w, idx, self.experts)
		return x + self.shared_expert(x) + y.clamp(-CLIP, CLIP)


class CastMoE(nn.Module):
	"""Casts around the weighted product, as mixed-precision-safe code does.
	`style` "both": out.to(dtype) * w.to(dtype) (a Cast on the expert output
	and one on the weight before the Mul); "after": (out * w.to(dtype)).to(dtype)
	(a Cast on the weight, then one on the product).  The accumulator is a
	fresh zeros tensor that index_add_ fills: ScatterElements into zeros + Add."""
	expert_pattern = "experts.{i}"

	def __init__(self, c, e, k, kind="bn", hidden=8, style="both"):
		super().__init__()
		self.dense = False
		self.style = style
		self.router = SpatialRouter(c, e, k)
		self.experts = nn.ModuleList(Expert(c, hidden, kind) for _ in range(e))

	def forward(self, x):
		w, idx = self.router(x)
		dt = x.dtype
		if self.dense:
			return x + dense_mix([ex(x) for ex in self.experts], w, idx)
		if self.style == "both":
			comb = lambda out, wt: out.to(dt) * wt.to(dt)  # noqa: E731
			zeros = torch.zeros(x.shape, dtype=dt)
		else:
			comb = lambda out, wt: (out * wt.to(dt)).to(dt)  # noqa: E731
			zeros = x.new_zeros(x.shape)
		return x + sparse_dispatch(x, w, idx, self.experts, combine=comb, zeros=zeros)


class ConvBNAct(nn.Module):
	"""Conv (no bias) + BatchNorm + SiLU, the detector's basic block; its
	attributes conv/bn/act give keys like `cv1.conv.weight`, `cv1.bn.running_var`."""

	def __init__(self, c1, c2, k=1, s=1, g=1, eps=1e-5):
		super().__init__()
		self.conv = nn.Conv2d(c1, c2, k, s, k // 2, groups=g, bias=False)
		self.bn = nn.BatchNorm2d(c2, eps=eps)
		self.act = nn.SiLU()

	def forward(self, x):
		return self.act(self.bn(self.conv(x)))


class AttnMoEUnit(nn.Module):
	"""A transformer-style unit: a spatial mixing conv (`attn`) and an MoE
	feed-forward (`mlp`), each residual."""

	def __init__(self, c, e, k):
		super().__init__()
		self.attn = ConvBNAct(c, c, 3, g=c)
		self.mlp = MoE(c, e, k, "bn")

	def forward(self, x):
		x = x + self.attn(x)
		return self.mlp(x)


class NestedBlock(nn.Module):
	"""MoE units two containers deep, as PSA-style blocks nest them:
	`m` is a ModuleList of Sequentials, so the MoE of unit j of group 0 has
	the module path `<block>.m.0.j.mlp` and torch names its nodes
	`/<block>/m.0/m.0.j/mlp/...`."""

	def __init__(self, c, es, k):
		super().__init__()
		self.cv1 = ConvBNAct(c, c)
		self.m = nn.ModuleList([nn.Sequential(*(AttnMoEUnit(c, e, k) for e in es))])
		self.cv2 = ConvBNAct(2 * c, c)

	def forward(self, x):
		a = self.cv1(x)
		b = a
		for group in self.m:
			b = group(b)
		return self.cv2(torch.cat([a, b], 1))


class CrossGate(nn.Module):
	"""Gated fusion of two paths: cat([static, routed]) -> pooled MLP
	(Gemm) -> sigmoid scaled by tanh of a parameter -> per-path channel
	gates -> gated concat, channel-shuffled."""

	def __init__(self, c, r=2):
		super().__init__()
		self.gate_net = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
			nn.Linear(2 * c, c // r, bias=False), nn.SiLU(), nn.Linear(c // r, 2 * c))
		self.gate_scale = nn.Parameter(torch.full((1,), 0.8))

	def forward(self, static, routed):
		c = static.shape[1]
		g = self.gate_net(torch.cat([static, routed], 1))
		g = torch.tanh(self.gate_scale) * 0.5 * torch.sigmoid(g) + 0.5
		a = static * g[:, :c].unsqueeze(-1).unsqueeze(-1)
		b = routed * g[:, c:].unsqueeze(-1).unsqueeze(-1)
		z = torch.cat([a, b], 1)
		n, _, h, w = z.shape
		return z.view(n, 2, c, h, w).transpose(1, 2).reshape(n, 2 * c, h, w)


class GatedFusionMoE(nn.Module):
	"""MoE between gates whose ranks only op rules tell: a squeeze-excitation
	gate through Linear layers (Flatten + Gemm) scales the input the experts
	read, a static path runs beside the routed sum, and a cross gate mixes
	the two: the routed sum feeds both the Concat of the gate and the Mul of
	the mix, so two values downstream carry every expert."""
	expert_pattern = "experts.{i}"

	def __init__(self, c, e, k, hidden=8, r=2):
		super().__init__()
		self.dense = False
		self.se_gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
			nn.Linear(c, c // r, bias=False), nn.SiLU(), nn.Linear(c // r, c), nn.Sigmoid())
		self.static_net = nn.Sequential(ConvBNAct(c, c, 3, g=c), ConvBNAct(c, c))
		self.router = StatRouter(c, e, k)
		self.experts = nn.ModuleList(Expert(c, hidden, "bn") for _ in range(e))
		self.cross_gate = CrossGate(c)
		self.proj = ConvBNAct(2 * c, c)
		self.refine_scale = nn.Parameter(torch.full((1,), 0.5))

	def forward(self, x):
		s = self.se_gate(x)
		xs = x * s[:, :, None, None]
		static = self.static_net(xs)
		w, idx = self.router(xs)
		if self.dense:
			routed = dense_mix([ex(xs) for ex in self.experts], w, idx)
		else:
			routed = sparse_dispatch(xs, w, idx, self.experts)
		mixed = self.proj(self.cross_gate(static, routed))
		return x + torch.tanh(self.refine_scale) * mixed


class AdaptiveGateMoE(nn.Module):
	"""Transforms the routing weights after TopK: a complexity estimate
	decides how many of the k slots to keep per image (slot rank <= n_keep),
	masked weights are renormalised with a clamped sum, and the dispatch
	mask is (idx == i) & (w > 0).  The weight each expert's rows get is the
	transformed one, gathered at row*k + slot.  `transform` False skips it
	(used only to prove the references depend on it)."""
	expert_pattern = "experts.{i}"

	def __init__(self, c, e, k, hidden=8):
		super().__init__()
		self.dense = False
		self.transform = True
		self.k = k
		self.router = SpatialRouter(c, e, k)
		self.complexity_estimator = nn.Sequential(nn.AdaptiveAvgPool2d(1),
			nn.Conv2d(c, 1, 1), nn.Sigmoid())
		self.experts = nn.ModuleList(Expert(c, hidden, "bn") for _ in range(e))
		self.last_dispatch = None
		self.last_features = None

	def feature_values(self):
		"""The references must show every number of kept slots."""
		return range(1, self.k + 1)

	def n_keep(self, x):
		cx = self.complexity_estimator(x).mean((1, 2, 3))
		cx = torch.nan_to_num(cx, nan=1.0, posinf=1.5, neginf=0.3).clamp(0.3, 1.5)
		return (cx * self.k).round().clamp(1, self.k)

	def forward(self, x):
		b = x.shape[0]
		w, idx = self.router(x)
		if self.transform:
			keep = self.n_keep(x)
			slot = torch.arange(1, self.k + 1, dtype=w.dtype).view(1, self.k)
			w = w * (slot <= keep.view(-1, 1)).to(w.dtype)
			w = w / w.sum(1, keepdim=True).clamp(min=1e-6)
			w = w.reshape(b, -1)
			self.last_features = [int(v) for v in keep]
		self.last_dispatch = torch.where(w > 0, idx, torch.full_like(idx, -1))
		if self.dense:
			y = dense_mix([ex(x) for ex in self.experts], w, idx)
		else:
			y = sparse_dispatch(x, w, idx, self.experts,
				mask_fn=lambda e: (idx == e) & (w > 0))
		return x + y

	@torch.no_grad()
	def calibrate(self, x):
		"""Spread the complexity estimate over the data so that every n_keep
		from 1 to k occurs: n_keep changes where c = (j + 0.5) / k, so the
		estimator's logits are standardized and centred between the first
		and the last of those points."""
		conv = self.complexity_estimator[1]
		z = conv(F.adaptive_avg_pool2d(x, 1)).flatten()
		cuts = [torch.logit(torch.tensor((j + 0.5) / self.k)).item() for j in range(1, self.k)]
		mid, width = (cuts[0] + cuts[-1]) / 2, 1.0 + (cuts[-1] - cuts[0]) / 2
		s = width / (z.std() + 1e-6)
		conv.weight.data *= s
		conv.bias.data = (conv.bias.data - z.mean()) * s + mid


class ConvExpert(nn.Module):
	"""Expert of two ConvBNAct blocks with BatchNorm eps 1e-3 (the detector
	default); `wscale` shrinks the conv weights so that the BN variances are
	small and eps matters (1e-3 vs 1e-5 differ well past the tolerance)."""

	def __init__(self, c, h, eps=1e-3, wscale=0.1):
		super().__init__()
		self.cv1 = ConvBNAct(c, h, 1, eps=eps)
		self.cv2 = ConvBNAct(h, c, 3, eps=eps)
		for m in (self.cv1.conv, self.cv2.conv):
			m.weight.data *= wscale

	def forward(self, x):
		return self.cv2(self.cv1(x))


class EpsMoE(nn.Module):
	"""Plain traced dispatch over ConvExpert experts (Conv+BN(eps 1e-3)+SiLU);
	eps may be a sequence, one per expert."""
	expert_pattern = "experts.{i}"

	def __init__(self, c, e, k, hidden=8, eps=1e-3):
		super().__init__()
		self.dense = False
		self.router = SpatialRouter(c, e, k)
		eps = list(eps) if isinstance(eps, (list, tuple)) else [eps] * e
		self.experts = nn.ModuleList(ConvExpert(c, hidden, eps[i]) for i in range(e))

	def forward(self, x):
		w, idx = self.router(x)
		if self.dense:
			y = dense_mix([ex(x) for ex in self.experts], w, idx)
		else:
			y = sparse_dispatch(x, w, idx, self.experts)
		return x + y


class ScriptedGatherMoE(nn.Module):
	"""For torch.jit.script: each expert sits in an If whose body gathers
	its own rows (b, s = torch.where(mask): NonZero, Transpose, Split,
	Squeeze, Gather) and index_adds them, instead of computing the expert
	on the whole batch as ScriptedMoE does."""
	expert_pattern = "experts.{i}"

	def __init__(self, c, e, k, kind="bn", hidden=8):
		super().__init__()
		self.router = SpatialRouter(c, e, k)
		self.experts = nn.ModuleList(Expert(c, hidden, kind) for _ in range(e))

	def forward(self, x):
		w, idx = self.router(x)
		y = torch.zeros_like(x)
		i = 0
		for ex in self.experts:
			mask = idx == i
			if bool(mask.any()):
				b, s = torch.where(mask)
				y.index_add_(0, b, ex(x[b]) * w[b, s].view(-1, 1, 1, 1))
			i += 1
		return x + y


class MaskSumMoE(ScriptedMoE):
	"""ScriptedMoE's dispatch traced, not scripted: each expert the dummy
	reaches runs on the whole input in the main graph, weighted by
	sum_j W[:, j] * (I[:, j] == i) (no row gather, no If); the others
	vanish. Nothing in its data flow puts an expert after the dispatch.
	`shape_view`: the weight is viewed as [o.shape[0], 1, 1, 1] of the
	expert's output o, which a dynamic export reads through Shape(o)."""

	def __init__(self, c, e, k, kind="bias", hidden=8, shape_view=False):
		super().__init__(c, e, k, kind, hidden)
		self.dense = False
		self.shape_view = shape_view

	def forward(self, x):
		if not self.dense and not self.shape_view:
			return super().forward(x)
		w, idx = self.router(x)
		if self.dense:
			return x + dense_mix([ex(x) for ex in self.experts], w, idx)
		y = torch.zeros_like(x)
		i = 0
		for ex in self.experts:
			m = (idx == i).to(w.dtype)
			if bool(m.sum() > 0):
				o = ex(x)
				y = y + o * (w * m).sum(1).view(o.shape[0], 1, 1, 1)
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


class LoopNet(Net):
	"""The wrapper as detection frameworks write it: forward walks the
	layers itself instead of calling the Sequential, so checkpoint keys stay
	`model.N...` but node scopes are `/model.N/...`."""

	def forward(self, x):
		for m in self.model:
			x = m(x)
		return x


MOE_TYPES = (MoE, SharedStemMoE, ScriptedMoE, ReshapedIndexMoE, CastMoE, GatedFusionMoE,
	AdaptiveGateMoE, EpsMoE, ScriptedGatherMoE, MaskSumMoE)


def moe_layers(net):
	"""[(scope, layer)] for the MoE layers, in forward order; scope is the
	module path of named_modules() ("" when the layer is the model)."""
	return [(name, m) for name, m in net.named_modules() if isinstance(m, MOE_TYPES)]


def set_dense(net, on):
	for _, m in moe_layers(net):
		if hasattr(m, "dense"):
			m.dense = on


def expert_path(scope, m, i):
	p = m.expert_pattern.format(i=i)
	return f"{scope}.{p}" if scope else p


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
	"""Per MoE scope: (router input, idx [N,k], layer input) for inputs x,
	eager sparse path.  idx holds the experts each image is dispatched to:
	the router's top-k, or what the layer reports in `last_dispatch` (-1
	for a slot it drops)."""
	layers = layers or moe_layers(net)
	seen = {}
	hooks = []
	for scope, m in layers:
		def hook(mod, inp, out, scope=scope):
			seen[scope] = (inp[0], out[1].reshape(out[1].shape[0], -1))

		def pre(mod, inp, scope=scope):
			seen[scope + "\0in"] = inp[0]
		hooks.append(m.router.register_forward_hook(hook))
		hooks.append(m.register_forward_pre_hook(pre))
		if hasattr(m, "last_dispatch"):
			m.last_dispatch = None
	try:
		net(x)
	finally:
		for h in hooks:
			h.remove()
	res = {}
	for scope, m in layers:
		rin, idx = seen[scope]
		if getattr(m, "last_dispatch", None) is not None:
			idx = m.last_dispatch
		res[scope] = (rin, idx, seen[scope + "\0in"])
	return res


def features(net, x, layers=None):
	"""Per MoE scope, per image of x: the values of the layer's own feature
	that the references must cover (e.g. how many slots it keeps), or {}."""
	layers = layers or moe_layers(net)
	out = {}
	for scope, m in layers:
		if hasattr(m, "last_features"):
			m.last_features = None
	with torch.no_grad():
		net(x)
	for scope, m in layers:
		if getattr(m, "last_features", None) is not None:
			out[scope] = m.last_features
	return out


@torch.no_grad()
def balance(net, x, target=1.5, rounds=60):
	"""Router init tweaks: standardize each router's logits over the data, then
	nudge their shifts until every expert is picked by a fair share of images.
	Layers in forward order, as a later layer's input depends on earlier ones.
	A layer with a `calibrate(layer_input)` method is calibrated after."""
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
		if hasattr(m, "calibrate"):
			m.calibrate(route(net, x)[scope][2])


def cover(net, x, minimum):
	"""Greedy choice of images that together route to every expert of every
	layer (and show every value of the layers' own features).  Returns
	indices into x; fails loudly when x cannot cover."""
	seen = route(net, x)
	feats = features(net, x)
	sets = []
	for n in range(len(x)):
		sets.append({(s, int(e)) for s, (_, idx, _) in seen.items() for e in idx[n] if e >= 0} |
			{(s, "feature", v[n]) for s, v in feats.items()})
	need = {(s, e) for s, m in moe_layers(net) for e in range(len(experts_of(m)))}
	need |= {(s, "feature", v) for s, m in moe_layers(net) if s in feats
		for v in m.feature_values()}
	chosen = []
	left = set(need)
	while left:
		best = max(range(len(x)), key=lambda n: (len(sets[n] & left), -n))
		if not sets[best] & left:
			raise SystemExit(f"cannot cover {sorted(left, key=str)} with {len(x)} candidates")
		chosen.append(best)
		left -= sets[best]
	for n in range(len(x)):
		if len(chosen) >= minimum:
			break
		if n not in chosen:
			chosen.append(n)
	return chosen


def experts_of(m):
	return m.get_submodule(m.expert_pattern.split(".{i}")[0])


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


def export(net, dummy, path, opset, dynamic, names=("images", "output0"), fold=True,
		inits_as_inputs=False):
	"""YOLO-exporter style: tracer, zeros dummy, constant folding, named I/O;
	`inits_as_inputs`: every weight listed among the graph inputs too."""
	kw = {"keep_initializers_as_inputs": True} if inits_as_inputs else {}
	if dynamic:
		kw["dynamic_axes"] = {names[0]: {0: "batch"}, names[1]: {0: "batch"}}
	with warnings.catch_warnings():
		warnings.simplefilter("ignore")
		torch.onnx.export(net, dummy, path, opset_version=opset,
			do_constant_folding=fold, input_names=[names[0]],
			output_names=[names[1]], **kw)
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


def unqualified(path):
	"""The name torch gives a module's node scope: its path from the last
	non-numeric component on (model.4.m.0.0 -> m.0.0, model.5 -> model.5)."""
	parts = path.split(".")
	for i in range(len(parts) - 1, -1, -1):
		if not parts[i].isdigit():
			return ".".join(parts[i:])
	return path


@torch.no_grad()
def called_modules(net, x):
	"""Module paths whose forward runs (on the dense path, so every expert):
	only these open a node scope; a ModuleList, say, does not."""
	called = set()
	hooks = [mod.register_forward_pre_hook(lambda m, i, n=name: called.add(n))
		for name, mod in net.named_modules()]
	set_dense(net, True)
	try:
		net(x)
	finally:
		set_dense(net, False)
		for h in hooks:
			h.remove()
	return called


def node_scope(path, called):
	"""The node-name prefix of a traced module: /model.4/m.0/m.0.0/mlp/."""
	parts = path.split(".") if path else []
	comps = [unqualified(".".join(parts[:j])) for j in range(1, len(parts) + 1)
		if ".".join(parts[:j]) in called]
	return "/" + "".join(c + "/" for c in comps)


def experts_in_graph(m, scope, pattern, called=None, n=None):
	"""Expert indices whose nodes the export holds, found by node scope:
	traced exports by the scope torch derives from the module path (`called`
	from called_modules(), `n` the number of experts); scripted ones
	(called None) by /<scope's last component>/<pattern>."""
	names = node_names(m.graph)
	if called is not None:
		def path(i):
			p = pattern.format(i=i)
			return f"{scope}.{p}" if scope else p
		return [i for i in range(n)
			if any(x.startswith(node_scope(path(i), called)) for x in names)]
	prefix = pattern.split("{i}")[0]
	rx = re.compile("/" + re.escape(scope) + "/" + re.escape(prefix) + r"(\d+)/")
	alt = re.compile("/" + re.escape(scope.split(".")[-1]) + "/" + re.escape(prefix) + r"(\d+)/")
	got = set()
	for name in names:
		for r in (rx, alt):
			hit = r.search(name)
			if hit:
				got.add(int(hit.group(1)))
	return sorted(got)


def round_half(net):
	"""Every float parameter and buffer rounded to float16 precision and
	kept in float32: what a model loaded from an fp16 checkpoint computes."""
	with torch.no_grad():
		for t in list(net.parameters()) + list(net.buffers()):
			if t.is_floating_point():
				t.copy_(t.half().float())


def write_best_pt(path, net, hw):
	"""A trainer's final checkpoint: the pickled model (the nn.Module
	itself, not a state_dict) in half precision under 'model', 'ema' None."""
	import copy
	ckpt = {"epoch": -1, "best_fitness": None, "model": copy.deepcopy(net).half(),
		"ema": None, "updates": None, "optimizer": None,
		"train_args": {"imgsz": hw, "half": True}}
	torch.save(ckpt, path)


def save_case(out, name, net, *, c, hw, opset=17, batch=1, dynamic=False,
		scripted=None, pairs=3, seed=0, ncand=256, names=("images", "output0"),
		fold=True, half=False, weights=("model.safetensors", "model.pt"), checks=(),
		dead_present=False, inits_as_inputs=False, half_refused=None, nodeless=False,
		yaml_input=None):
	"""Fit, pick covering references, export broken (+dense), write all files.
	`scripted`: a function turning the eager net into the one to export.
	`names`: input and output names; `fold`: do_constant_folding.
	`half`: round every weight to float16 after fitting (references and
	exports come from the rounded model).  `weights`: the files to write,
	the first named in experts.yaml: model.safetensors, model.pt (state_dict)
	or best.pt (pickled half-precision module).  `checks`: functions
	f(net, ins, outs) -> str that fail loudly unless the references depend
	on what the case is about; their reports go to meta.json.
	`dead_present`: the experts the dummy routes to keep their norms'
	initial values (affine, and BatchNorm's statistics), as experts no batch
	reached do (the exporter then merges their equal initializers); the
	others stay trained.
	`inits_as_inputs`: export with keep_initializers_as_inputs=True.
	`half_refused`: why a float16 copy of the case cannot be repaired
	(tests/half.sh then requires the refusal), written to meta.json.
	`nodeless`: the dummy's experts compute nothing (identities), so no
	node scope shows which the export holds: that check is left out.
	`yaml_input`: the `input:` experts.yaml gives every layer."""
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
	if dead_present:
		mods = dict(net.named_modules())
		dummy = torch.zeros(1 if dynamic else batch, c, hw, hw)
		for s, (_, idx, _) in route(net, dummy).items():
			for e in {int(e) for e in idx.flatten() if e >= 0}:
				for m in experts_of(mods[s])[e].modules():
					if isinstance(m, (nn.GroupNorm, nn.BatchNorm2d)):
						m.reset_parameters()
	if half:
		round_half(net)

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
		for s, (_, idx, _) in route(net, t).items():
			covered[s] |= {int(e) for e in idx.flatten() if e >= 0}
	uncovered = {s: sorted(set(range(len(experts_of(m)))) - covered[s]) for s, m in layers}
	if any(uncovered.values()):
		raise SystemExit(f"{name}: references miss experts {uncovered}")
	shown = {}
	for t in ins:
		for s, v in features(net, t).items():
			shown.setdefault(s, set()).update(v)
	for s, m in layers:
		if hasattr(m, "feature_values") and not set(m.feature_values()) <= shown.get(s, set()):
			raise SystemExit(f"{name}: {s}: references show only {sorted(shown.get(s, ()))}")
	reports = [f(net, ins, outs) for f in checks]

	# A static batch is exported at its size; a dynamic one from one sample.
	dummy = torch.zeros(1 if dynamic else batch, c, hw, hw)
	kept = {s: sorted({int(e) for e in idx.flatten() if e >= 0})
		for s, (_, idx, _) in route(net, dummy).items()}
	# A traced layer whose dummy reaches every expert loses none: nothing
	# to repair there, so the case would not test that layer.
	for s, m in layers:
		if not scripted and len(kept[s]) == len(experts_of(m)):
			raise SystemExit(f"{name}: {s}: the dummy routes to every expert; the export drops none")

	for w in weights:
		if w == "model.safetensors":
			write_safetensors(os.path.join(d, w), net.state_dict())
		elif w == "model.pt":
			torch.save(net.state_dict(), os.path.join(d, w))
		elif w == "best.pt":
			write_best_pt(os.path.join(d, w), net, hw)
		else:
			raise ValueError(w)

	with torch.no_grad():
		target = scripted(net) if scripted else net
		if scripted:
			for t, o in zip(ins, outs):
				dd = (target(t) - o).abs().max().item()
				assert dd < 1e-5, f"{name}: scripted differs from eager by {dd}"
		broken = export(target, dummy, os.path.join(d, "broken.onnx"), opset, dynamic,
			names, fold, inits_as_inputs)
		dense = None
		if not scripted:
			set_dense(net, True)
			dense = export(net, dummy, os.path.join(d, "dense.onnx"), opset, dynamic,
				names, fold, inits_as_inputs)
			set_dense(net, False)

	spec = [f"weights: {weights[0]}", "moe:"]
	for s, m in layers:
		spec += [f"  - scope: {s}" if s else '  - scope: ""',
			f"    experts: {len(experts_of(m))}", f"    top_k: {m.router.k}"]
		if m.expert_pattern != "experts.{i}":
			spec.append(f"    expert: {m.expert_pattern}")
		if yaml_input:
			spec.append(f"    input: {yaml_input}")
	with open(os.path.join(d, "experts.yaml"), "w") as f:
		f.write("\n".join(spec) + "\n")

	# The traced export must hold exactly the dummy's experts (or all of
	# them, behind If, when scripted); otherwise the case proves nothing.
	called = None if scripted else called_modules(net, x[:1])
	for s, m in [] if nodeless else layers:
		pat, n = m.expert_pattern, len(experts_of(m))
		have = experts_in_graph(broken, s, pat, called, n)
		want = list(range(n)) if scripted else kept[s]
		if have != want:
			raise SystemExit(f"{name}: {s}: export holds experts {have}, expected {want}")
		if dense is not None:
			have = experts_in_graph(dense, s, pat, called, n)
			if have != list(range(n)):
				raise SystemExit(f"{name}: {s}: dense export holds only experts {have}")

	for i, (t, o) in enumerate(zip(ins, outs)):
		np.save(os.path.join(d, f"in_{i}.npy"), t.numpy().astype("<f4"))
		np.save(os.path.join(d, f"out_{i}.npy"), o.numpy().astype("<f4"))

	meta = {"torch": torch.__version__, "opset": opset, "batch": batch,
		"dynamic": dynamic, "scripted": bool(scripted), "kept_by_dummy": kept,
		"uncovered": uncovered, "pairs": len(ins),
		"ops_broken": dict(op_counts(broken.graph)),
		"ops_dense": dict(op_counts(dense.graph)) if dense is not None else None}
	# Keys beyond the original set only where a case departs from the
	# defaults, so regenerating the older cases leaves their bytes alone.
	extra = {"input_names": list(names[:1]), "output_names": list(names[1:]),
		"do_constant_folding": fold, "half": half, "weights": list(weights),
		"layers": [{"scope": s, "class": type(m).__name__, "experts": len(experts_of(m)),
			"top_k": m.router.k, "expert": m.expert_pattern} for s, m in layers],
		"checks": reports}
	if (names, fold, half, tuple(weights), reports) != (("images", "output0"), True, False,
			("model.safetensors", "model.pt"), []) or type(net) is not Net or \
			any(type(m) not in (MoE, SharedStemMoE, ScriptedMoE) for _, m in layers):
		meta.update(extra)
	if half_refused:
		meta["half_refused"] = half_refused
	with open(os.path.join(d, "meta.json"), "w") as f:
		json.dump(meta, f, indent=1)
		f.write("\n")
	print(f"{name}: opset {opset}, {len(ins)} pairs, kept {kept}")
