#!/usr/bin/python3
"""Generate the corpus in testdata/: /usr/bin/python3 tests/gen/cases.py OUTDIR [CASE...]

Each case is seeded, so regenerating gives the same weights and references
(the .onnx bytes may change with the torch version that exports them)."""
import copy
import os
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


def batch2():
	"""A static batch of 2: the sparse dispatch folds it into grouped Convs."""
	return G.Net([G.stem(3, 8), G.MoE(8, 8, 2, "gn"), G.stem(8, 8), G.MoE(8, 4, 2, "dw")]), \
		dict(c=3, hw=16, batch=2)


CASES = {f.__name__: f for f in (example, single_gn, detector_k2, detector_k1,
	dynbatch, sharedstem, convkinds, scripted_if, batch2)}


def main(argv):
	if len(argv) < 2 or any(a not in CASES for a in argv[2:]):
		sys.exit(f"usage: {argv[0]} OUTDIR [{'|'.join(CASES)}...]")
	torch.set_num_threads(1)
	for seed, name in enumerate(CASES):
		if len(argv) > 2 and name not in argv[2:]:
			continue
		torch.manual_seed(seed)
		net, kw = CASES[name]()
		G.save_case(argv[1], name, net, seed=seed, **kw)


if __name__ == "__main__":
	main(sys.argv)
