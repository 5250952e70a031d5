#!/usr/bin/env node
'use strict';
// ONNX Runtime's structural check: creating an inference session runs its
// graph resolution (every input defined, types and shapes inferred against
// the operator schemas of the model's opset) and fails on what it cannot
// accept. For opsets newer than Debian's python3-onnx knows, this is the
// checker (tests/onnx-checker.sh).
//
//   load.js MODEL...
//
// One line per model, "ok: MODEL" or "FAIL: MODEL: reason"; exit 0 iff every
// model loads, 1 otherwise, 2 when onnxruntime-node is missing.

const path = require('path');
const { createRequire } = require('module');

const ROOT = path.resolve(__dirname, '..', '..');

function loadOrt() {
	try {
		return createRequire(path.join(ROOT, 'package.json'))('onnxruntime-node');
	} catch (e) {
		if (e.code !== 'MODULE_NOT_FOUND')
			throw e;
		process.stderr.write('load.js: onnxruntime-node missing: run '
			+ `npm install --ignore-scripts in ${ROOT}\n`);
		process.exit(2);
	}
}

async function main() {
	const models = process.argv.slice(2);
	if (!models.length) {
		process.stderr.write('usage: load.js MODEL...\n');
		process.exit(2);
	}
	const ort = loadOrt();
	ort.env.logLevel = 'fatal';
	let bad = 0;
	for (const m of models) {
		try {
			// Optimizations off: the check is of the graph as written,
			// not of what the optimizer makes of it.
			const s = await ort.InferenceSession.create(m, { executionProviders: ['cpu'],
				graphOptimizationLevel: 'disabled', logSeverityLevel: 4 });
			if (typeof s.release === 'function')
				await s.release();
			console.log(`ok: ${m}`);
		} catch (e) {
			bad++;
			console.log(`FAIL: ${m}: ${String(e && e.message || e).split('\n')[0]}`);
		}
	}
	process.exit(bad ? 1 : 0);
}

main().catch((e) => {
	process.stderr.write(`load.js: ${e.stack || e}\n`);
	process.exit(2);
});
