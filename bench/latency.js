#!/usr/bin/env node
'use strict';
// ONNX Runtime latency of a repaired model against the dense export.
//
//   latency.js REPAIRED.onnx DENSE.onnx INPUT.npy [--runs N]
//
// Both sessions run on the same input (CPU, one thread), interleaved run by
// run so machine noise hits both alike; after a warm-up, prints the median
// milliseconds of each and their ratio: "repaired_ms dense_ms ratio".
const path = require('path');
const { createRequire } = require('module');
const npy = require(path.join(__dirname, '..', 'tests', 'ort', 'npy.js'));

const ort = createRequire(path.join(__dirname, '..', 'package.json'))('onnxruntime-node');

function median(v) {
	const s = [...v].sort((a, b) => a - b);
	const m = s.length >> 1;
	return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function main() {
	const argv = process.argv.slice(2);
	let runs = 300;
	const pos = [];
	for (let i = 0; i < argv.length; i++) {
		if (argv[i] === '--runs')
			runs = Number(argv[++i]);
		else
			pos.push(argv[i]);
	}
	if (pos.length !== 3 || !(runs > 0)) {
		process.stderr.write('usage: latency.js REPAIRED.onnx DENSE.onnx INPUT.npy [--runs N]\n');
		process.exit(2);
	}
	const x = npy.read(pos[2]);
	ort.env.logLevel = 'fatal';
	const opt = { executionProviders: ['cpu'], intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 4 };
	const sess = [await ort.InferenceSession.create(pos[0], opt), await ort.InferenceSession.create(pos[1], opt)];
	const feed = sess.map((s) => ({ [s.inputNames[0]]: new ort.Tensor('float32', x.data, x.dims) }));
	const t = [[], []];
	const warm = Math.max(10, runs >> 3);
	for (let i = 0; i < warm + runs; i++) {
		// Alternate which goes first: neither always runs on a warmer cache.
		for (const j of i % 2 ? [1, 0] : [0, 1]) {
			const t0 = process.hrtime.bigint();
			await sess[j].run(feed[j]);
			const dt = Number(process.hrtime.bigint() - t0) / 1e6;
			if (i >= warm)
				t[j].push(dt);
		}
	}
	const r = median(t[0]), d = median(t[1]);
	console.log(`${r.toFixed(4)} ${d.toFixed(4)} ${(r / d).toFixed(3)}`);
}

main().catch((e) => {
	process.stderr.write(`latency.js: ${e.message}\n`);
	process.exit(2);
});
