#!/usr/bin/env node
'use strict';
// ONNX Runtime latency of models run on the same input.
//
//   latency.js A.onnx B.onnx [C.onnx ...] INPUT.npy [--runs N]
//
// Every session runs on the same input (CPU, one thread), interleaved run
// by run so machine noise hits all alike; after a warm-up, prints the
// median milliseconds of each model, then the ratio of each but the last
// to the last (the median of the per-round ratios): "a_ms b_ms a/b" for
// two (a repaired model against the dense export), "a_ms b_ms c_ms a/c
// b/c" for three.
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
	if (pos.length < 3 || !pos[pos.length - 1].endsWith('.npy') || !(runs > 0)) {
		process.stderr.write('usage: latency.js A.onnx B.onnx [C.onnx ...] INPUT.npy [--runs N]\n');
		process.exit(2);
	}
	const x = npy.read(pos.pop());
	ort.env.logLevel = 'fatal';
	const opt = { executionProviders: ['cpu'], intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 4 };
	const sess = [];
	for (const m of pos)
		sess.push(await ort.InferenceSession.create(m, opt));
	const feed = sess.map((s) => ({ [s.inputNames[0]]: new ort.Tensor('float32', x.data, x.dims) }));
	const t = sess.map(() => []);
	const warm = Math.max(10, runs >> 3);
	const order = sess.map((_, j) => j);
	for (let i = 0; i < warm + runs; i++) {
		// Rotate which goes first: none always runs on a warmer cache.
		for (let q = 0; q < order.length; q++) {
			const j = order[(q + i) % order.length];
			const t0 = process.hrtime.bigint();
			await sess[j].run(feed[j]);
			const dt = Number(process.hrtime.bigint() - t0) / 1e6;
			if (i >= warm)
				t[j].push(dt);
		}
	}
	const med = t.map(median);
	// Each ratio is the median of the rounds' own ratios: the two runs
	// of a round are back to back, so a slow stretch of the machine
	// (another tenant, a frequency change) scales both and cancels, where
	// a ratio of the two medians keeps it (0.93 to 1.06 on one pair).
	const last = t[t.length - 1];
	const ratio = t.slice(0, -1).map((a) => median(a.map((v, i) => v / last[i])));
	console.log([...med.map((m) => m.toFixed(4)), ...ratio.map((r) => r.toFixed(3))].join(' '));
}

main().catch((e) => {
	process.stderr.write(`latency.js: ${e.message}\n`);
	process.exit(2);
});
