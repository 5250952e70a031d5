#!/usr/bin/python3
"""Generate the corpus in testdata/: /usr/bin/python3 tests/gen/cases.py OUTDIR [CASE...]

Each case is seeded, so regenerating gives the same weights and references
(the .onnx bytes may change with the torch version that exports them)."""
import copy
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moegen as G  # noqa: E402


def example():
	"""The README's example: one spatial-router MoE layer, BatchNorm experts."""
	return G.Net([G.MoE(8, 4, 2, "bn")]), dict(c=8, hw=16)


def single_gn():
	"""GroupNorm experts: InstanceNormalization + Mul/Add in the export."""
	return G.Net([G.MoE(8, 4, 2, "gn")]), dict(c=8, hw=16)


def detector(k, kinds):
	return G.Net([G.stem(3, 8), G.MoE(8, 4, k, kinds[0]), G.stem(8, 16),
		G.MoE(16, 8, k, kinds[1]), G.stem(16, 16), G.MoE(16, 16, k, kinds[2])])


def detector_k2():
	return detector(2, ("bn", "gn", "k3")), dict(c=3, hw=32, pairs=8)


def detector_k1():
	"""Opset 11: Squeeze/Unsqueeze/ReduceSum carry axes as attributes."""
	return detector(1, ("bn", "dw", "bias")), dict(c=3, hw=32, pairs=16, opset=11)


def dynbatch():
	return G.Net([G.stem(3, 8), G.MoE(8, 8, 2, "bn"), G.stem(8, 8)]), \
		dict(c=3, hw=32, batch=3, dynamic=True)


def sharedstem():
	"""Opset 12; experts are `expert_projections.{i}`, torch.unique dispatch."""
	return G.Net([G.stem(3, 8, 1), G.SharedStemMoE(8, 4, 2)]), \
		dict(c=3, hw=16, opset=12)


def convkinds():
	"""Biased convs, depthwise 3x3 and padded 3x3 kernels in the experts."""
	return G.Net([G.stem(3, 8, 1), G.MoE(8, 4, 2, "bias"), G.stem(8, 8),
		G.MoE(8, 4, 2, "dw"), G.MoE(8, 4, 1, "k3")]), dict(c=3, hw=16)


def script_all(net):
	"""torch 1.13 refuses a scripted submodule inside a traced export ("not
	part of the active trace"), so the whole network is scripted, as users
	do when their MoE layer needs control flow."""
	return torch.jit.script(copy.deepcopy(net))


def scripted_if():
	return G.Net([G.stem(3, 8, 1), G.ScriptedMoE(8, 4, 2, "bias")]), \
		dict(c=3, hw=16, scripted=script_all)


# --- export patterns of the YOLO-Master models (clean-room modules) ----------

def yolo_reshape():
	"""Reshaped indices: the router hands its top-k on as view(B, k) and
	[B, k, 1, 1]; the layer takes reshape(B, -1)[:, :k].long() before the
	dispatch Equal.  Detector-style forward loop: scopes /model.N/."""
	return G.LoopNet([G.stem(3, 8, 1), G.ReshapedIndexMoE(8, 4, 2)]), \
		dict(c=3, hw=16, opset=13)


def yolo_cast():
	"""Casts around the weighted product (out.to(dt) * w.to(dt), then
	(out * w.to(dt)).to(dt)) and index_add_ into a fresh zeros tensor.
	Opset 11: ScatterElements, Squeeze/Unsqueeze with attribute axes."""
	return G.LoopNet([G.stem(3, 8, 1), G.CastMoE(8, 4, 2, style="both"), G.stem(8, 8),
		G.CastMoE(8, 6, 2, "k3", style="after")]), dict(c=3, hw=16, opset=11, pairs=4)


def bare_module():
	"""The MoE module itself is the exported model, as in the PR #74 test:
	node scopes /router/, /experts.1/ ..., checkpoint keys experts.1....,
	scope "" in experts.yaml; input `input`, output `output`; GroupNorm
	experts exported without constant folding, so initializers keep their
	checkpoint names and the GroupNorm affine goes through Unsqueeze."""
	return G.MoE(8, 4, 2, "gn"), dict(c=8, hw=16, names=("input", "output"), fold=False)


def nested_scope():
	"""Two MoE layers two containers deep in one block at model.4: module
	paths model.4.m.0.0.mlp and model.4.m.0.1.mlp, node scopes
	/model.4/m.0/m.0.0/mlp/ and /model.4/m.0/m.0.1/mlp/ (both named `mlp`)."""
	return G.LoopNet([G.stem(3, 8, 1), G.stem(8, 8), G.ConvBNAct(8, 8, 3),
		G.ConvBNAct(8, 8), G.NestedBlock(8, (4, 6), 2)]), \
		dict(c=3, hw=16, opset=14, pairs=4)


def gated_fusion():
	"""A squeeze-excitation gate through Linear layers (Gemm) in front of the
	experts, a static path beside them, and a cross gate (tanh of a
	parameter) that mixes cat([static, routed]): the routed sum feeds a
	Concat and a Mul."""
	return G.LoopNet([G.stem(3, 8, 1), G.GatedFusionMoE(8, 6, 2)]), \
		dict(c=3, hw=16, opset=15, pairs=4)


def needs_transform(net, ins, outs):
	"""The references must tell the transformed weights from the raw top-k."""
	ms = [m for _, m in G.moe_layers(net) if isinstance(m, G.AdaptiveGateMoE)]
	for m in ms:
		m.transform = False
	try:
		with torch.no_grad():
			dd = max((net(t) - o).abs().max().item() for t, o in zip(ins, outs))
	finally:
		for m in ms:
			m.transform = True
	if dd <= 1e-2:
		sys.exit(f"untransformed weights differ from the references by only {dd}")
	return f"raw top-k weights instead of the transformed ones: max abs diff {dd:.3g}"


def adaptive_gate():
	"""Post-TopK weight transform: a complexity estimate keeps 1..k slots per
	image, the weights are masked, renormalised with a clamped sum and
	reshaped; dispatch mask (idx == i) & (w > 0); the rows' weights are
	gathered from the transformed tensor."""
	return G.LoopNet([G.stem(3, 8, 1), G.AdaptiveGateMoE(8, 6, 3)]), \
		dict(c=3, hw=16, opset=16, pairs=4, checks=(needs_transform,))


def needs_eps(net, ins, outs):
	"""The references must tell BatchNorm eps 1e-3 from the default 1e-5."""
	bns = [b for _, m in G.moe_layers(net) for b in G.experts_of(m).modules()
		if isinstance(b, torch.nn.BatchNorm2d)]
	for b in bns:
		assert b.eps == 1e-3
		b.eps = 1e-5
	try:
		with torch.no_grad():
			dd = max((net(t) - o).abs().max().item() for t, o in zip(ins, outs))
	finally:
		for b in bns:
			b.eps = 1e-3
	if dd <= 1e-3:
		sys.exit(f"BatchNorm eps 1e-5 instead of 1e-3 changes the references by only {dd}")
	return f"experts folded with eps 1e-5 instead of 1e-3: max abs diff {dd:.3g}"


def fp16_eps():
	"""An fp16 trainer checkpoint (best.pt: the pickled model in half
	precision under 'model', 'ema' None), experts Conv+BN(eps 1e-3)+SiLU
	folded by the exporter into onnx::Conv_N weights."""
	return G.LoopNet([G.ConvBNAct(3, 8, 3, eps=1e-3), G.EpsMoE(8, 4, 2),
		G.ConvBNAct(8, 8, 3, 2, eps=1e-3)]), \
		dict(c=3, hw=16, opset=12, half=True, weights=("best.pt",), checks=(needs_eps,))


def needs_own_eps(net, ins, outs):
	"""The references must tell each expert's own BatchNorm eps from one
	eps for all (the template's, whichever expert the dummy keeps)."""
	bns = [b for _, m in G.moe_layers(net) for b in G.experts_of(m).modules()
		if isinstance(b, torch.nn.BatchNorm2d)]
	own = [b.eps for b in bns]
	dd = float("inf")
	try:
		for e in sorted(set(own)):
			for b in bns:
				b.eps = e
			with torch.no_grad():
				dd = min(dd, max((net(t) - o).abs().max().item() for t, o in zip(ins, outs)))
	finally:
		for b, e in zip(bns, own):
			b.eps = e
	if dd <= 1e-3:
		sys.exit(f"one eps for every expert changes the references by only {dd}")
	return f"every expert with one expert's eps: max abs diff at least {dd:.3g}"


def own_eps():
	"""fp16_eps with an eps of its own per expert (1e-1, 2e-2, 2e-2, 1e-3):
	the graph shows only the kept experts' folds, the pickled checkpoint
	records every BatchNorm's eps, and a missing expert is folded with its
	own, not the template's."""
	return G.LoopNet([G.ConvBNAct(3, 8, 3, eps=1e-3), G.EpsMoE(8, 4, 2, eps=(1e-1, 2e-2, 2e-2, 1e-3)),
		G.ConvBNAct(8, 8, 3, 2, eps=1e-3)]), \
		dict(c=3, hw=16, opset=12, half=True, weights=("best.pt",), checks=(needs_own_eps,))


def scripted_gather():
	"""torch.jit.script of the traced modules' own dispatch (torch.where,
	index_add_): each expert's If body gathers its rows (NonZero, Split,
	Squeeze, Gather) and its weights, and scatters the weighted rows back."""
	return G.Net([G.stem(3, 8, 1), G.ScriptedGatherMoE(8, 4, 2, "bn")]), \
		dict(c=3, hw=16, opset=16, scripted=script_all)


def batch2():
	"""A static batch of 2: the sparse dispatch folds it into grouped Convs."""
	return G.Net([G.stem(3, 8), G.MoE(8, 8, 2, "gn"), G.stem(8, 8), G.MoE(8, 4, 2, "dw")]), \
		dict(c=3, hw=16, batch=2)


def needs_own_norms(net, ins, outs):
	"""The references must tell each expert's own norms from the template's
	(the initial values every present expert shares)."""
	ns = [n for _, m in G.moe_layers(net) for n in G.experts_of(m).modules()
		if isinstance(n, (torch.nn.GroupNorm, torch.nn.BatchNorm2d))]
	saved = [copy.deepcopy(n.state_dict()) for n in ns]
	for n in ns:
		n.reset_parameters()
	try:
		with torch.no_grad():
			dd = max((net(t) - o).abs().max().item() for t, o in zip(ins, outs))
	finally:
		for n, sd in zip(ns, saved):
			n.load_state_dict(sd)
	if dd <= 1e-2:
		sys.exit(f"the template's norms in every expert change the references by only {dd}")
	return f"every expert with the template's norms: max abs diff {dd:.3g}"


def dead_norms():
	"""The experts the dummy reaches keep their GroupNorms' initial values
	(experts no gradient reached), the others are trained: the exporter
	merges the equal initializers, so every present expert but the first
	reads its norms through an Identity at the top of the graph, and a
	missing expert's norms are its own, not the template's."""
	return G.Net([G.stem(3, 8), G.MoE(8, 6, 2, "gn", hidden=12)]), \
		dict(c=3, hw=16, dead_present=True, checks=(needs_own_norms,))


def inits_as_inputs():
	"""keep_initializers_as_inputs=True (IR 3 style, and some deployment
	scripts): every weight is a graph input too, with its initializer as
	the default."""
	return G.Net([G.stem(3, 8), G.MoE(8, 4, 2, "bn"), G.stem(8, 8), G.MoE(8, 6, 2, "k3")]), \
		dict(c=3, hw=16, opset=13, inits_as_inputs=True)


def dead_bn():
	"""dead_norms with BatchNorm experts, folded by the exporter: the
	present experts' folded biases are all zeros (merged, read through
	Identity nodes), and their weights fold alike with either of an
	expert's two BatchNorms (both at their initial values, one size): the
	module tree decides, a BatchNorm folds into the conv before it."""
	return G.Net([G.stem(3, 8), G.MoE(8, 4, 2, "bn"), G.stem(8, 8), G.MoE(8, 6, 2, "bn")]), \
		dict(c=3, hw=16, dead_present=True, checks=(needs_own_norms,),
			half_refused="every present expert's BatchNorm is at its initial value, where "
			"float16 cannot tell one eps from another, and the missing experts' are not")


def old_opset():
	"""Opset 10, as exports for older runtimes ask: index_add_ scatters with
	Scatter (ScatterElements' name before opset 11), and the repair has no
	GatherElements to pick a slot's expert with."""
	return G.LoopNet([G.stem(3, 8, 1), G.CastMoE(8, 4, 2, style="both"), G.stem(8, 8),
		G.CastMoE(8, 6, 2, "k3", style="after")]), dict(c=3, hw=16, opset=10, pairs=4)


def traced_masksum():
	"""ScriptedMoE's `if bool(m.sum() > 0)` dispatch traced: the experts the
	dummy reaches run on the whole input, weighted by a mask sum, in the
	main graph; a sort may put their nodes above the dispatch. Dynamic
	batch: the first layer's GroupNorm experts read shapes of their own
	values, the second layer views the weight by its expert output's
	Shape, a read of that output outside the expert."""
	return G.LoopNet([G.stem(3, 8, 1), G.MaskSumMoE(8, 4, 2, "gn"), G.stem(8, 8),
		G.MaskSumMoE(8, 6, 2, "bn", shape_view=True)]), dict(c=3, hw=16, dynamic=True, batch=3)


def traced_masksum_k1():
	"""traced_masksum at top-1, the layer the model: the dummy keeps one
	expert, which no sibling sets apart from a stem all experts would
	share. In the graph's order the dispatch comes first; experts.yaml's
	`input:` (the graph input, which name-free copies keep) frees the
	repair from that order."""
	return G.MaskSumMoE(8, 6, 1, "bn"), dict(c=8, hw=16, yaml_input="images")

CASES = {f.__name__: f for f in (example, single_gn, detector_k2, detector_k1,
	dynbatch, sharedstem, convkinds, scripted_if, yolo_reshape, yolo_cast, bare_module,
	nested_scope, gated_fusion, adaptive_gate, fp16_eps, scripted_gather, batch2, dead_norms,
	inits_as_inputs, dead_bn, own_eps, old_opset, traced_masksum, traced_masksum_k1)}


def main(argv):
	if len(argv) < 2 or any(a not in CASES for a in argv[2:]):
		sys.exit(f"usage: {argv[0]} OUTDIR [{'|'.join(CASES)}...]")
	names = [n for n in CASES if len(argv) == 2 or n in argv[2:]]
	if len(names) > 1:
		# One process per case: TorchScript reuses the types it compiled
		# for an earlier case, and a reused type's nodes get other scope
		# names (/model/1/1/Conv instead of /model/1/experts.1/Conv), so a
		# scripted case would depend on what ran before it.
		for name in names:
			subprocess.run([sys.executable, os.path.abspath(__file__), argv[1], name], check=True)
		return
	torch.set_num_threads(1)
	name = names[0]
	seed = list(CASES).index(name)
	torch.manual_seed(seed)
	net, kw = CASES[name]()
	G.save_case(argv[1], name, net, seed=seed, **kw)


if __name__ == "__main__":
	main(sys.argv)
