// A QR code encoder for the Devices panel's join link (ISO/IEC 18004): byte mode, error
// correction level M (15% of the symbol may be damaged), versions 1 to 10 (up to 213 bytes),
// the mask with the lowest penalty. Small on purpose: it encodes short URLs and nothing else.
//
//   import { qrMatrix, qrSvg } from "./qr.js";
//   qrSvg("https://host/?group=K7M3QX")   // an <svg> string, 4 modules of quiet zone

/** Per version 1..10 at level M: [EC codewords per block, [data codewords per block...]]. */
const BLOCKS_M = [
  null,
  [10, [16]], [16, [28]], [26, [44]], [18, [32, 32]], [24, [43, 43]],
  [16, [27, 27, 27, 27]], [18, [31, 31, 31, 31]], [22, [38, 38, 39, 39]],
  [22, [36, 36, 36, 37, 37]], [26, [43, 43, 43, 43, 44]],
];
/** Alignment pattern centres per version. */
const ALIGNMENT = [null, [], [6, 18], [6, 22], [6, 26], [6, 30], [6, 34], [6, 22, 38], [6, 24, 42], [6, 26, 46], [6, 28, 50]];
/** Error correction level M in the format information. */
const LEVEL_M = 0b00;

// GF(256) with the QR polynomial x^8 + x^4 + x^3 + x^2 + 1.
const EXP = new Uint8Array(512);
const LOG = new Uint8Array(256);
for (let i = 0, x = 1; i < 255; i++) {
  EXP[i] = x;
  LOG[x] = i;
  x <<= 1;
  if (x & 0x100) x ^= 0x11d;
}
for (let i = 255; i < 512; i++) EXP[i] = EXP[i - 255];
const mul = (a, b) => (a && b ? EXP[LOG[a] + LOG[b]] : 0);

/** Reed-Solomon remainder of `data` for `n` check codewords. */
function reedSolomon(data, n) {
  let gen = [1];
  for (let i = 0; i < n; i++) {
    const next = new Array(gen.length + 1).fill(0);
    gen.forEach((g, j) => {
      next[j] ^= g;
      next[j + 1] ^= mul(g, EXP[i]);
    });
    gen = next;
  }
  const rem = new Array(n).fill(0);
  for (const d of data) {
    const factor = d ^ rem.shift();
    rem.push(0);
    for (let j = 0; j < n; j++) rem[j] ^= mul(gen[j + 1], factor);
  }
  return rem;
}

/** The codewords of `bytes` at `version`: data and check codewords, interleaved. */
function codewords(bytes, version) {
  const [ec, sizes] = BLOCKS_M[version];
  const capacity = sizes.reduce((a, b) => a + b, 0);
  const bits = [];
  const put = (value, length) => { for (let i = length - 1; i >= 0; i--) bits.push((value >>> i) & 1); };
  put(0b0100, 4);
  put(bytes.length, version < 10 ? 8 : 16);
  for (const b of bytes) put(b, 8);
  put(0, Math.min(4, capacity * 8 - bits.length));
  while (bits.length % 8) bits.push(0);
  const data = [];
  for (let i = 0; i < bits.length; i += 8) data.push(bits.slice(i, i + 8).reduce((a, b) => (a << 1) | b, 0));
  for (let pad = 0xec; data.length < capacity; pad ^= 0xec ^ 0x11) data.push(pad);
  const blocks = [];
  let at = 0;
  for (const size of sizes) {
    blocks.push(data.slice(at, at + size));
    at += size;
  }
  const checks = blocks.map((b) => reedSolomon(b, ec));
  const out = [];
  for (let i = 0; i < Math.max(...sizes); i++) for (const b of blocks) if (i < b.length) out.push(b[i]);
  for (let i = 0; i < ec; i++) for (const c of checks) out.push(c[i]);
  return out;
}

/** BCH code of `value` (`bits` long) with `poly` (degree `degree`). */
function bch(value, poly, degree) {
  let r = value << degree;
  for (let i = 31 - Math.clz32(r); i >= degree; i--) if ((r >>> i) & 1) r ^= poly << (i - degree);
  return (value << degree) | r;
}

const MASKS = [
  (i, j) => (i + j) % 2 === 0,
  (i) => i % 2 === 0,
  (_, j) => j % 3 === 0,
  (i, j) => (i + j) % 3 === 0,
  (i, j) => (Math.floor(i / 2) + Math.floor(j / 3)) % 2 === 0,
  (i, j) => ((i * j) % 2) + ((i * j) % 3) === 0,
  (i, j) => (((i * j) % 2) + ((i * j) % 3)) % 2 === 0,
  (i, j) => (((i + j) % 2) + ((i * j) % 3)) % 2 === 0,
];

/** The symbol with everything but the data: modules and which of them are function modules. */
function skeleton(version) {
  const n = 17 + 4 * version;
  const dark = Array.from({ length: n }, () => new Array(n).fill(false));
  const fixed = Array.from({ length: n }, () => new Array(n).fill(false));
  const set = (i, j, on) => { dark[i][j] = on; fixed[i][j] = true; };
  for (const [r, c] of [[0, 0], [0, n - 7], [n - 7, 0]]) {
    for (let i = -1; i <= 7; i++) {
      for (let j = -1; j <= 7; j++) {
        if (r + i < 0 || r + i >= n || c + j < 0 || c + j >= n) continue;
        const ring = Math.max(Math.abs(i - 3), Math.abs(j - 3));
        set(r + i, c + j, ring !== 2 && ring <= 3);
      }
    }
  }
  for (let k = 8; k < n - 8; k++) {
    set(6, k, k % 2 === 0);
    set(k, 6, k % 2 === 0);
  }
  const centres = ALIGNMENT[version];
  const last = centres.length - 1;
  centres.forEach((r, a) => centres.forEach((c, b) => {
    // Not where a finder is (the three corners of the grid of centres).
    if ((a === 0 && b === 0) || (a === 0 && b === last) || (a === last && b === 0)) return;
    {
      for (let i = -2; i <= 2; i++) for (let j = -2; j <= 2; j++) set(r + i, c + j, Math.max(Math.abs(i), Math.abs(j)) !== 1);
    }
  }));
  // Format areas (filled per mask) and the dark module.
  for (let k = 0; k < 9; k++) {
    fixed[8][k] = fixed[k][8] = true;
  }
  for (let k = 0; k < 8; k++) {
    fixed[8][n - 1 - k] = fixed[n - 1 - k][8] = true;
  }
  set(n - 8, 8, true);
  if (version >= 7) {
    const info = bch(version, 0x1f25, 12);
    for (let k = 0; k < 18; k++) {
      const on = ((info >>> k) & 1) === 1;
      const [a, b] = [Math.floor(k / 3), (k % 3) + n - 11];
      set(a, b, on);
      set(b, a, on);
    }
  }
  return { n, dark, fixed };
}

function placeFormat(dark, n, mask) {
  const format = bch((LEVEL_M << 3) | mask, 0x537, 10) ^ 0x5412;
  const bit = (k) => ((format >>> k) & 1) === 1;
  for (let k = 0; k <= 5; k++) dark[k][8] = bit(k);
  dark[7][8] = bit(6);
  dark[8][8] = bit(7);
  dark[8][7] = bit(8);
  for (let k = 9; k < 15; k++) dark[8][14 - k] = bit(k);
  for (let k = 0; k < 8; k++) dark[8][n - 1 - k] = bit(k);
  for (let k = 8; k < 15; k++) dark[n - 15 + k][8] = bit(k);
}

function penalty(dark, n) {
  let score = 0;
  const lines = (get) => {
    for (let a = 0; a < n; a++) {
      let run = 1;
      for (let b = 1; b <= n; b++) {
        if (b < n && get(a, b) === get(a, b - 1)) run++;
        else {
          if (run >= 5) score += run - 2;
          run = 1;
        }
      }
      for (let b = 0; b + 11 <= n; b++) {
        const w = Array.from({ length: 11 }, (_, k) => get(a, b + k));
        const pattern = [true, false, true, true, true, false, true];
        const finderFirst = pattern.every((p, k) => w[k] === p) && w.slice(7).every((v) => !v);
        const finderLast = w.slice(0, 4).every((v) => !v) && pattern.every((p, k) => w[k + 4] === p);
        if (finderFirst || finderLast) score += 40;
      }
    }
  };
  lines((a, b) => dark[a][b]);
  lines((a, b) => dark[b][a]);
  for (let i = 0; i + 1 < n; i++) {
    for (let j = 0; j + 1 < n; j++) {
      const c = dark[i][j];
      if (c === dark[i + 1][j] && c === dark[i][j + 1] && c === dark[i + 1][j + 1]) score += 3;
    }
  }
  const total = dark.flat().filter(Boolean).length;
  score += 10 * Math.floor(Math.abs((total * 20) / (n * n) - 10));
  return score;
}

/**
 * The QR symbol of `text` (UTF-8) as rows of booleans (true: dark), without the quiet zone.
 * @param {string} text
 * @param {number} [forceMask]  a mask 0..7 instead of the best one (for tests)
 * @returns {{ version: number, mask: number, modules: boolean[][] }}
 */
export function qrMatrix(text, forceMask) {
  const bytes = new TextEncoder().encode(text);
  const version = BLOCKS_M.findIndex((b, v) => b && b[1].reduce((x, y) => x + y, 0) >= bytes.length + (v < 10 ? 2 : 3));
  if (version < 0) throw new Error(`${bytes.length} bytes is too long for this encoder (213 at most)`);
  const { n, dark, fixed } = skeleton(version);
  const bits = codewords(bytes, version).flatMap((c) => Array.from({ length: 8 }, (_, k) => ((c >>> (7 - k)) & 1) === 1));
  const data = [];
  let k = 0;
  for (let right = n - 1, upward = true; right > 0; right -= 2, upward = !upward) {
    if (right === 6) right = 5;
    for (let step = 0; step < n; step++) {
      const i = upward ? n - 1 - step : step;
      for (const j of [right, right - 1]) {
        if (fixed[i][j]) continue;
        dark[i][j] = k < bits.length ? bits[k] : false;
        k++;
        data.push([i, j]);
      }
    }
  }
  const apply = (mask) => {
    const m = dark.map((row) => row.slice());
    for (const [i, j] of data) if (MASKS[mask](i, j)) m[i][j] = !m[i][j];
    placeFormat(m, n, mask);
    return m;
  };
  let best = null;
  for (let mask = 0; mask < 8; mask++) {
    if (forceMask != null && mask !== forceMask) continue;
    const modules = apply(mask);
    const score = forceMask != null ? 0 : penalty(modules, n);
    if (!best || score < best.score) best = { mask, modules, score };
  }
  return { version, mask: best.mask, modules: best.modules };
}

/** The symbol as an SVG document string, `scale` pixels a module, 4 modules of quiet zone. */
export function qrSvg(text, scale = 4) {
  const { modules } = qrMatrix(text);
  const size = modules.length + 8;
  let path = "";
  modules.forEach((row, i) => row.forEach((on, j) => { if (on) path += `M${j + 4} ${i + 4}h1v1h-1z`; }));
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${size} ${size}" width="${size * scale}" height="${size * scale}" shape-rendering="crispEdges" role="img" aria-label="QR code of ${text.replace(/[<&"]/g, "")}"><rect width="${size}" height="${size}" fill="#fff"/><path d="${path}" fill="#000"/></svg>`;
}
