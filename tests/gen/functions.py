#!/usr/bin/python3
"""Exports whose modules are ONNX functions: /usr/bin/python3 tests/gen/functions.py OUTDIR

torch.onnx.export(export_modules_as_functions=...) keeps each listed
module class as a model-local FunctionProto, called from the graph by a
node of the domain `__main__`; the tracer still drops the experts the zero
dummy does not route to, but inside the function, where no analysis of
the graph looks. testdata/example's network and weights (model.pt), so its
references judge these exports: broken.onnx keeps the MoE layer as a
function, nested.onnx its experts too (functions calling functions), and
dense.onnx is the dense path exported the same way (healthy). Opset 15,
the first torch exports functions at. Needs Debian's python3-torch."""
import os
import sys
import warnings

import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moegen as G  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def export(net, path, funcs):
	with warnings.catch_warnings():
		warnings.simplefilter("ignore")
		torch.onnx.export(net, torch.zeros(1, 8, 16, 16), path, opset_version=15,
			input_names=["images"], output_names=["output0"],
			export_modules_as_functions=funcs)
	m = onnx.load(path)
	onnx.checker.check_model(m)
	assert m.functions, f"{path}: no local function"
	print(f"{path}: functions {[f.name for f in m.functions]}")


def example(dense=False):
	"""A network per export: an export leaves hooks on the modules that
	make torch's function extraction fail the next time."""
	net = G.Net([G.MoE(8, 4, 2, "bn")])
	net.load_state_dict(torch.load(os.path.join(ROOT, "testdata", "example", "model.pt")))
	G.set_dense(net, dense)
	return net.eval()


def main(out):
	os.makedirs(out, exist_ok=True)
	export(example(), os.path.join(out, "broken.onnx"), {G.MoE})
	export(example(), os.path.join(out, "nested.onnx"), {G.MoE, G.Expert})
	export(example(dense=True), os.path.join(out, "dense.onnx"), {G.MoE, G.Expert})


if __name__ == "__main__":
	main(sys.argv[1])
