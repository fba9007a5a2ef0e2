// The Chat tab end to end: SmolLM2-135M-Instruct split between headless Chromium and the real
// server over its socket (`/llm`), and whole in the browser. The answers are held to the
// independent reference's greedy continuations (shared/tests/data/smollm2_golden.json, written
// by tools/smollm2_reference.py): the same tokens, every one. `./run.sh test` runs it.
//
//   SPLIT_URL=http://127.0.0.1:PORT/ node tests/chat.mjs
import { readFileSync } from "node:fs";
import net from "node:net";
import { withPage, GPU_ARGS } from "./browser.mjs";

const url = process.env.SPLIT_URL;
if (!url) throw new Error("set SPLIT_URL to a running server with the language model");
const golden = JSON.parse(readFileSync(new URL("../../shared/tests/data/smollm2_golden.json", import.meta.url)));

function same(a, b) {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/** A link the test can cut: a TCP relay to the server (HTTP and WebSocket alike); `cut()`
 * drops every connection through it, and new ones connect again. */
function cuttableLink(target) {
  const sockets = new Set();
  const relay = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  return new Promise((resolve) => relay.listen(0, "127.0.0.1", () => resolve({
    url: `http://127.0.0.1:${relay.address().port}/`,
    cut() {
      const n = sockets.size;
      for (const s of sockets) s.destroy();
      return n;
    },
    close() {
      for (const s of sockets) s.destroy();
      relay.close();
    },
  })));
}

const metricsLlm = async () => {
  const page = await (await fetch(new URL("metrics", url))).text();
  const line = page.split("\n").find((l) => l.startsWith("split_requests_total") && l.includes('from="llm"'));
  return Number(line?.split(" ").at(-1) ?? 0);
};

await withPage(GPU_ARGS.cpu, async (page) => {
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(new URL("index.html?tab=chat", url).href);
  // The tab opens the chat: the share of the privacy floor's 12 blocks downloads and loads in
  // the chat's worker.
  await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.chat), null, { timeout: 300_000 });
  const status = await page.textContent("#chat-status");
  if ((await page.evaluate(() => document.body.dataset.chat)) !== "ready") throw new Error(`the chat did not start: ${status}`);
  const cells = await page.$$eval("#chat-split span", (s) => s.map((e) => e.className));
  if (cells.length !== 32 || cells.filter((c) => c === "edge").length !== 12) throw new Error(`the split drawn: ${cells}`);

  // Through the page's own form: the answer streams into the log, the figures below it.
  const before = await metricsLlm();
  const prompt = golden.prompts[0];
  await page.fill("#chat-input", prompt.user);
  await page.click("#chat-send");
  await page.waitForFunction(() => ["answered", "failed"].includes(document.body.dataset.chat) && !document.querySelector("#chat-send").disabled, null, { timeout: 300_000 });
  const shown = await page.$$eval("#chat-log p.assistant", (p) => p.map((e) => e.textContent));
  if (shown.at(-1) !== prompt.greedy_text) throw new Error(`the page's answer ${JSON.stringify(shown.at(-1))}, the reference's ${JSON.stringify(prompt.greedy_text)}`);
  const stats = await page.textContent("#chat-stats");
  if (!/kB up/.test(stats) || !/tokens\/s/.test(stats)) throw new Error(`the figures shown: ${stats}`);
  const served = (await metricsLlm()) - before;
  // One frame opens, the prompt goes in parts of 8 positions (`PROMPT_PART` in
  // client/chat-worker.js), then one frame per token after the first, and none for the end
  // token's successor: the server answered every one of them.
  const promptTokens = Number(/\((\d+) prompt tokens/.exec(stats)?.[1]);
  const expectedFrames = 1 + Math.ceil(promptTokens / 8) + prompt.greedy.length;
  if (served !== expectedFrames) throw new Error(`the server answered ${served} /llm frames for ${promptTokens} prompt tokens and ${prompt.greedy.length} answer tokens (${expectedFrames} expected)`);

  // The client API, split at 4 blocks and whole in the browser: the reference's tokens.
  const runs = await page.evaluate(async (prompts) => {
    const { SplitChat } = await import("/client/chat.js");
    const out = [];
    for (const blocks of [4, 30]) {
      const chat = await SplitChat.create({ blocks, positions: 256 });
      for (const p of prompts) {
        const a = await chat.ask([{ role: "user", content: p.user }], { maxTokens: p.greedy.length });
        out.push({ blocks, tokens: a.tokens, placement: a.placement, bytesUp: a.bytesUp, bytesDown: a.bytesDown, promptTokens: a.promptTokens, perSecond: a.tokensPerSecond, share: chat.info.shareBytes, codec: chat.info.codec, rowBytes: chat.info.rowBytes });
      }
      chat.close();
    }
    // Exact floats on the wire, asked for by name: twice the default's bytes, the same answer.
    const exact = await SplitChat.create({ blocks: 4, positions: 256, codec: "f32" });
    const p = prompts[0];
    const a = await exact.ask([{ role: "user", content: p.user }], { maxTokens: p.greedy.length });
    out.push({ blocks: 4, tokens: a.tokens, placement: a.placement, bytesUp: a.bytesUp, bytesDown: a.bytesDown, promptTokens: a.promptTokens, perSecond: a.tokensPerSecond, share: exact.info.shareBytes, codec: exact.info.codec, rowBytes: exact.info.rowBytes });
    exact.close();
    return out;
  }, golden.prompts.slice(0, 2).map((p) => ({ user: p.user, greedy: p.greedy })));
  for (const [i, r] of runs.entries()) {
    const p = golden.prompts[i % 2];
    if (!same(r.tokens, p.greedy)) throw new Error(`blocks ${r.blocks} (${r.codec}), prompt ${i % 2}: ${JSON.stringify(r.tokens)} against the reference's ${JSON.stringify(p.greedy)}`);
    if (r.blocks === 30 && (r.placement !== "edge" || r.bytesUp !== 0)) throw new Error(`the whole model in the browser sent ${r.bytesUp} bytes`);
    // Hidden states only: a coded row of 576 values per position up, one row per frame down
    // (the last position's, all the head needs), plus each frame's 28 bytes of headers (the
    // prompt in frames of 8 positions, then one per token after the first).
    const positions = r.promptTokens + r.tokens.length - 1;
    const frames = Math.ceil(r.promptTokens / 8) + r.tokens.length - 1;
    const up = positions * r.rowBytes + frames * 28;
    const down = frames * (r.rowBytes + 28);
    if (r.blocks === 4 && (r.bytesUp !== up || r.bytesDown !== down)) {
      throw new Error(`blocks 4 in ${r.codec}: ${r.bytesUp} B up and ${r.bytesDown} down for ${positions} positions of ${r.rowBytes} B in ${frames} frames (${up} and ${down} expected)`);
    }
  }
  const exact = runs.at(-1);
  if (exact.codec !== "f32" || exact.rowBytes !== 576 * 4 || runs[0].rowBytes >= exact.rowBytes) {
    throw new Error(`the codecs: ${runs[0].codec} ${runs[0].rowBytes} B a position by default, ${exact.codec} ${exact.rowBytes} B asked for`);
  }
  const [split, whole] = [runs.find((r) => r.blocks === 4), runs.find((r) => r.blocks === 30)];
  if (!(whole.share > 2 * split.share)) throw new Error(`the shares: ${split.share} bytes for 4 blocks, ${whole.share} for 30`);

  // The other placements: the server runs the head (plain split at 4 blocks) or everything
  // (cloud-only, only the tokenizer downloaded): the reference's tokens again.
  const placed = await page.evaluate(async (p) => {
    const { SplitChat } = await import("/client/chat.js");
    const out = {};
    for (const placement of ["plain", "cloud"]) {
      const chat = await SplitChat.create({ blocks: 4, positions: 256, placement });
      const a = await chat.ask([{ role: "user", content: p.user }], { maxTokens: p.greedy.length });
      out[placement] = { tokens: a.tokens, placement: a.placement, bytesUp: a.bytesUp, bytesDown: a.bytesDown, promptTokens: a.promptTokens, share: chat.info.shareBytes, rowBytes: chat.info.rowBytes, info: chat.info.placement };
      chat.close();
    }
    // Cloud-only under a privacy floor is refused; a stop ends a streamed answer early.
    try { await SplitChat.create({ placement: "cloud", privacyFloor: "default" }); } catch (e) { out.floor = e.code; }
    try { await SplitChat.create({ placement: "server" }); } catch (e) { out.unknown = e.code; }
    const cloud = await SplitChat.create({ placement: "cloud" });
    const stopped = await cloud.ask([{ role: "user", content: "Write a long story about a dragon." }], {
      maxTokens: 200,
      onToken: (t) => { if (t.tokens === 3) cloud.stop(); },
    });
    cloud.close();
    out.stopped = { stopped: stopped.stopped, tokens: stopped.tokens.length };
    return out;
  }, { user: golden.prompts[1].user, greedy: golden.prompts[1].greedy });
  for (const placement of ["plain", "cloud"]) {
    const r = placed[placement];
    if (!same(r.tokens, golden.prompts[1].greedy) || r.placement !== placement || r.info !== placement) {
      throw new Error(`${placement}: ${JSON.stringify(r)} against the reference's ${JSON.stringify(golden.prompts[1].greedy)}`);
    }
  }
  // Plain split: hidden states up as in the U-split, a token frame (24 bytes) down per token.
  const plain = placed.plain;
  const plainUp = (plain.promptTokens + plain.tokens.length - 1) * plain.rowBytes + plain.tokens.length * 28;
  if (plain.bytesUp !== plainUp || plain.bytesDown !== plain.tokens.length * 24) throw new Error(`plain split bytes: ${JSON.stringify(plain)}`);
  // Cloud-only: the tokenizer only (no weights), the prompt's ids up (4 bytes each), a token
  // frame per token down and the end.
  const cloudRun = placed.cloud;
  if (!(cloudRun.share < split.share / 4) || cloudRun.bytesUp !== 28 + cloudRun.promptTokens * 4 || cloudRun.bytesDown !== cloudRun.tokens.length * 24 + 21) {
    throw new Error(`cloud-only bytes: ${JSON.stringify(cloudRun)} (the 4-block share is ${split.share} bytes)`);
  }
  if (placed.floor !== "privacy_floor" || placed.unknown !== "bad_option") throw new Error(`cloud refusals: ${placed.floor}, ${placed.unknown}`);
  if (!placed.stopped.stopped || placed.stopped.tokens >= 20) throw new Error(`cloud stop: ${JSON.stringify(placed.stopped)}`);

  // A conversation that goes on: the second answer's history holds the first prompt and
  // answer, and only what is new is prefilled (both sides keep their caches, over the socket
  // the first answer left open); the same history asked of a fresh chat prefills it all.
  const turns = await page.evaluate(async (user) => {
    const { SplitChat } = await import("/client/chat.js");
    const pick = (a) => ({ tokens: a.tokens, promptTokens: a.promptTokens, reusedTokens: a.reusedTokens, bytesUp: a.bytesUp });
    const chat = await SplitChat.create({ blocks: 4, positions: 256, placement: "split" });
    const first = await chat.ask([{ role: "user", content: user }], { maxTokens: 8 });
    const history = [{ role: "user", content: user }, { role: "assistant", content: first.text }, { role: "user", content: "And then?" }];
    const second = await chat.ask(history, { maxTokens: 8 });
    chat.close();
    const fresh = await SplitChat.create({ blocks: 4, positions: 256, placement: "split" });
    const alone = await fresh.ask(history, { maxTokens: 8 });
    fresh.close();
    return { first: pick(first), second: pick(second), alone: pick(alone) };
  }, golden.prompts[1].user);
  {
    const { first, second, alone } = turns;
    // The last token of an answer cut at maxTokens was never run through the model.
    const fed = first.promptTokens + first.tokens.length - (first.tokens.length === 8 ? 1 : 0);
    if (second.reusedTokens !== fed || alone.reusedTokens !== 0 || second.promptTokens !== alone.promptTokens || !(second.bytesUp < alone.bytesUp)) {
      throw new Error(`a conversation that goes on: ${JSON.stringify(turns)} (${fed} tokens fed by the first answer)`);
    }
    console.log(`chat: the second turn prefilled ${second.promptTokens - second.reusedTokens} of ${second.promptTokens} tokens (${second.bytesUp} B up, ${alone.bytesUp} in a fresh chat); same tokens as the fresh chat: ${same(second.tokens, alone.tokens)}`);
  }

  // The planner chooses (`placement: "auto"`) from the server's measured costs (`/api/info`)
  // and this browser's, timed when a share loaded above. Without limits every placement is
  // ranked; under the default privacy floor neither cloud-only nor the plain split may run,
  // nor a split under 12 blocks, and with 64 MB of memory not the whole model (98 MB) nor 16
  // blocks: the split at the floor is left, and answers as the reference does. Nothing fits
  // in 1 MB.
  const planned = await page.evaluate(async (p) => {
    const { SplitChat } = await import("/client/chat.js");
    const free = await SplitChat.create({ placement: "auto", positions: 256 });
    const out = { free: free.info.plan, freeAt: [free.info.placement, free.info.blocks] };
    free.close();
    const tight = await SplitChat.create({ placement: "auto", privacyFloor: "default", memoryBytes: 64e6, positions: 256 });
    const a = await tight.ask([{ role: "user", content: p.user }], { maxTokens: p.greedy.length });
    out.tight = { plan: tight.info.plan, at: [tight.info.placement, tight.info.blocks], tokens: a.tokens };
    tight.close();
    try { await SplitChat.create({ placement: "auto", privacyFloor: "default", memoryBytes: 1e6 }); } catch (e) { out.none = e.code; }
    return out;
  }, { user: golden.prompts[1].user, greedy: golden.prompts[1].greedy });
  const { free, tight } = planned;
  const where = (e) => (e.blocks == null ? e.placement : `${e.placement}@${e.blocks}`);
  if (free.ranked.length !== 14 || free.refused.length !== 0 || where(free.chosen) !== where(free.ranked[0])
      || free.ranked.some((e, i) => i > 0 && e.answerMs < free.ranked[i - 1].answerMs)
      || planned.freeAt[0] !== free.chosen.placement || free.edgeCosts !== "measured") {
    throw new Error(`auto without limits: ${JSON.stringify(planned.freeAt)} ${JSON.stringify(free)}`);
  }
  const refusedTight = Object.fromEntries(tight.plan.refused.map(([e, why]) => [where(e), why]));
  if (tight.at.join("@") !== "split@12" || where(tight.plan.chosen) !== "split@12" || tight.plan.ranked.length !== 1
      || refusedTight.cloud !== "privacy_floor" || refusedTight["plain@16"] !== "privacy_floor" || refusedTight["split@8"] !== "privacy_floor"
      || refusedTight.edge !== "memory" || refusedTight["split@16"] !== "memory" || !same(tight.tokens, golden.prompts[1].greedy)) {
    throw new Error(`auto under the floor and 64 MB: ${JSON.stringify(tight)}`);
  }
  if (planned.none !== "no_placement") throw new Error(`auto with 1 MB: ${planned.none}`);
  console.log(`chat: auto chose ${where(free.chosen)} without limits (${free.chosen.answerMs.toFixed(0)} ms predicted for the answer; this browser's costs ${free.edgeCosts}, link ${free.link.rtt_ms.toFixed(1)} ms, ${free.link.up_kbps}/${free.link.down_kbps} kbit/s), split@12 under the floor and 64 MB`);

  // Refusals come back as typed errors: blocks past the model, a prompt past the positions.
  const refusals = await page.evaluate(async () => {
    const { SplitChat } = await import("/client/chat.js");
    const codes = [];
    try { await SplitChat.create({ blocks: 31 }); } catch (e) { codes.push(e.code); }
    try { await SplitChat.create({ blocks: 2, codec: "f8" }); } catch (e) { codes.push(e.code); }
    // Below the privacy floor, when one is asked for; by default the floor's blocks.
    try { await SplitChat.create({ blocks: 2, privacyFloor: "default" }); } catch (e) { codes.push(e.code); }
    const floored = await SplitChat.create({ privacyFloor: "default" });
    const floorBlocks = floored.info.blocks;
    floored.close();
    const chat = await SplitChat.create({ blocks: 2, positions: 16 });
    try { await chat.ask([{ role: "user", content: "Tell me everything about the sea." }], { maxTokens: 8 }); } catch (e) { codes.push(e.code); }
    try { await chat.ask([{ role: "robot", content: "hi" }]); } catch (e) { codes.push(e.code); }
    // A stop in the middle ends the answer early.
    const chat2 = await SplitChat.create({ blocks: 2 });
    let stopped = null;
    const asked = chat2.ask([{ role: "user", content: "Write a long story about a dragon." }], {
      maxTokens: 64,
      onToken: (t) => { if (t.tokens === 3) chat2.stop(); },
    });
    stopped = await asked;
    chat.close();
    chat2.close();
    return { codes, floorBlocks, stopped: stopped.stopped, stoppedTokens: stopped.tokens.length };
  });
  if (JSON.stringify(refusals.codes) !== JSON.stringify(["bad_option", "bad_option", "privacy_floor", "context", "bad_option"])) throw new Error(`refusals: ${JSON.stringify(refusals.codes)}`);
  if (!refusals.stopped || refusals.stoppedTokens >= 64) throw new Error(`stop: ${JSON.stringify(refusals)}`);
  if (refusals.floorBlocks !== 12) throw new Error(`the default privacy floor kept ${refusals.floorBlocks} blocks, not 12`);
  // The page's placement selector: the plain split at 4 blocks (its share in the cache since
  // the client's runs above) and cloud-only (the tokenizer alone) write the reference's
  // answer, the split drawn says where each part ran, and the blocks are not asked for when
  // the model runs whole on one side.
  const pagePlaced = [];
  for (const [placement, blocks] of [["plain", "4"], ["cloud", null]]) {
    await page.evaluate(() => { document.body.dataset.chat = "switching"; });
    await page.selectOption("#chat-placement", placement);
    if (blocks) await page.selectOption("#chat-blocks", blocks);
    await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.chat), null, { timeout: 300_000 });
    await page.fill("#chat-input", prompt.user);
    await page.click("#chat-send");
    await page.waitForFunction(() => ["answered", "failed"].includes(document.body.dataset.chat) && !document.querySelector("#chat-send").disabled, null, { timeout: 300_000 });
    const answer = (await page.$$eval("#chat-log p.assistant", (p) => p.map((e) => e.textContent))).at(-1);
    const drawn = await page.$$eval("#chat-split span", (s) => s.map((e) => e.className));
    const count = (c) => drawn.filter((d) => d === c).length;
    const state = { placement, answer, edge: count("edge"), ends: count("ends"), serverEnds: count("server-end"), blocksDisabled: await page.isDisabled("#chat-blocks"), stats: await page.textContent("#chat-stats") };
    const expected = placement === "plain" ? { edge: 4, ends: 1, serverEnds: 1, blocksDisabled: false } : { edge: 0, ends: 0, serverEnds: 2, blocksDisabled: true };
    if (answer !== prompt.greedy_text || Object.entries(expected).some(([k, v]) => state[k] !== v) || drawn.length !== 32) {
      throw new Error(`the page's ${placement} placement: ${JSON.stringify(state)}, drawn ${drawn}; expected ${JSON.stringify(expected)} and the reference's ${JSON.stringify(prompt.greedy_text)}`);
    }
    pagePlaced.push(`${placement} (${state.stats})`);
  }

  // The link dropped twice mid-answer: the client opens a new socket, sends the hidden states
  // it kept, and the answer goes on, token for token the reference's.
  const link = await cuttableLink(new URL(url));
  let cuts = 0;
  await page.exposeFunction("cutLink", () => {
    cuts += 1;
    return link.cut();
  });
  await page.goto(new URL("index.html", link.url).href);
  const resumed = await page.evaluate(async (p) => {
    const { SplitChat } = await import("/client/chat.js");
    const out = [];
    for (const placement of ["split", "cloud"]) {
      const chat = await SplitChat.create({ blocks: 2, placement });
      const a = await chat.ask([{ role: "user", content: p.user }], {
        maxTokens: p.greedy.length,
        onToken: (t) => { if (t.tokens === 5 || t.tokens === 20) window.cutLink(); },
      });
      chat.close();
      out.push({ placement, tokens: a.tokens, resumes: a.resumes });
    }
    return out;
  }, { user: golden.prompts[1].user, greedy: golden.prompts[1].greedy });
  link.close();
  for (const r of resumed) {
    if (!same(r.tokens, golden.prompts[1].greedy)) throw new Error(`${r.placement} after ${cuts} cuts: ${JSON.stringify(r.tokens)} against the reference's ${JSON.stringify(golden.prompts[1].greedy)}`);
    if (r.resumes < 1) throw new Error(`${r.placement}: ${r.resumes} resumes after the cuts`);
  }
  if (cuts !== 4) throw new Error(`${cuts} cuts`);
  if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
  const line = (r) => `${r.blocks === 30 ? "whole in the browser" : `split at ${r.blocks} (${r.codec})`}: ${r.tokens.length} tokens, ${r.perSecond?.toFixed(1)} tokens/s, share ${(r.share / 1e6).toFixed(1)} MB, ${r.bytesUp} B up`;
  console.log(`chat: the page's answer and ${runs.length} client answers equal the reference's greedy tokens; ${runs.map(line).join("; ")}`);
  console.log(`chat: plain split and cloud-only give the reference's tokens (plain ${plain.bytesUp} B up, ${plain.bytesDown} down; cloud ${cloudRun.bytesUp} B up, ${cloudRun.bytesDown} down, tokenizer ${(cloudRun.share / 1e6).toFixed(2)} MB); a cloud answer stopped after ${placed.stopped.tokens} tokens`);
  console.log(`chat: the page's placements answer the reference's text: ${pagePlaced.join("; ")}`);
  console.log(`chat: refusals ${refusals.codes.join(", ")}; stopped after ${refusals.stoppedTokens} tokens; the link cut ${cuts} times mid-answer, ${resumed.map((r) => `${r.placement} ${r.resumes} resumes`).join(", ")}, the reference's tokens (headless Chromium, CPU build, beside the test's server: not a speed figure)`);
});
