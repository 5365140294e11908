// The drawing pad's preprocessing checked offline against the hosted digits model, without a
// browser or a cluster:
//
//     node app/web/e2e/digits-eval.mjs [-v]        # -v: every drawn digit's 8×8 row as well
//
// 1. the model's integer forward pass (PROTOCOL §5, Mlp; scripts/digits-model.py) written again
//    here, held to the 450 held-out rows (models/digits-heldout.safetensors): the same logits bit
//    for bit and the accuracy digits-model.py recorded in the model's metadata;
// 2. the digits of e2e/digit-strokes.mjs replayed as the end-to-end test replays them (Playwright
//    moves the mouse in `steps` straight moves between a stroke's points; the pad records each
//    pointer position) and turned into rows by the page's own code (src/digits.ts,
//    `rowOfStrokes`, transpiled with esbuild): each digit's class, its row's maximum and ink
//    against the training data's, and what the pad's former preprocessing (the 256 px canvas with
//    its 21 px pen scaled down) made of the same strokes;
// 3. perturbed copies of each digit (shifted, scaled, stretched, turned a little, the hand
//    shaking, the mouse moved in other steps), read right at least 90 % of the time.
//
// Exits 1 when a digit is misread or the perturbed copies fall under 90 %.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { transform } from 'esbuild';
import { DIGIT_STROKES } from './digit-strokes.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..', '..');
const verbose = process.argv.includes('-v');
/** The pad's canvas side (index.html), in its pixels. */
const PAD = 256;
/** Perturbed copies of each digit, and the share of them that must be read right. */
const VARIANTS = 50;
const NEED = 0.9;

// ---------------------------------------------------------------- the page's preprocessing

const ts = readFileSync(join(root, 'app/web/src/digits.ts'), 'utf8');
const { code } = await transform(ts, { loader: 'ts', format: 'esm', target: 'es2022' });
const { rowOfStrokes, SIDE } = await import(`data:text/javascript;base64,${Buffer.from(code).toString('base64')}`);

// ---------------------------------------------------------------- the model

/** A safetensors file's tensors: name → { dtype, shape, data (a typed array) }, and metadata. */
function safetensors(path) {
  const b = readFileSync(path);
  const n = Number(b.readBigUInt64LE(0));
  const header = JSON.parse(b.subarray(8, 8 + n).toString('utf8'));
  const types = { I8: Int8Array, U8: Uint8Array, I32: Int32Array };
  const out = { meta: header.__metadata__ ?? {} };
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [a, z] = t.data_offsets;
    const T = types[t.dtype];
    if (!T) throw new Error(`${path}: ${name} is ${t.dtype}, not one of ${Object.keys(types)}`);
    const bytes = b.subarray(8 + n + a, 8 + n + z);
    out[name] = { dtype: t.dtype, shape: t.shape, data: new T(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)) };
  }
  return out;
}

const model = safetensors(join(root, 'models/digits-mlp.safetensors'));
const layers = [];
for (let i = 0; `l${i}.weight` in model; i++) {
  const w = model[`l${i}.weight`];
  layers.push({ out: w.shape[0], in: w.shape[1], w: w.data, b: model[`l${i}.bias`].data, m: model[`l${i}.multiplier`]?.data, s: model[`l${i}.shift`]?.data });
}

/** The protocol's integer forward pass of one row: the last layer's int32 accumulators. Sums
 * stay far below 2^53 (|acc| < 2^31), so Numbers; the requantization's acc·M (< 2^62) in BigInt. */
function logits(x) {
  let a = Array.from(x);
  for (const [i, l] of layers.entries()) {
    const acc = new Array(l.out);
    for (let o = 0; o < l.out; o++) {
      let s = l.b[o];
      for (let j = 0; j < l.in; j++) s += l.w[o * l.in + j] * a[j];
      if (Math.abs(s) >= 2 ** 31) throw new Error(`layer ${i}: accumulator ${s} overflows int32`);
      acc[o] = s;
    }
    if (i + 1 === layers.length) return acc;
    a = acc.map((v, o) => {
      const s = BigInt(l.s[o]);
      // clamp(⌊(acc·M + 2^(s−1)) / 2^s⌋, −128, 127), ⌊·⌋ an arithmetic shift; then ReLU
      const y = Number((BigInt(v) * BigInt(l.m[o]) + (1n << (s - 1n))) >> s);
      return Math.max(0, Math.min(127, Math.max(-128, y)));
    });
  }
}

/** The class: the lowest index of the largest logit. */
const argmax = (v) => v.reduce((best, x, i) => (x > v[best] ? i : best), 0);

// ---------------------------------------------------------------- 1. held-out rows

const held = safetensors(join(root, 'models/digits-heldout.safetensors'));
const [rows, features] = held.x.shape;
let right = 0;
for (let r = 0; r < rows; r++) {
  const v = logits(held.x.data.subarray(r * features, (r + 1) * features));
  const want = held.logits.data.subarray(r * v.length, (r + 1) * v.length);
  if (v.some((x, i) => x !== want[i])) throw new Error(`held-out row ${r}: logits ${v} differ from digits-model.py's ${Array.from(want)}`);
  if (argmax(v) === held.labels.data[r]) right++;
}
const accuracy = (right / rows).toFixed(6);
if (accuracy !== model.meta.integer_accuracy) throw new Error(`held-out accuracy ${accuracy}, digits-model.py recorded ${model.meta.integer_accuracy}`);
console.log(`forward pass: ${rows} held-out rows, logits identical to digits-model.py's, integer accuracy ${accuracy} (recorded ${model.meta.integer_accuracy})`);

/** A row's maximum, ink (sum of its values), solid blocks (16s) and width (block columns with
 * ink). */
function stats(row) {
  let [max, ink, solid, cols] = [0, 0, 0, 0];
  for (let c = 0; c < SIDE; c++) {
    let col = 0;
    for (let r = 0; r < SIDE; r++) col += row[r * SIDE + c];
    if (col > 0) cols++;
  }
  for (const v of row) [max, ink, solid] = [Math.max(max, v), ink + v, solid + (v === 16 ? 1 : 0)];
  return { max, ink, solid, cols };
}
const train = Array.from({ length: rows }, (_, r) => stats(held.x.data.subarray(r * features, (r + 1) * features)));
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const mean = (v) => v.reduce((a, b) => a + b, 0) / v.length;
const T = { max: median(train.map((t) => t.max)), ink: mean(train.map((t) => t.ink)), inkLo: 0, inkHi: 0, solid: median(train.map((t) => t.solid)), cols: median(train.map((t) => t.cols)) };
const inks = train.map((t) => t.ink).sort((a, b) => a - b);
[T.inkLo, T.inkHi] = [inks[Math.floor(rows * 0.05)], inks[Math.floor(rows * 0.95)]];
console.log(
  `training data (held-out rows): median max ${T.max}, mean ink ${T.ink.toFixed(0)} (5–95 %: ${T.inkLo}–${T.inkHi}), median ${T.solid} solid blocks (16s), median width ${T.cols} block columns\n`,
);

// ---------------------------------------------------------------- 2. the drawn digits

/** What the pad records when Playwright replays `strokes` (fractions of the pad): mouse.down at
 * a stroke's first point, then for each next point mouse.move(…, { steps }), which moves the
 * mouse in `steps` equal straight moves from where it is; each move a pointer position. */
function replay(strokes, steps, round = false) {
  const px = ([x, y]) => (round ? [Math.round(x * PAD), Math.round(y * PAD)] : [x * PAD, y * PAD]);
  return strokes.map((s) => {
    const out = [px(s[0])];
    for (let i = 1; i < s.length; i++) for (let k = 1; k <= steps; k++) out.push(px([s[i - 1][0] + ((s[i][0] - s[i - 1][0]) * k) / steps, s[i - 1][1] + ((s[i][1] - s[i - 1][1]) * k) / steps]));
    return out;
  });
}

/** The pad's former preprocessing, for comparison: the strokes painted on the 256 px canvas
 * with its pen (lineWidth 256/12, round caps), the ink's box scaled to fit 20×20 and sampled
 * into a 32×32 bitmap, summed over 4×4 blocks. */
function formerRow(strokes) {
  const r = PAD / 24;
  const img = new Uint8Array(PAD * PAD);
  for (const s of strokes)
    for (let i = 0; i < s.length; i++) {
      const [[ax, ay], [bx, by]] = [s[Math.max(0, i - 1)], s[i]];
      const [dx, dy] = [bx - ax, by - ay];
      const len2 = dx * dx + dy * dy;
      for (let y = Math.max(0, Math.floor(Math.min(ay, by) - r)); y <= Math.min(PAD - 1, Math.ceil(Math.max(ay, by) + r)); y++)
        for (let x = Math.max(0, Math.floor(Math.min(ax, bx) - r)); x <= Math.min(PAD - 1, Math.ceil(Math.max(ax, bx) + r)); x++) {
          const [px, py] = [x + 0.5 - ax, y + 0.5 - ay];
          const t = len2 > 0 ? Math.max(0, Math.min(1, (px * dx + py * dy) / len2)) : 0;
          if ((px - t * dx) ** 2 + (py - t * dy) ** 2 <= r * r) img[y * PAD + x] = 1;
        }
    }
  let [x0, y0, x1, y1] = [PAD, PAD, -1, -1];
  for (let y = 0; y < PAD; y++) for (let x = 0; x < PAD; x++) if (img[y * PAD + x]) [x0, x1, y0, y1] = [Math.min(x0, x), Math.max(x1, x), Math.min(y0, y), Math.max(y1, y)];
  const [bw, bh] = [x1 - x0 + 1, y1 - y0 + 1];
  const scale = 20 / Math.max(bw, bh);
  const [ox, oy] = [(32 - bw * scale) / 2, (32 - bh * scale) / 2];
  const row = new Int8Array(64);
  for (let by = 0; by < 32; by++)
    for (let bx = 0; bx < 32; bx++) {
      const x = Math.floor(x0 + (bx + 0.5 - ox) / scale);
      const y = Math.floor(y0 + (by + 0.5 - oy) / scale);
      if (x >= x0 && x <= x1 && y >= y0 && y <= y1 && img[y * PAD + x]) row[Math.floor(by / 4) * 8 + Math.floor(bx / 4)]++;
    }
  return row;
}

const show = (row) => Array.from({ length: SIDE }, (_, r) => '    ' + Array.from(row.subarray(r * SIDE, (r + 1) * SIDE), (v) => String(v).padStart(3)).join('')).join('\n');

let read = 0;
console.log('digit  class  margin  max  ink  16s  width  | former preprocessing: class  max  ink');
for (const [d, strokes] of DIGIT_STROKES.entries()) {
  const drawn = replay(strokes, 5);
  const row = rowOfStrokes(drawn);
  const v = logits(row);
  const c = argmax(v);
  const margin = v[c] - Math.max(...v.filter((_, i) => i !== c));
  const s = stats(row);
  const old = formerRow(drawn);
  const so = stats(old);
  if (c === d) read++;
  console.log(
    `${String(d).padStart(5)}  ${String(c).padStart(5)}  ${String(margin).padStart(6)}  ${String(s.max).padStart(3)}  ${String(s.ink).padStart(3)}  ${String(s.solid).padStart(3)}  ${String(s.cols).padStart(5)}  |  ${String(argmax(logits(old))).padStart(25)}  ${String(so.max).padStart(3)}  ${String(so.ink).padStart(3)}${c === d ? '' : '   MISREAD'}`,
  );
  if (verbose) console.log(show(row));
}
console.log(`read right: ${read}/${DIGIT_STROKES.length}  (training data: max ${T.max}, ink ${T.ink.toFixed(0)}, 16s ${T.solid}, width ${T.cols})\n`);

// ---------------------------------------------------------------- 3. perturbed copies

/** A seeded generator of numbers in [0, 1) (mulberry32), so that every run draws the same. */
function random(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}
const rnd = random(20240601);
const between = (a, b) => a + (b - a) * rnd();
/** Roughly normal, mean 0, deviation 1. */
const normal = () => rnd() + rnd() + rnd() + rnd() + rnd() + rnd() - 3;

/** `strokes` moved about their middle: scaled by `k` (x by `k·aspect`), turned `deg` degrees,
 * shifted by (`dx`, `dy`); each point shaken by `jitter` (fraction of the pad). */
function perturb(strokes, { k, aspect, deg, dx, dy, jitter }) {
  const all = strokes.flat();
  const [cx, cy] = [(Math.min(...all.map((p) => p[0])) + Math.max(...all.map((p) => p[0]))) / 2, (Math.min(...all.map((p) => p[1])) + Math.max(...all.map((p) => p[1]))) / 2];
  const [cos, sin] = [Math.cos((deg * Math.PI) / 180), Math.sin((deg * Math.PI) / 180)];
  return strokes.map((s) =>
    s.map(([x, y]) => {
      const [u, v] = [(x - cx) * k * aspect, (y - cy) * k];
      return [cx + dx + u * cos - v * sin + jitter * normal(), cy + dy + u * sin + v * cos + jitter * normal()];
    }),
  );
}

let [ok, all] = [0, 0];
const wrong = [];
const per = [];
for (const [d, strokes] of DIGIT_STROKES.entries()) {
  let n = 0;
  for (let i = 0; i < VARIANTS; i++) {
    const p = { k: between(0.8, 1.1), aspect: between(0.85, 1.15), deg: between(-8, 8), dx: between(-0.05, 0.05), dy: between(-0.05, 0.05), jitter: between(0, 0.006) };
    const steps = [1, 2, 5, 10][Math.floor(rnd() * 4)];
    const row = rowOfStrokes(replay(perturb(strokes, p), steps, true));
    const c = argmax(logits(row));
    if (c === d) n++;
    else wrong.push(`${d}→${c} (scale ${p.k.toFixed(2)}, aspect ${p.aspect.toFixed(2)}, ${p.deg.toFixed(1)}°, jitter ${(p.jitter * PAD).toFixed(1)} px)`);
  }
  per.push(`${d}: ${n}/${VARIANTS}`);
  [ok, all] = [ok + n, all + VARIANTS];
}
console.log(`perturbed copies (shift ±5 % of the pad, scale 0.8–1.1, aspect 0.85–1.15, ±8°, hand shake up to 1.5 px, steps 1–10):`);
console.log(`  ${per.join('  ')}`);
console.log(`  read right: ${ok}/${all} (${((100 * ok) / all).toFixed(1)} %)`);
for (const w of wrong) console.log(`  misread ${w}`);

if (read < DIGIT_STROKES.length || ok < NEED * all) {
  console.log(`\nFAIL: ${read}/${DIGIT_STROKES.length} digits read right, ${ok}/${all} perturbed copies (at least ${Math.ceil(NEED * all)} needed)`);
  process.exit(1);
}
console.log('\nok');
