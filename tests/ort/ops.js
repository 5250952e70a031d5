#!/usr/bin/env node
// Counts op types in an ONNX model, subgraphs included: a few lines of
// protobuf wire format, so tests need no Python ONNX. Prints JSON; with
// --list, one line per node instead ("op name: inputs -> outputs", bodies
// indented), the form the golden files keep.
'use strict';
const fs = require('fs');

function* fields(buf, start, end) {
  let p = start;
  const varint = () => {
    let v = 0n, s = 0n;
    for (;;) {
      if (p >= end) throw new Error('truncated varint');
      const b = buf[p++];
      v |= BigInt(b & 0x7f) << s;
      if (!(b & 0x80)) return v;
      s += 7n;
    }
  };
  while (p < end) {
    const key = Number(varint()), f = key >> 3, wt = key & 7;
    if (wt === 0) { varint(); yield [f, wt]; }
    else if (wt === 1) { p += 8; yield [f, wt]; }
    else if (wt === 5) { p += 4; yield [f, wt]; }
    else if (wt === 2) {
      const n = Number(varint());
      if (p + n > end) throw new Error('length past end');
      yield [f, wt, p, p + n];
      p += n;
    } else throw new Error('bad wire type ' + wt);
  }
}

const list = process.argv.includes('--list');
const lines = [];

function graph(buf, s, e, count, indent) {
  for (const [f, wt, a, b] of fields(buf, s, e)) {
    if (f !== 1 || wt !== 2) continue; // GraphProto.node
    let op = '', name = '';
    const ins = [], outs = [], bodies = [];
    for (const [nf, nwt, na, nb] of fields(buf, a, b)) {
      const str = () => buf.toString('utf8', na, nb);
      if (nwt !== 2) continue;
      if (nf === 1) ins.push(str());
      else if (nf === 2) outs.push(str());
      else if (nf === 3) name = str();
      else if (nf === 4) op = str();
      else if (nf === 5) // NodeProto.attribute: AttributeProto.g / graphs
        for (const [af, awt, aa, ab] of fields(buf, na, nb))
          if ((af === 6 || af === 11) && awt === 2) bodies.push([aa, ab]);
    }
    count[op] = (count[op] || 0) + 1;
    lines.push(`${indent}${op} ${name}: ${ins.join(', ')} -> ${outs.join(', ')}`);
    for (const [aa, ab] of bodies) graph(buf, aa, ab, count, indent + '  ');
  }
}

const buf = fs.readFileSync(process.argv[2]);
const count = {};
for (const [f, wt, a, b] of fields(buf, 0, buf.length))
  if (f === 7 && wt === 2) graph(buf, a, b, count, ''); // ModelProto.graph
console.log(list ? lines.join('\n') : JSON.stringify(count));
