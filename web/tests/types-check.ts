// Compiled by `tsc --noEmit` in `./run.sh test`: the way the README embeds the client must
// type-check against `split-client.d.ts`, and misuse must not.
import { SplitClient, SplitError, type ClassifyResult, type Placement } from "../split-client.js";

async function embed(bytes: Uint8Array): Promise<string> {
  const client = await SplitClient.create({
    backend: "auto",
    model: "efficientnet-lite0",
    weights: "block5",
    onProgress: (p) => console.log(p.stage, p.fraction),
    constraints: { privacyFloor: "block5", minAgreement: 0.98 },
    offline: true,
  });
  const offline = await client.offlineReady;
  if (offline && !offline.available) console.log(offline.reason, client.capabilities.offline.site);
  try {
    const r: ClassifyResult = await client.classify(bytes, "block5", { codec: "q6" });
    if (r.quality === "reduced") console.log(`the light model ran on ${r.inputSize ?? 224} pixels`);
    const held: { through: string; bytes: number; total: number } = await client.weightsState();
    const auto = await client.classify(bytes, "auto");
    const where: Placement | undefined = auto.placement;
    if (where?.mode === "split") console.log(where.boundary, where.codec);
    const why = await client.explain();
    if (client.inWorker && why) console.log(why.forecast.linkUp, client.boundaries().length);
    return `${r.top[0].name} ${r.totalMs.toFixed(1)} ms on ${client.backend} (${client.wasmBuild})`;
  } catch (e) {
    if (e instanceof SplitError) return `${e.code}: ${e.message}`;
    throw e;
  } finally {
    client.close();
  }
}

// @ts-expect-error: the light model's input is a number of pixels.
void SplitClient.create({ lightInput: "128" });
// @ts-expect-error: the backend is one of three names.
void SplitClient.create({ backend: "gpu" });
// @ts-expect-error: classify takes bytes, not a URL.
void (null as unknown as SplitClient).classify("chelsea.png");
void embed;
