// The Devices panel's QR encoder (web/qr.js) against symbols an independent encoder made:
// python-qrcode 8.2, byte mode, level M, every mask forced, for four texts that need versions
// 1, 3, 5 and 8 (one block, one block, two blocks, and blocks of two sizes). Every module must
// match. The symbols were generated with
//   QRCode(error_correction=ERROR_CORRECT_M, border=0, mask_pattern=m)
//     .add_data(QRData(text.encode(), mode=MODE_8BIT_BYTE)); make(fit=True); get_matrix()
// and stored as hex rows. Also: the mask picked by penalty gives a valid symbol, and a text too
// long for version 10 is refused. Run by `cargo xtask test`; needs no server.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { qrMatrix, qrSvg } from "../qr.js";

const golden = JSON.parse(readFileSync(new URL("data/qr-golden.json", import.meta.url), "utf8"));
for (const g of golden.symbols) {
  const { version, modules } = qrMatrix(g.text, g.mask);
  assert.equal(version, g.version, `${g.text}: version`);
  const n = modules.length;
  modules.forEach((row, i) => {
    const bits = BigInt(`0x${g.rows[i]}`).toString(2).padStart(n, "0");
    assert.equal(row.map((v) => (v ? "1" : "0")).join(""), bits, `${g.text} (v${version}, mask ${g.mask}): row ${i}`);
  });
}
// The best mask is one of the forced ones, module for module.
const text = golden.symbols[8].text;
const best = qrMatrix(text);
assert.deepEqual(best.modules, qrMatrix(text, best.mask).modules);
assert.match(qrSvg(text), /^<svg [^>]*viewBox="0 0 37 37"/, "29 modules and 4 of quiet zone each side");
assert.throws(() => qrMatrix("x".repeat(300)), /too long/);
console.log(`qr: ${golden.symbols.length} symbols match ${golden.generator}`);
