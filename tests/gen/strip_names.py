#!/usr/bin/python3
"""Make a name-free copy of an ONNX model, as old exporters (PyTorch <= 1.12)
and renaming tools leave them: every node is named <OpType>_<N> (N counting
through the graph and its subgraphs), every intermediate value is renumbered
("100", "101", ...); initializer names and the graph's input and output
names are kept.

    /usr/bin/python3 tests/gen/strip_names.py IN.onnx OUT.onnx
"""
import sys

import onnx


def strip(model):
	g = model.graph
	keep = {i.name for i in g.initializer} | {i.name for i in g.input} | {o.name for o in g.output}
	ren = {}
	count = [0, 100]

	def subgraphs(graph):
		for n in graph.node:
			for a in n.attribute:
				yield from ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))

	def keep_subgraph_names(graph):
		for sub in subgraphs(graph):
			keep.update(i.name for i in sub.initializer)
			keep_subgraph_names(sub)

	def fresh():
		# Scripted exports name initializers by number too ("311"): a new
		# name must not be one that is kept.
		while str(count[1]) in keep:
			count[1] += 1
		count[1] += 1
		return str(count[1] - 1)

	def rename_values(graph):
		for n in graph.node:
			for i, o in enumerate(n.output):
				if o and o not in keep and o not in ren:
					ren[o] = fresh()
			for a in n.attribute:
				for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
					rename_values(sub)

	keep_subgraph_names(g)

	def apply(graph):
		for n in graph.node:
			n.name = f"{n.op_type}_{count[0]}"
			count[0] += 1
			for i, x in enumerate(n.input):
				if x in ren:
					n.input[i] = ren[x]
			for i, x in enumerate(n.output):
				if x in ren:
					n.output[i] = ren[x]
			for a in n.attribute:
				for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
					apply(sub)
		for vi in list(graph.value_info) + list(graph.output) + list(graph.input):
			if vi.name in ren:
				vi.name = ren[vi.name]

	rename_values(g)
	apply(g)
	return model


def main(argv):
	if len(argv) != 3:
		sys.exit(__doc__)
	m = onnx.load(argv[1], load_external_data=False)
	onnx.save(strip(m), argv[2])


if __name__ == "__main__":
	main(sys.argv)
