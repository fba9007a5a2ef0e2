// The client's small pure helpers, without a browser: what a page open for hours keeps of its
// placement changes (`keepNewest`, `SWITCHES_KEPT`: the planner's own log keeps as many,
// shared/src/plan/policy.rs `the_switch_log_keeps_the_newest_and_counts_them_all`).
// Run by `./run.sh test`.
import assert from "node:assert/strict";
import { SWITCHES_KEPT, keepNewest } from "../client/wasm.js";

const list = [];
for (let i = 0; i < SWITCHES_KEPT + 10; i++) keepNewest(list, { atMs: i }, SWITCHES_KEPT);
assert.equal(list.length, SWITCHES_KEPT, "bounded");
assert.equal(list[0].atMs, 10, "the oldest dropped first");
assert.equal(list.at(-1).atMs, SWITCHES_KEPT + 9, "the newest kept last");
const short = [];
keepNewest(short, 1, 3);
keepNewest(short, 2, 3);
assert.deepEqual(short, [1, 2], "under the bound nothing is dropped");
console.log(`units: keepNewest bounds at ${SWITCHES_KEPT}`);
