#!/usr/bin/python3
"""Generate testdata/token_onehot: /usr/bin/python3 tests/gen/tokens.py OUTDIR

Token-level MoE layers with Mixtral's dispatch (the Hugging Face
transformers code of 2024): SwiGLU experts of Linear layers, a softmax
router, top-k renormalised, and

    mask = one_hot(selected, E).permute(2, 1, 0)     # [E, k, tokens]
    for e in range(E):
        idx, top_x = torch.where(mask[e])            # (slot, token)
        if top_x.shape[0] == 0: continue             # traced: once, for the dummy
        out.index_add_(0, top_x, expert(h[None, top_x].reshape(-1, D)) * w[top_x, idx, None])

traced with a zero dummy, so the experts the dummy's tokens did not pick
are gone. The mask is transposed against the detectors' `indices == e`:
NonZero gives the slot first and the token second. Clean-room code written
from the form, not copied from transformers."""
import json
import os
import sys
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moegen as G  # noqa: E402

T, D, H = 8, 16, 32


class Expert(nn.Module):
	def __init__(self):
		super().__init__()
		self.w1 = nn.Linear(D, H, bias=False)
		self.w2 = nn.Linear(H, D, bias=False)
		self.w3 = nn.Linear(D, H, bias=False)

	def forward(self, x):
		return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TokenMoE(nn.Module):
	def __init__(self, E, k):
		super().__init__()
		self.gate = nn.Linear(D, E, bias=False)
		self.experts = nn.ModuleList(Expert() for _ in range(E))
		self.E, self.k, self.dense = E, k, False
		self.picked = None  # experts the last forward ran

	def forward(self, x):
		B, S, _ = x.shape
		h = x.reshape(-1, D)
		w = F.softmax(self.gate(h), dim=1, dtype=torch.float)
		w, sel = torch.topk(w, self.k, dim=-1)
		w = w / w.sum(dim=-1, keepdim=True)
		if self.dense:
			ys = torch.stack([e(h) for e in self.experts], 1)
			out = (torch.gather(ys, 1, sel[:, :, None].expand(-1, -1, D)) * w[:, :, None]).sum(1)
			return out.reshape(B, S, D)
		out = torch.zeros((B * S, D), dtype=h.dtype)
		mask = F.one_hot(sel, num_classes=self.E).permute(2, 1, 0)
		self.picked = []
		for e in range(self.E):
			idx, top_x = torch.where(mask[e])
			if top_x.shape[0] == 0:
				continue
			self.picked.append(e)
			y = self.experts[e](h[None, top_x].reshape(-1, D)) * w[top_x, idx, None]
			out.index_add_(0, top_x, y.to(h.dtype))
		return out.reshape(B, S, D)


class Net(nn.Module):
	def __init__(self):
		super().__init__()
		self.embed = nn.Linear(D, D)
		self.moe0 = TokenMoE(8, 2)
		self.moe1 = TokenMoE(4, 1)
		self.head = nn.Linear(D, 4)

	def forward(self, x):
		x = self.embed(x)
		x = x + self.moe0(x)
		x = x + self.moe1(x)
		return self.head(x)


def export(net, path, dense):
	for m in (net.moe0, net.moe1):
		m.dense = dense
	with warnings.catch_warnings():
		warnings.simplefilter("ignore")
		torch.onnx.export(net, torch.zeros(1, T, D), path, opset_version=17, do_constant_folding=True,
			input_names=["tokens"], output_names=["logits"])
	m = onnx.load(path)
	onnx.checker.check_model(m)
	for m_ in (net.moe0, net.moe1):
		m_.dense = False
	return m


def main(out):
	torch.manual_seed(7)
	torch.set_num_threads(1)
	net = Net().eval()
	with torch.no_grad():
		for m in (net.moe0, net.moe1):
			m.gate.weight.mul_(4)  # routing that varies from token to token
	d = os.path.join(out, "token_onehot")
	os.makedirs(d, exist_ok=True)
	for f in os.listdir(d):
		os.unlink(os.path.join(d, f))
	with torch.no_grad():
		net(torch.zeros(1, T, D))
		kept = {"moe0": list(net.moe0.picked), "moe1": list(net.moe1.picked)}
		broken = export(net, os.path.join(d, "broken.onnx"), False)
		dense = export(net, os.path.join(d, "dense.onnx"), True)
		# References that together route to every expert of both layers.
		g = torch.Generator().manual_seed(8)
		seen = {"moe0": set(), "moe1": set()}
		ins = []
		while len(ins) < 3 or any(len(seen[k]) < m.E for k, m in (("moe0", net.moe0), ("moe1", net.moe1))):
			if len(ins) == 16:
				sys.exit("references do not cover every expert")
			x = torch.randn(1, T, D, generator=g)
			net(x)
			ins.append(x)
			seen["moe0"].update(net.moe0.picked)
			seen["moe1"].update(net.moe1.picked)
		for i, x in enumerate(ins):
			np.save(os.path.join(d, f"in_{i}.npy"), x.numpy())
			np.save(os.path.join(d, f"out_{i}.npy"), net(x).numpy())
	sd = net.state_dict()
	G.write_safetensors(os.path.join(d, "model.safetensors"), sd)
	torch.save(sd, os.path.join(d, "model.pt"))
	with open(os.path.join(d, "experts.yaml"), "w") as f:
		f.write('weights: "model.safetensors"\nmoe:\n'
			'  - {scope: "moe0", experts: 8, top_k: 2}\n'
			'  - {scope: "moe1", experts: 4, top_k: 1}\n')
	with open(os.path.join(d, "sparse.fallback"), "w") as f:
		f.write("the rows are gathered along axis 1 (x[None, rows])\n")
	meta = {"torch": torch.__version__, "opset": 17, "batch": 1, "dynamic": False, "scripted": False,
		"kept_by_dummy": kept, "pairs": len(ins),
		"ops_broken": dict(G.op_counts(broken.graph)), "ops_dense": dict(G.op_counts(dense.graph)),
		"input_names": ["tokens"], "output_names": ["logits"], "do_constant_folding": True, "half": False,
		"weights": ["model.safetensors", "model.pt"],
		"layers": [{"scope": "moe0", "class": "TokenMoE", "experts": 8, "top_k": 2, "expert": "experts.{i}"},
			{"scope": "moe1", "class": "TokenMoE", "experts": 4, "top_k": 1, "expert": "experts.{i}"}],
		"checks": []}
	with open(os.path.join(d, "meta.json"), "w") as f:
		json.dump(meta, f, indent=1)
		f.write("\n")
	for k, v in kept.items():
		assert len(v) < {"moe0": 8, "moe1": 4}[k], f"{k}: the dummy kept every expert"


if __name__ == "__main__":
	if len(sys.argv) != 2:
		sys.exit(f"usage: {sys.argv[0]} OUTDIR")
	main(sys.argv[1])
