#!/usr/bin/python3
"""Copy an ONNX model with its main graph's nodes in another valid
topological order, drawn at random among the nodes ready at each step.

ONNX asks only that a node come after the producers of what it reads, so
any such order is the same model; tools that sort (onnx-graphsurgeon's
toposort, simplifiers, editors) each leave one of their own, interleaving
an expert's branches and moving Constant nodes up past the dispatch. A
repair must find the same experts, of the same structure, in every one.
A node owning bodies comes after the producers of what they read.

    /usr/bin/python3 tests/gen/reorder.py IN.onnx OUT.onnx [SEED]
"""
import random
import sys

import onnx


def body_reads(g, acc):
	for n in g.node:
		acc.update(n.input)
		for a in n.attribute:
			if a.type == onnx.AttributeProto.GRAPH:
				body_reads(a.g, acc)
			for b in a.graphs:
				body_reads(b, acc)
	return acc


def reorder(model, seed):
	g = model.graph
	nodes = list(g.node)
	prod = {o: i for i, n in enumerate(nodes) for o in n.output if o}
	deps = []
	for i, n in enumerate(nodes):
		reads = set(n.input)
		for a in n.attribute:
			if a.type == onnx.AttributeProto.GRAPH:
				body_reads(a.g, reads)
			for b in a.graphs:
				body_reads(b, reads)
		deps.append({prod[v] for v in reads if v in prod and prod[v] != i})
	users = [[] for _ in nodes]
	left = [len(d) for d in deps]
	for i, d in enumerate(deps):
		for j in d:
			users[j].append(i)
	rng = random.Random(seed)
	ready = [i for i, k in enumerate(left) if k == 0]
	order = []
	while ready:
		k = rng.randrange(len(ready))
		ready[k], ready[-1] = ready[-1], ready[k]
		i = ready.pop()
		order.append(i)
		for u in users[i]:
			left[u] -= 1
			if left[u] == 0:
				ready.append(u)
	if len(order) != len(nodes):
		sys.exit("reorder.py: the graph has a cycle")
	copies = [onnx.NodeProto() for _ in order]
	for c, i in zip(copies, order):
		c.CopyFrom(nodes[i])
	del g.node[:]
	g.node.extend(copies)
	return order != sorted(order)


def main():
	if len(sys.argv) not in (3, 4):
		sys.exit("usage: reorder.py IN.onnx OUT.onnx [SEED]")
	m = onnx.load(sys.argv[1])
	if not reorder(m, int(sys.argv[3]) if len(sys.argv) == 4 else 1):
		sys.exit("reorder.py: the order drawn is the model's own; try another seed")
	onnx.save(m, sys.argv[2])


if __name__ == "__main__":
	main()
