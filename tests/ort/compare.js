#!/usr/bin/env node
'use strict';
// Run MODEL in ONNX Runtime (CPU) on every CASEDIR/in_N.npy and report the
// largest absolute difference from CASEDIR/out_N.npy.
//
//   compare.js MODEL CASEDIR [--max TOL | --min TOL | --right | --wrong] [--dump DIR]
//
// --max TOL: exit 0 iff every pair differs by at most TOL (a right model).
// --min TOL: exit 0 iff some pair differs by more than TOL or the runtime
//            fails (a wrong model; crashing counts as wrong).
// --right, --wrong: the same with the case's own tolerance: with
//            CASEDIR/ref.json (real exports, whose float32 noise grows with
//            the outputs), max(1e-4, 1.5 x dense_rel) of the largest
//            reference value, as shared/yolo-master/README.md judges;
//            else 1e-4.
// Without either, exit 0 after reporting.  Exit 2: usage or unreadable file.
// --dump DIR writes the runtime's outputs as DIR/got_N.npy; with --dump and
// no judgement, CASEDIR needs no out_N.npy (outputs to judge others by).

const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');
const npy = require('./npy.js');

const ROOT = path.resolve(__dirname, '..', '..');
const USAGE = 'usage: compare.js MODEL CASEDIR [--max TOL | --min TOL | --right | --wrong] [--dump DIR]';

function usage(msg) {
	process.stderr.write(`compare.js: ${msg}\n${USAGE}\n`);
	process.exit(2);
}

function args(argv) {
	const a = { mode: null, tol: 0, pos: [], dump: null };
	for (let i = 0; i < argv.length; i++) {
		const s = argv[i];
		if (s === '--max' || s === '--min') {
			if (a.mode)
				usage('give one of --max, --min, --right and --wrong');
			const t = Number(argv[++i]);
			if (!(t >= 0))
				usage(`${s} needs a non-negative number`);
			a.mode = s.slice(2);
			a.tol = t;
		} else if (s === '--right' || s === '--wrong') {
			if (a.mode)
				usage('give one of --max, --min, --right and --wrong');
			a.mode = s === '--right' ? 'max' : 'min';
			a.tol = null;
		} else if (s === '--dump') {
			if (i + 1 >= argv.length)
				usage('--dump needs a directory');
			a.dump = argv[++i];
		} else if (s.startsWith('--')) {
			usage(`unknown option ${s}`);
		} else {
			a.pos.push(s);
		}
	}
	if (a.pos.length !== 2)
		usage('need MODEL and CASEDIR');
	return a;
}

// Resolved from the source root, not the cwd: make check runs elsewhere.
function loadOrt() {
	try {
		return createRequire(path.join(ROOT, 'package.json'))('onnxruntime-node');
	} catch (e) {
		if (e.code !== 'MODULE_NOT_FOUND')
			throw e;
		process.stderr.write('compare.js: onnxruntime-node missing: run '
			+ `npm install --ignore-scripts in ${ROOT}\n`);
		process.exit(2);
	}
}

function pairs(dir, needOut) {
	let names;
	try {
		names = fs.readdirSync(dir);
	} catch (e) {
		usage(`${dir}: cannot read case directory (${e.code})`);
	}
	const ns = names.map((f) => /^in_(\d+)\.npy$/.exec(f)).filter(Boolean)
		.map((m) => Number(m[1])).sort((x, y) => x - y);
	if (!ns.length)
		usage(`${dir}: no in_N.npy reference inputs`);
	for (const n of ns)
		if (needOut && !names.includes(`out_${n}.npy`))
			usage(`${dir}: in_${n}.npy has no out_${n}.npy`);
	return ns;
}

function readNpy(file) {
	try {
		return npy.read(file);
	} catch (e) {
		usage(e.npy ? e.message : `${file}: cannot read (${e.code || e.message})`);
	}
}

function maxDiff(got, want) {
	let m = 0;
	for (let i = 0; i < want.length; i++) {
		const d = Math.abs(got[i] - want[i]);
		if (!(d <= m))
			m = Number.isNaN(d) ? Infinity : d; // NaN output is as wrong as it gets
	}
	return m;
}

async function main() {
	const a = args(process.argv.slice(2));
	const [model, dir] = a.pos;
	try {
		fs.accessSync(model, fs.constants.R_OK);
	} catch (e) {
		usage(`${model}: cannot read model (${e.code})`);
	}
	const ns = pairs(dir, a.mode || !a.dump);
	const refs = ns.map((n) => [readNpy(path.join(dir, `in_${n}.npy`)),
		fs.existsSync(path.join(dir, `out_${n}.npy`)) ? readNpy(path.join(dir, `out_${n}.npy`)) : null]);
	if (a.tol === null)
		a.tol = caseTolerance(dir, refs);
	if (a.dump)
		fs.mkdirSync(a.dump, { recursive: true });
	const ort = loadOrt();

	let worst = 0;
	let failed = null;
	let sess = null;
	try {
		// Runtime errors are reported per pair below; ORT's own log would
		// repeat them as multi-line noise.
		ort.env.logLevel = 'fatal';
		sess = await ort.InferenceSession.create(model, { executionProviders: ['cpu'],
			intraOpNumThreads: 1, logSeverityLevel: 4 });
	} catch (e) {
		failed = `runtime fails to load the model: ${oneLine(e)}`;
		console.log(failed);
	}
	for (let i = 0; sess && i < ns.length; i++) {
		const [inp, want] = refs[i];
		let line;
		try {
			const feed = { [sess.inputNames[0]]: new ort.Tensor('float32', inp.data, inp.dims) };
			const res = await sess.run(feed);
			const got = res[sess.outputNames[0]];
			if (a.dump)
				npy.write(path.join(a.dump, `got_${ns[i]}.npy`), got.dims.map(Number), got.data);
			const gd = got.dims.map(Number);
			if (!want) {
				line = `pair ${ns[i]}: output [${gd}] written`;
			} else if (gd.join(',') !== want.dims.join(',')) {
				worst = Infinity;
				line = `pair ${ns[i]}: shape [${gd}] but reference [${want.dims}]`;
			} else {
				const d = maxDiff(got.data, want.data);
				worst = Math.max(worst, d);
				line = `pair ${ns[i]}: max abs diff ${d.toExponential(3)}`;
			}
		} catch (e) {
			failed = failed || `runtime fails on pair ${ns[i]}`;
			line = `pair ${ns[i]}: runtime error: ${oneLine(e)}`;
		}
		console.log(line);
	}

	const what = failed ? `${failed}` : refs.every((r) => !r[1]) ? 'outputs written'
		: `max abs diff ${worst.toExponential(3)}`;
	let ok = true;
	let verdict = '';
	if (a.mode === 'max') {
		ok = !failed && worst <= a.tol;
		verdict = ok ? `: right (<= ${a.tol})` : `: NOT right (want <= ${a.tol})`;
	} else if (a.mode === 'min') {
		ok = !!failed || worst > a.tol;
		verdict = ok ? `: wrong as expected (> ${a.tol} or runtime failure)`
			: `: NOT wrong (want > ${a.tol})`;
	}
	console.log(`${path.basename(model)} over ${ns.length} pairs: ${what}${verdict}`);
	process.exit(ok ? 0 : 1);
}

function caseTolerance(dir, refs) {
	const file = path.join(dir, 'ref.json');
	if (!fs.existsSync(file))
		return 1e-4;
	let r;
	try {
		r = JSON.parse(fs.readFileSync(file, 'utf8'));
	} catch (e) {
		usage(`${file}: not JSON (${e.message})`);
	}
	if (!(r.dense_rel >= 0))
		usage(`${file}: no dense_rel`);
	let m = 0;
	for (const [, want] of refs)
		for (const x of want.data)
			m = Math.max(m, Math.abs(x));
	return Math.max(1e-4, 1.5 * r.dense_rel) * m;
}

function oneLine(e) {
	return String(e && e.message || e).split('\n')[0];
}

main().catch((e) => {
	process.stderr.write(`compare.js: ${e.stack || e}\n`);
	process.exit(2);
});
