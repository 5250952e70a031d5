#!/usr/bin/python3
"""Generate tests/unrepairable/dilated_experts: /usr/bin/python3 tests/gen/dilated.py OUTDIR

Experts of one layer alike but for their 3x3 convs' dilation, 1 + i // 2
(DiversifiedExpertGroup's scheme, here inside the expert path). The
dummy input keeps experts 0 and 2, whose dilations differ: a clone of
either stands for a missing expert with the wrong dilation, whose weights
still fit, so only the structure can tell."""
import json
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moegen as G  # noqa: E402


def main(out):
	torch.set_num_threads(1)
	seed = 3
	torch.manual_seed(seed)
	m = G.MoE(8, 4, 2, "k3")
	for i, ex in enumerate(m.experts):
		d = 1 + i // 2
		for conv in ex.conv:
			if isinstance(conv, torch.nn.Conv2d) and conv.kernel_size == (3, 3):
				conv.dilation = (d, d)
				conv.padding = (d, d)
	net = G.Net([G.stem(3, 8, 1), m])
	tmp = tempfile.mkdtemp()
	G.save_case(tmp, "dilated_experts", net, seed=seed, c=3, hw=16, weights=("model.pt",))
	src = os.path.join(tmp, "dilated_experts")
	meta = json.load(open(os.path.join(src, "meta.json")))
	kept = meta["kept_by_dummy"]["model.1"]
	if kept != [0, 2]:
		sys.exit(f"the dummy kept experts {kept}, not 0 and 2 (torch changed?): pick another seed")
	os.makedirs(out, exist_ok=True)
	shutil.copy(os.path.join(src, "broken.onnx"), out)
	shutil.copy(os.path.join(src, "model.pt"), os.path.join(out, "module.pt"))
	with open(os.path.join(out, "experts.yaml"), "w") as f:
		f.write("weights: module.pt\nmoe:\n  - {scope: model.1, experts: 4, top_k: 2}"
			"  # 3x3 convs dilated 1, 1, 2, 2\n")
	with open(os.path.join(out, "refuse.txt"), "w") as f:
		f.write("sets attribute 'dilations' otherwise than expert\n")
	meta["generator"] = "tests/gen/dilated.py"
	with open(os.path.join(out, "meta.json"), "w") as f:
		json.dump(meta, f, indent=1, sort_keys=True)
	shutil.rmtree(tmp)


if __name__ == "__main__":
	if len(sys.argv) != 2:
		sys.exit(f"usage: {sys.argv[0]} OUTDIR")
	main(sys.argv[1])
