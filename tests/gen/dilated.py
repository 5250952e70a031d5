#!/usr/bin/python3
"""Generate tests/unrepairable/dilated_*: /usr/bin/python3 tests/gen/dilated.py UNREPAIRABLE_DIR

Experts of one layer alike but for their 3x3 convs' dilation, 1 + i // 2
(DiversifiedExpertGroup's scheme, here inside the expert path). A clone
of a present expert stands for a missing one with the wrong dilation,
whose weights still fit, so only the structure can tell:
- dilated_experts: the dummy input keeps experts 0 and 2, whose
  dilations differ in the graph; the checkpoint is a state_dict.
- dilated_alike: the dummy keeps 0 and 1, both dilated 1 like the
  graph's every expert; only the checkpoint, a pickled model (as a
  trainer's best.pt), records the missing ones' dilation.
- gelu_alike: no dilation, but experts 2 and 3 use GELU where 0 and 1
  (kept) use SiLU: a module without tensors, again only in the pickled
  checkpoint.
- gn_eps_alike: GroupNorm experts, 2 and 3 with eps 0.1 where 0 and 1
  (kept) have 1e-5: a GroupNorm's eps is its node's attribute, which a
  clone copies, and only the pickled checkpoint records the others'.
- skip_alike: each expert's SiLU sits in a shortcut switch (`add`, as a
  Bottleneck's), on in 0 and 1 (kept), off in 2 and 3: a bool attribute
  only the pickled checkpoint records.
- scale_alike: each expert's SiLU output times a gain kept as a Python
  float, 1.0 in 0 and 1 (kept), 2.0 in 2 and 3: a constant the kept
  experts' graph holds as 1.0, which only the pickled checkpoint records
  otherwise.
- softplus_alike: each expert's activation a Softplus, beta 1 in 0 and
  1 (kept), 2 in 2 and 3: an int of torch's own layer, which torch
  exports as a plain Softplus for 1 only.
- identity_alike: experts 0 and 1 (kept) are identities, 2 and 3 convs:
  a present expert that computes nothing shows nothing to clone."""
import copy
import json
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moegen as G  # noqa: E402


# kind: (what experts.yaml's comment says, what the refusal must name)
KINDS = {
	"dilated": ("3x3 convs dilated 1, 1, 2, 2", "dilation=(2,2)"),
	"gelu": ("activations SiLU, SiLU, GELU, GELU", "GELU"),
	"gn_eps": ("GroupNorm eps 1e-5, 1e-5, 0.1, 0.1", "has eps 0.1 where expert 0's"),
	"skip": ("shortcut around the SiLU: on, on, off, off", "Skip add=0' where expert 0's"),
	"scale": ("gain after the SiLU: 1, 1, 2, 2", "Scale s=2' where expert 0's"),
	"softplus": ("Softplus beta 1, 1, 2, 2", "Softplus beta=2 threshold=20' where expert 0's"),
	"identity": ("experts 0 and 1 identities, 2 and 3 convs", "expert 0 is its input"),
}


def alter(ex, i, kind):
	"""Expert i of kind: 0 and 1 as every other expert, 2 and 3 otherwise."""
	if kind == "skip":
		ex.conv[2] = G.Skip(ex.conv[2], add=i < 2)
	elif kind == "scale":
		ex.conv[2] = G.Scale(ex.conv[2], s=1.0 if i < 2 else 2.0)
	elif kind == "softplus":
		ex.conv[2] = torch.nn.Softplus(beta=1 if i < 2 else 2)
	elif kind == "gn_eps":
		for gn in ex.modules():
			if isinstance(gn, torch.nn.GroupNorm) and i >= 2:
				gn.eps = 0.1
	elif kind == "gelu":
		if i >= 2:
			ex.conv[2] = torch.nn.GELU()
	else:
		d = 1 + i // 2
		for conv in ex.conv:
			if isinstance(conv, torch.nn.Conv2d) and conv.kernel_size == (3, 3):
				conv.dilation = (d, d)
				conv.padding = (d, d)


def make(out, name, seed, kept_want, pickled, kind="dilated"):
	torch.manual_seed(seed)
	m = G.MoE(8, 4, 2, "gn" if kind == "gn_eps" else "k3")
	for i, ex in enumerate(m.experts):
		alter(ex, i, kind)
	if kind == "identity":
		m.experts[0] = torch.nn.Identity()
		m.experts[1] = torch.nn.Identity()
	net = G.Net([G.stem(3, 8, 1), m])
	tmp = tempfile.mkdtemp()
	G.save_case(tmp, name, net, seed=seed, c=3, hw=16, weights=("model.pt",), nodeless=kind == "identity")
	src = os.path.join(tmp, name)
	meta = json.load(open(os.path.join(src, "meta.json")))
	kept = meta["kept_by_dummy"]["model.1"]
	if kept != kept_want:
		sys.exit(f"{name}: the dummy kept experts {kept}, not {kept_want} (torch changed?): pick another seed")
	dst = os.path.join(out, name)
	os.makedirs(dst, exist_ok=True)
	shutil.copy(os.path.join(src, "broken.onnx"), dst)
	if pickled:
		torch.save({"model": copy.deepcopy(net), "ema": None}, os.path.join(dst, "module.pt"))
	else:
		shutil.copy(os.path.join(src, "model.pt"), os.path.join(dst, "module.pt"))
	comment, refuse = KINDS[kind]
	if not pickled:
		refuse = "sets attribute 'dilations' otherwise than expert"
	with open(os.path.join(dst, "experts.yaml"), "w") as f:
		f.write(f"weights: module.pt\nmoe:\n  - {{scope: model.1, experts: 4, top_k: 2}}  # {comment}\n")
	with open(os.path.join(dst, "refuse.txt"), "w") as f:
		f.write(refuse + "\n")
	meta["generator"] = "tests/gen/dilated.py"
	meta["checkpoint"] = "pickled model" if pickled else "state_dict"
	with open(os.path.join(dst, "meta.json"), "w") as f:
		json.dump(meta, f, indent=1, sort_keys=True)
	shutil.rmtree(tmp)


def main(out):
	torch.set_num_threads(1)
	make(out, "dilated_experts", 3, [0, 2], False)
	make(out, "dilated_alike", 1, [0, 1], True)
	make(out, "gelu_alike", 1, [0, 1], True, "gelu")
	make(out, "gn_eps_alike", 1, [0, 1], True, "gn_eps")
	make(out, "skip_alike", 1, [0, 1], True, "skip")
	make(out, "scale_alike", 1, [0, 1], True, "scale")
	make(out, "softplus_alike", 1, [0, 1], True, "softplus")
	make(out, "identity_alike", 1, [0, 1], True, "identity")


if __name__ == "__main__":
	if len(sys.argv) != 2:
		sys.exit(f"usage: {sys.argv[0]} OUTDIR")
	main(sys.argv[1])
