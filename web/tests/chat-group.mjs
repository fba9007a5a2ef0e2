// Split chats through a device group, in real browsers: two Chromium pages (B joined with
// `llm: true`, A without) and the native device agent (started with SmolLM2) join one group on
// the real server; then
//   - both pages chat at once, each keeping the embedding, blocks 0..4 and the head, the agent
//     running blocks 4..12 of each page's conversation and the server 12..30: every token the
//     independent reference's greedy answer (exact floats on the wire), the agent's log naming
//     both conversations, the server answering every frame through the agent;
//   - A chats through page B over their direct channel (B's worker runs blocks 4..12 on the
//     share it downloads, and opens the server's part itself): the reference's tokens again;
//   - B's chat sent to A (a browser that did not join with `llm: true`) fails with
//     `unknown_model` instead of waiting;
//   - the agent is killed mid-answer: the page's chat hears the member left, the server takes
//     the agent's blocks (the kept hidden states rebuild them) and the answer goes on, still the
//     reference's tokens.
// Run by `cargo xtask test` (SPLIT_URL, AGENT_BIN):
//   SPLIT_URL=http://127.0.0.1:PORT/ AGENT_BIN=.../device-agent node tests/chat-group.mjs
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { GPU_ARGS, withPage } from "./browser.mjs";

const url = process.env.SPLIT_URL;
assert.ok(url, "set SPLIT_URL to the server's base URL (cargo xtask test does)");
const target = process.env.CARGO_TARGET_DIR ?? `${process.env.HOME}/.cache/splitinfer/target`;
const agentBin = process.env.AGENT_BIN ?? `${target}/debug/device-agent`;
const TIMEOUT_MS = 300_000;
const golden = JSON.parse(readFileSync(new URL("../../shared/tests/data/smollm2_golden.json", import.meta.url)));
/** The phone's blocks, then the agent's: 0..4 here, 4..12 on the agent, 12..30 on the server. */
const FRONT = 4;
const MEMBER_BLOCKS = 8;

async function openPage(page, name) {
  page.on("pageerror", (e) => console.error(`${name}: ${e.message}`));
  await page.goto(new URL("?backend=cpu&weights=all", url).href);
  await page.waitForFunction(() => ["ready", "failed"].includes(document.body.dataset.state), null, { timeout: TIMEOUT_MS });
  assert.equal(await page.evaluate(() => document.body.dataset.state), "ready", `${name} loads`);
}

function join(page, name, code, llm = false) {
  return page.evaluate(async ({ name, code, llm }) => {
    window.splitGroup = await window.splitClient.joinGroup({ name, id: name, code, llm });
    return { code: window.splitGroup.code, you: window.splitGroup.you };
  }, { name, code, llm });
}

/** The agent, with what it logs kept for the checks. */
function startAgent(code) {
  const groupUrl = new URL("group", url.replace(/^http/, "ws")).href;
  const child = spawn(agentBin, ["--group", code, "--server", groupUrl, "--id", "laptop", "--name", "laptop"],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, RUST_LOG: "info" } });
  child.log = "";
  child.stderr.on("data", (d) => { child.log += d.toString(); });
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (c) => reject(new Error(`device-agent exited (${c}): ${child.log}`)));
    child.stdout.on("data", (d) => { if (/in group/.test(d.toString())) resolve(child); });
  });
}

const metricsLlm = async () => {
  const page = await (await fetch(new URL("metrics", url))).text();
  const line = page.split("\n").find((l) => l.startsWith("split_requests_total") && l.includes('from="llm"'));
  return Number(line?.split(" ").at(-1) ?? 0);
};

/** Ask `prompt` on `page` through member `peer`: the answer, or the error's code. The tokens
 * so far are in the page's `window.chatTokens` as they come (the test watches it). */
function askThrough(page, peer, prompt) {
  return page.evaluate(async ({ peer, prompt, front, memberBlocks }) => {
    window.chatTokens = 0;
    const { SplitChat } = await import("/client/chat.js");
    const chat = await SplitChat.create({
      blocks: front, positions: 256, codec: "f32",
      member: { group: window.splitGroup, peer, blocks: memberBlocks },
    });
    try {
      const a = await chat.ask([{ role: "user", content: prompt.user }], {
        maxTokens: prompt.greedy.length,
        onToken: (t) => { window.chatTokens = t.tokens; },
      });
      return { tokens: a.tokens, member: chat.info.member, memberLeft: a.memberLeft, memberVia: a.memberVia, resumes: a.resumes, promptTokens: a.promptTokens, placement: a.placement };
    } catch (e) {
      return { error: e.code, message: e.message };
    } finally {
      chat.close();
    }
  }, { peer, prompt: { user: prompt.user, greedy: prompt.greedy }, front: FRONT, memberBlocks: MEMBER_BLOCKS });
}

await withPage(GPU_ARGS.cpu, (a) => withPage(GPU_ARGS.cpu, async (b) => {
  await Promise.all([openPage(a, "A"), openPage(b, "B")]);
  const { code, you: peerA } = await join(a, "A");
  const { you: peerB } = await join(b, "B", code, true);
  const agent = await startAgent(code);
  try {
    await a.waitForFunction(() => window.splitGroup?.members.length === 3, null, { timeout: TIMEOUT_MS });
    const members = await a.evaluate(() => window.splitGroup.members);
    const laptop = members.find((m) => m.backend === "native");
    assert.equal(laptop.llm, true, "the agent says it runs split chats' blocks");
    assert.deepEqual(members.filter((m) => m.llm).map((m) => m.peer).sort(), [peerB, laptop.peer].sort(),
      "so does B, which joined with llm: true; A does not");

    // 1. Both pages at once through the agent.
    const before = await metricsLlm();
    const [p0, p1] = golden.prompts;
    const [ra, rb] = await Promise.all([askThrough(a, laptop.peer, p0), askThrough(b, laptop.peer, p1)]);
    for (const [name, r, p] of [["A", ra, p0], ["B", rb, p1]]) {
      assert.ok(!r.error, `${name}: ${r.error} ${r.message}`);
      assert.deepEqual(r.tokens, p.greedy, `${name}'s answer through the agent is the reference's`);
      assert.deepEqual(r.member, { peer: laptop.peer, name: "laptop", blocks: [FRONT, FRONT + MEMBER_BLOCKS] });
      assert.equal(r.placement, "split");
      assert.equal(r.memberVia, "relay", "the agent has no direct channel");
    }
    for (const peer of [peerA, peerB]) {
      assert.match(agent.log, new RegExp(`split chat of member ${peer}: blocks 4\\.\\.12 here, 12\\.\\.30 on the server`), agent.log);
    }
    // The server answered every frame each page sent (an open, the prompt in parts of 8, a
    // step per token after the first), all of them through the agent's sockets.
    const frames = (r) => 1 + Math.ceil(r.promptTokens / 8) + r.tokens.length - 1;
    assert.equal(await metricsLlm() - before, frames(ra) + frames(rb), "the server ran blocks 12..30 of both");
    console.log(`through the agent: A ${ra.tokens.length} tokens, B ${rb.tokens.length} tokens, ${frames(ra) + frames(rb)} frames to the server`);

    // 2. A through page B: B's worker runs blocks 4..12 and opens the server's 12..30 itself;
    // the frames between the pages go over their direct channel, not through the server.
    await a.waitForFunction((peerB) => window.splitGroup.links?.[peerB] === "open", peerB, { timeout: 60_000 });
    const beforeB = await metricsLlm();
    const viaB = await askThrough(a, peerB, p1);
    assert.ok(!viaB.error, `through B: ${viaB.error} ${viaB.message}`);
    assert.deepEqual(viaB.tokens, p1.greedy, "A's answer through page B is the reference's");
    assert.deepEqual(viaB.member, { peer: peerB, name: "B", blocks: [FRONT, FRONT + MEMBER_BLOCKS] });
    assert.equal(viaB.memberVia, "p2p", "A's rows went to B device to device");
    assert.equal(await metricsLlm() - beforeB, frames(viaB), "the server ran blocks 12..30 for B");
    console.log(`through page B: ${viaB.tokens.length} tokens, ${frames(viaB)} frames from B to the server`);

    // 3. A page that did not join with llm: true is no member for a chat: refused, not waited on.
    const refused = await askThrough(b, peerA, p0);
    assert.equal(refused.error, "unknown_model", JSON.stringify(refused));

    // 4. The agent killed mid-answer: the server takes its blocks, the answer goes on.
    await a.evaluate(() => { window.chatTokens = 0; });
    const asking = askThrough(a, laptop.peer, p1);
    await a.waitForFunction(() => window.chatTokens >= 6, null, { timeout: TIMEOUT_MS });
    agent.removeAllListeners("exit");
    agent.kill("SIGKILL");
    const rescued = await asking;
    assert.ok(!rescued.error, `${rescued.error} ${rescued.message}`);
    assert.deepEqual(rescued.tokens, p1.greedy, "the answer goes on to the reference's end");
    assert.equal(rescued.memberLeft, true);
    assert.ok(rescued.resumes >= 1);
    console.log(`the agent killed after 6 of ${p1.greedy.length} tokens: the server wrote the rest (${rescued.resumes} resume)`);
  } finally {
    agent.kill("SIGKILL");
  }
}));
console.log("chat-group: all passed");
