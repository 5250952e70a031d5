#!/usr/bin/python3
"""Make a copy of an ONNX model as a graph simplifier leaves it. The
ultralytics exporter (and so YOLO-Master's) runs onnxslim by default, whose
output differs from the tracer's in ways a repair must not depend on:

- Constant nodes become initializers, and equal initializers one shared
  tensor (GroupNorm's ones and zeros then belong to no expert);
- Identity nodes go;
- nodes of the same op, inputs and attributes become one (common
  subexpressions);
- Shape of a tensor whose shape is static becomes a constant (a folded
  Gather of it is not: onnxslim folds that only with onnxruntime at hand);
- nodes that read only constants are sorted first, before everything
  else (an expert's weight through Unsqueeze then sits above the dispatch).

The graph's function is unchanged. Main graph only; bodies are kept as they
are, and a Constant or Identity a body reads stays.

    /usr/bin/python3 tests/gen/simplify.py IN.onnx OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference


def simplify(model):
	g = model.graph
	keep = {o.name for o in g.output} | {i.name for i in g.input}
	for n in g.node:  # names bodies read from the main graph
		for a in n.attribute:
			for b in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
				keep.update(x for m in b.node for x in m.input)
	ren = {}

	def r(x):
		while x in ren:
			x = ren[x]
		return x

	static = static_shapes(model)
	nodes = []
	for n in g.node:
		n.input[:] = [r(x) for x in n.input]
		if n.domain in ("", "ai.onnx") and n.op_type == "Shape" and n.input[0] in static and n.output[0] not in keep:
			dims = static[n.input[0]]
			a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
			lo, hi = a.get("start", 0), a.get("end", len(dims))
			g.initializer.append(numpy_helper.from_array(np.array(dims[lo:hi], dtype=np.int64), n.output[0]))
			continue
		if n.domain in ("", "ai.onnx") and n.output[0] not in keep:
			if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
				t = onnx.TensorProto()
				t.CopyFrom(n.attribute[0].t)
				t.name = n.output[0]
				g.initializer.append(t)
				continue
			if n.op_type == "Identity":
				ren[n.output[0]] = n.input[0]
				continue
		nodes.append(n)

	# Equal initializers: one tensor.
	first, inits = {}, []
	for t in g.initializer:
		a = numpy_helper.to_array(t)
		k = (t.data_type, tuple(t.dims), a.tobytes())
		if k in first and t.name not in keep:
			ren[t.name] = first[k]
		else:
			first.setdefault(k, t.name)
			inits.append(t)

	# Common subexpressions, in node order (inputs are final by then).
	seen, merged = {}, []
	for n in nodes:
		n.input[:] = [r(x) for x in n.input]
		body = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute)
		k = (n.domain, n.op_type, tuple(n.input), len(n.output),
		     tuple(sorted(a.SerializeToString() for a in n.attribute)))
		if not body and not any(o in keep for o in n.output) and k in seen:
			for a, b in zip(n.output, seen[k].output):
				ren[a] = b
			continue
		seen.setdefault(k, n)
		merged.append(n)
	for n in merged:
		n.input[:] = [r(x) for x in n.input]

	# Nodes of constants only first, each group in its order.
	const = {t.name for t in inits} | {""}
	head, tail = [], []
	for n in merged:
		if all(x in const for x in n.input) and not any(o in keep for o in n.output):
			const.update(n.output)
			head.append(n)
		else:
			tail.append(n)
	del g.node[:]
	g.node.extend(head + tail)
	used = {x for n in g.node for x in n.input} | keep
	del g.initializer[:]
	g.initializer.extend(t for t in inits if t.name in used)
	defined = {o for n in g.node for o in n.output}
	vi = [v for v in g.value_info if v.name in defined]
	del g.value_info[:]
	g.value_info.extend(vi)
	return model


def static_shapes(model):
	"""Value name -> dims, for the values whose shape inference finds static."""
	try:
		inf = shape_inference.infer_shapes(model)
	except Exception:  # an opset newer than this onnx knows: nothing folded
		return {}
	out = {}
	for v in list(inf.graph.value_info) + list(inf.graph.input) + list(inf.graph.output):
		t = v.type.tensor_type
		if t.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in t.shape.dim):
			out[v.name] = [d.dim_value for d in t.shape.dim]
	return out


def main():
	if len(sys.argv) != 3:
		sys.exit(__doc__)
	# No onnx.checker: Debian's onnx 1.12 knows opsets up to 17, the corpus
	# has 18; the repair's own check and ONNX Runtime read the copy.
	onnx.save(simplify(onnx.load(sys.argv[1])), sys.argv[2])


if __name__ == "__main__":
	main()
