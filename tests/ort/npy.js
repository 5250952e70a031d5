'use strict';
// Minimal .npy for the corpus: float32, little-endian, C order; format
// versions 1 (u16 header size) and 2/3 (u32 header size).

const MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]); // \x93NUMPY

function fail(file, what) {
	const e = new Error(`${file}: ${what}`);
	e.npy = true;
	return e;
}

function parse(buf, file) {
	if (buf.length < 10 || !buf.subarray(0, 6).equals(MAGIC))
		throw fail(file, 'not a .npy file (bad magic)');
	const major = buf[6];
	let hlen, start;
	if (major === 1) {
		hlen = buf.readUInt16LE(8);
		start = 10;
	} else if (major === 2 || major === 3) {
		if (buf.length < 12)
			throw fail(file, 'truncated header');
		hlen = buf.readUInt32LE(8);
		start = 12;
	} else {
		throw fail(file, `unsupported .npy version ${major}`);
	}
	if (start + hlen > buf.length)
		throw fail(file, 'truncated header');
	const head = buf.toString('latin1', start, start + hlen);
	const descr = /'descr'\s*:\s*'([^']*)'/.exec(head);
	const order = /'fortran_order'\s*:\s*(True|False)/.exec(head);
	const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(head);
	if (!descr || !order || !shape)
		throw fail(file, 'header lacks descr, fortran_order or shape');
	if (descr[1] !== '<f4')
		throw fail(file, `dtype ${descr[1]} unsupported; save as float32 ('<f4')`);
	if (order[1] !== 'False')
		throw fail(file, 'Fortran order unsupported; save C-contiguous');
	const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s !== '')
		.map((s) => {
			if (!/^\d+$/.test(s))
				throw fail(file, `bad shape entry '${s}'`);
			return Number(s);
		});
	const n = dims.reduce((a, b) => a * b, 1);
	const off = start + hlen;
	if (buf.length - off !== 4 * n)
		throw fail(file, `holds ${buf.length - off} data bytes, shape needs ${4 * n}`);
	const data = new Float32Array(n);
	for (let i = 0; i < n; i++)
		data[i] = buf.readFloatLE(off + 4 * i);
	return { dims, data };
}

function read(file) {
	const fs = require('fs');
	return parse(fs.readFileSync(file), file);
}

// Version 1 header, padded with spaces so the data starts 64-byte aligned.
function serialize(dims, data) {
	const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
	let head = `{'descr': '<f4', 'fortran_order': False, 'shape': ${shape}, }`;
	const pad = 64 - ((10 + head.length + 1) % 64);
	head += ' '.repeat(pad % 64) + '\n';
	const buf = Buffer.alloc(10 + head.length + 4 * data.length);
	MAGIC.copy(buf, 0);
	buf[6] = 1;
	buf[7] = 0;
	buf.writeUInt16LE(head.length, 8);
	buf.write(head, 10, 'latin1');
	for (let i = 0; i < data.length; i++)
		buf.writeFloatLE(data[i], 10 + head.length + 4 * i);
	return buf;
}

function write(file, dims, data) {
	require('fs').writeFileSync(file, serialize(dims, data));
}

module.exports = { parse, read, serialize, write };
