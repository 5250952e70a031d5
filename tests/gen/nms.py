#!/usr/bin/python3
"""An `nms=True` export: /usr/bin/python3 tests/gen/nms.py OUTDIR

The ultralytics exporter (YOLO-Master's too) wraps the detector for
`nms=True` in a module that takes the raw predictions through a score
threshold (boolean-mask indexing: NonZero), torchvision's NMS
(NonMaxSuppression), a slice to max_det and a pad, and writes them into a
zeros tensor (ScatterND). This is a clean-room module of that shape around
a corpus detector with a small detection head, traced like the corpus (zero
dummy, opset 17, constant folding): broken.onnx loses the experts the dummy
did not route to, dense.onnx is the same wrapper over the dense path.

The tracer bakes the dummy's detection count into the pad, so the export
does not follow eager PyTorch for other inputs; a repair is judged against
dense.onnx in ONNX Runtime instead (tests/nms.sh). Needs Debian's
python3-torch and python3-torchvision."""
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
from torchvision.ops import nms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moegen as G  # noqa: E402


class Head(nn.Module):
	"""Boxes and class scores per position, [B, 4 + nc, H*W]."""

	def __init__(self, c, nc):
		super().__init__()
		self.cv = nn.Conv2d(c, 4 + nc, 1)

	def forward(self, x):
		y = self.cv(x)
		return torch.cat([y[:, :4] * 16, y[:, 4:].sigmoid()], 1).flatten(2)


class NMSWrap(nn.Module):
	def __init__(self, model, nc, conf=0.25, iou=0.7, max_det=30):
		super().__init__()
		self.model, self.nc, self.conf, self.iou, self.max_det = model, nc, conf, iou, max_det

	def forward(self, x):
		pred = self.model(x).transpose(-1, -2)
		boxes, scores = pred.split([4, self.nc], dim=2)
		scores, classes = scores.max(dim=-1)
		max_det = min(pred.shape[1], self.max_det)
		out = torch.zeros(pred.shape[0], max_det, 6)
		for i in range(pred.shape[0]):
			box, cls, score = boxes[i], classes[i], scores[i]
			mask = score > self.conf
			box, score, cls = box[mask], score[mask], cls[mask]
			# class-wise NMS: boxes of each class offset apart
			nmsbox = box / torch.tensor(x.shape[2:]).max() / self.nc
			nmsbox = nmsbox + cls.view(-1, 1).expand(-1, 4) / self.nc
			keep = nms(nmsbox, score, self.iou)[:max_det]
			dets = torch.cat([box[keep], score[keep].view(-1, 1), cls[keep].view(-1, 1).to(out.dtype)], -1)
			out[i] = nn.functional.pad(dets, (0, 0, 0, max_det - dets.shape[0]))
		return out


def main(out):
	os.makedirs(out, exist_ok=True)
	torch.manual_seed(7)
	torch.set_num_threads(1)
	det = G.Net([G.stem(3, 8), G.MoE(8, 4, 2, "bn"), G.stem(8, 16), G.MoE(16, 8, 2, "k3"), Head(16, 3)])
	g = torch.Generator().manual_seed(8)
	G.randomize_norms(det, g)
	x = G.candidates(g, 64, 3, 32)
	G.fit_norms(det, x)
	G.balance(det, x)
	det.eval()
	G.set_dense(det, False)
	net = NMSWrap(det, 3).eval()
	dummy = torch.zeros(1, 3, 32, 32)
	with torch.no_grad(), warnings.catch_warnings():
		warnings.simplefilter("ignore")
		for name, dense in (("broken", False), ("dense", True)):
			G.set_dense(det, dense)
			torch.onnx.export(net, dummy, os.path.join(out, name + ".onnx"), opset_version=17,
				do_constant_folding=True, input_names=["images"], output_names=["output0"])
		G.set_dense(det, False)
	G.write_safetensors(os.path.join(out, "model.safetensors"), det.state_dict())
	with open(os.path.join(out, "experts.yaml"), "w") as f:
		f.write("weights: model.safetensors\nmoe:\n")
		for s, m in G.moe_layers(det):
			f.write(f"  - scope: {s}\n    experts: {len(G.experts_of(m))}\n    top_k: {m.router.k}\n")
	# Inputs that together route to every expert of both layers.
	chosen = G.cover(det, x, 4)
	for i, n in enumerate(chosen):
		np.save(os.path.join(out, f"in_{i}.npy"), x[n:n + 1].numpy().astype("<f4"))
	kept = {s: sorted({int(e) for e in idx.flatten()}) for s, (_, idx, _) in G.route(det, dummy).items()}
	print(f"nms: {len(chosen)} inputs, kept by the dummy {kept}")


if __name__ == "__main__":
	if len(sys.argv) != 2:
		sys.exit(f"usage: {sys.argv[0]} OUTDIR")
	main(sys.argv[1])
