#!/usr/bin/python3
"""The floor of any repair tool built on the Python ONNX stack: onnx.load of
the broken model plus onnx.save of the repaired one (the repaired model is
loaded untimed first, standing in for whatever the tool computes).

    pyfloor.py BROKEN.onnx REPAIRED.onnx OUT.onnx [--external]

Prints the timed seconds (load + save) on standard output."""
import os
import sys
import time

import onnx


def main():
	a = [x for x in sys.argv[1:] if not x.startswith("--")]
	if len(a) != 3:
		sys.exit(__doc__)
	ext = "--external" in sys.argv
	broken, repaired, out = a
	rep = onnx.load(repaired)
	t0 = time.perf_counter()
	m = onnx.load(broken)
	t1 = time.perf_counter()
	if ext:
		onnx.save(rep, out, save_as_external_data=True, all_tensors_to_one_file=True,
			  location=os.path.basename(out) + ".data")
	else:
		onnx.save(rep, out)
	t2 = time.perf_counter()
	del m
	print(f"{t1 - t0 + t2 - t1:.3f}")


if __name__ == "__main__":
	main()
