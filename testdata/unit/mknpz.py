#!/usr/bin/python3
# Regenerates the .npz/.npy fixtures of tests/unit/check_npz.c (run from
# this folder with Debian's python3-numpy). Kept tiny on purpose.
import os
import numpy as np

def arrays():
    return {
        'model.1.experts.0.conv.0.weight': np.arange(24, dtype='<f4').reshape(2, 3, 4) / 8,
        'model.1.experts.0.conv.0.bias': np.array([1.5, -2.25], dtype='<f2'),
        'steps': np.array(7, dtype='<i8'),
        'mask': np.array([True, False, True]),
        'bytes': np.arange(5, dtype='|u1'),
        'i32': np.array([[-1, 2]], dtype='<i4'),
        'f64': np.array([0.1], dtype='<f8'),
        'empty': np.zeros((0, 3), dtype='<f4'),
    }

os.makedirs('npz/dir', exist_ok=True)
np.savez('npz/plain.npz', **arrays())
np.savez_compressed('npz/compressed.npz', **arrays())
for k, v in list(arrays().items())[:3]:
    np.save('npz/dir/' + k + '.npy', v)
os.makedirs('npz/v2', exist_ok=True)
with open('npz/v2/u16.npy', 'wb') as f:
    np.lib.format.write_array(f, np.array([3, 4], dtype='<u2'), version=(2, 0))
