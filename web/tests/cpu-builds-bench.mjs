// Which CPU build of the edge module is faster in this Chromium: the page's own edge profile
// (`profileEdge`, whole network, median of REPEATS) for each build in BUILDS, the builds
// alternating page loads so that a busy machine slows them alike. Not a test; prints one line
// per load. Against any server with the page (`./run.sh demo`):
//
//   SPLIT_URL=http://127.0.0.1:8080/ [BUILDS=cpu,cpu-relaxed] [ROUNDS=3] [REPEATS=30] node tests/cpu-builds-bench.mjs
import { edgeProfileMs } from "./engine.mjs";

const url = process.env.SPLIT_URL ?? "http://127.0.0.1:8080/";
const BUILDS = (process.env.BUILDS ?? "cpu,cpu-relaxed").split(",");
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const REPEATS = Number(process.env.REPEATS ?? 30);

const all = Object.fromEntries(BUILDS.map((b) => [b, []]));
for (let round = 0; round < ROUNDS; round++) {
  for (const build of BUILDS) {
    const { ms, build: loaded } = await edgeProfileMs(url, build, REPEATS);
    if (loaded !== build) throw new Error(`asked for ${build}, the page loaded ${loaded}`);
    all[build].push(ms);
    console.log(`round ${round} ${build}: ${ms.toFixed(1)} ms`);
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (const build of BUILDS) console.log(`${build}: median ${median(all[build]).toFixed(1)} ms over ${ROUNDS} loads`);
