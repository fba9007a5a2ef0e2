// The chat's worker: the language model's share this browser runs (the wasm `LlmEdge`: the
// tokenizer, the embedding, the first blocks, the final norm, the output projection and the
// sampler), the socket to the server's blocks, and the answer loop, off the page's thread.
// In the U-shaped split (placement "split", the default) only hidden states go to the server:
// the text and the token ids stay here. "plain" lets the server run the head (it sees the
// answer's tokens); "cloud" sends the prompt's token ids and the server streams the answer
// (the wasm `LlmCloud`: the tokenizer only); "edge" runs the whole model here. `chat.js` is the
// other end. Messages:
//
//   in:  { id, method: "create", args: [options] }   load the share (once)
//        { id, method: "ask", args: [messages, options] }   answer; tokens come as events
//        { id, method: "stop", args: [] }           end the answer being written
//   out: { id, result } | { id, error: { code, message } }
//        { event: "progress", value }               the share's download
//        { event: "token", value }                  { text, tokens, edgeMs, serverMs, bytesUp, bytesDown }

import { SplitError, fetchCached, fromWasm, isCached, loadWasm, readCachedJson, serverUrl, wasm, writeCachedJson } from "./wasm.js";

/** A handshake not finished in this long fails the answer with "timeout". */
export const CONNECT_TIMEOUT_MS = 10_000;
/** A reply of the server not come in this long fails the answer with "timeout" (a prompt's
 * prefill of 1,024 positions takes seconds on a loaded server; a token, milliseconds). */
export const REPLY_TIMEOUT_MS = 60_000;
/** Positions in each part of a prompt the U-shaped split sends in parts: the server's blocks
 * run one part while this edge computes the next (`./run.sh llm-placements` timed the first
 * token on its 4G link at 1.03x cloud-only's with parts of 8 against 1.53x in one frame:
 * docs/llm.md). */
export const PROMPT_PART = 8;
/** The edge blocks a split may keep when the planner chooses (`placement: "auto"`): the Chat
 * tab's choices. */
export const PLANNED_BLOCKS = [1, 2, 4, 8, 12, 16];
/** What the planner assumes of this browser before it has timed itself: the server's measured
 * costs times this. A rough guess: in the test run at 1e59f41
 * (reports/cold-test/timeline-1e59f41.txt) the whole model in headless Chromium's CPU build
 * wrote 19.4 tokens/s, and natively on one thread the lab measured 42.8 then (60.2 in the
 * committed reports/llm-placements run); once a share has loaded, its own timing replaces it. */
export const ASSUMED_EDGE_SLOWDOWN = 2.5;
/** The link assumed where the browser does not estimate it (`navigator.connection`): the
 * lab's 4G profile, kbit/s. */
export const ASSUMED_LINK_KBPS = { up: 5_000, down: 20_000 };
/** The answer the planner weighs placements for: a prompt and an answer of these lengths. */
export const PLANNED_ANSWER = { promptTokens: 64, answerTokens: 128 };
/** Most positions a resent frame holds on a chat through a group member: 64 f32 rows and their
 * headers fit a direct channel's messages (Chromium's take 256 KiB). */
export const MEMBER_RESEND_ROWS = 64;
/** Waits before each attempt to resume an answer whose socket dropped (then it fails). */
export const RESUME_DELAYS_MS = [200, 1_000, 3_000];

// `evicted`: the server took an idle conversation's cache for another; opening again and
// re-sending the kept hidden states goes on, as after a dropped socket.
// `member_left`: the member running blocks of a group's chat left; the server takes its blocks.
// `kv_budget` mid-answer: other conversations hold the server's KV budget; closing this socket
// gives its reservation back, and opening again after a wait refills the cache if room came.
const transient = (e) => ["network", "timeout", "evicted", "member_left", "kv_budget"].includes(e?.code);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

let state = null;
let stopping = false;

/** The replies of one conversation, in order, whatever carries them: `deliver(frame)` as
 * they come; `next()` waits for the next one to come, `receive()` takes one that came while
 * nobody waited (a streamed answer's tokens) first; `fail(error)` rejects every waiter and
 * every later call. A reply not come within `REPLY_TIMEOUT_MS` fails the conversation with
 * "timeout" (`what`: who did not answer). */
function replyQueue(what) {
  const waiting = [];
  const early = [];
  let broken = null;
  const fail = (error) => {
    broken ??= error;
    while (waiting.length) waiting.shift().reject(error);
  };
  const next = () => new Promise((resolve, reject) => {
    if (broken) {
      reject(broken);
      return;
    }
    const timer = setTimeout(() => {
      fail(new SplitError("timeout", `no reply from ${what} within ${REPLY_TIMEOUT_MS} ms`));
    }, REPLY_TIMEOUT_MS);
    waiting.push({
      resolve: (v) => { clearTimeout(timer); resolve(v); },
      reject: (e) => { clearTimeout(timer); reject(e); },
    });
  });
  return {
    deliver(frame) {
      const w = waiting.shift();
      if (w) w.resolve(frame);
      else early.push(frame);
    },
    next,
    receive: () => (early.length ? Promise.resolve(early.shift()) : next()),
    fail,
    broken: () => broken,
  };
}

/** The socket of one answer: `send(frame)` resolves with the next binary message,
 * `receive()` waits for the next one without sending, `post(frame)` sends only. */
async function openSocket(url, token) {
  const socket = new WebSocket(url, token ? ["split.v1", `bearer.${token}`] : []);
  socket.binaryType = "arraybuffer";
  const replies = replyQueue("the server");
  socket.onclose = (e) => replies.fail(new SplitError("network", `the server closed the conversation (${e.code} ${e.reason || ""})`.trim()));
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      socket.close();
      reject(new SplitError("timeout", `no connection to ${url} within ${CONNECT_TIMEOUT_MS} ms`));
    }, CONNECT_TIMEOUT_MS);
    socket.onopen = () => { clearTimeout(timer); resolve(); };
    socket.onerror = () => { clearTimeout(timer); reject(new SplitError("network", `cannot reach ${url}`)); };
  });
  socket.onmessage = (e) => replies.deliver(new Uint8Array(e.data));
  const close = () => {
    replies.fail(new SplitError("network", "the server closed the conversation"));
    socket.close();
  };
  return {
    send(frame) {
      const reply = replies.next();
      socket.send(frame);
      // A reply not come in time: the socket goes with it.
      reply.catch(close);
      return reply;
    },
    receive: () => {
      const reply = replies.receive();
      reply.catch(close);
      return reply;
    },
    post: (frame) => socket.send(frame),
    close,
  };
}

/** A frame's request id (0 for one too short to have one). */
function frameId(frame) {
  return frame.length >= 16 ? Number(new DataView(frame.buffer, frame.byteOffset, 16).getBigUint64(8, true)) : 0;
}

/** A conversation through a member of the page's device group (the `member` option): the
 * same `send`, `receive`, `post` and `close` as `openSocket`, over the port the group carries
 * its frames on (`DeviceGroup.linkChat`). It begins with the `llmStage` signal (where the
 * member's blocks end, the server running the rest); replies to frames sent before its open
 * (a prefill cut short, then resumed) are dropped by their request ids. */
function openMemberSocket(member) {
  const { port } = member;
  const replies = replyQueue(member.name);
  let firstId = null;
  port.onmessage = ({ data }) => {
    if (data?.via) {
      // How this conversation's frames go: a direct channel, or the server's relay.
      member.via = data.via;
      return;
    }
    if (data?.left) {
      // Gone for good: later conversations go to the server.
      member.left = true;
      replies.fail(new SplitError("member_left", `the chat's member: ${data.left}`));
      return;
    }
    const frame = new Uint8Array(data.frame);
    const id = frameId(frame);
    if (firstId === null || (id !== 0 && id < firstId)) return;
    replies.deliver(frame);
  };
  const post = (frame) => {
    if (replies.broken()) throw replies.broken();
    firstId ??= frameId(frame);
    port.postMessage({ frame });
  };
  port.postMessage({ signal: { llmStage: { to: member.to } } });
  return {
    send(frame) {
      const reply = replies.next();
      post(frame);
      return reply;
    },
    receive: replies.receive,
    post,
    close: () => replies.fail(new SplitError("network", "the conversation was closed")),
  };
}

/** The socket of a split conversation: through the member when the chat has one, else to
 * the server's `/llm`. */
function connect() {
  if (state.member?.left) state.member = null;
  return state.member ? openMemberSocket(state.member) : openSocket(state.socketUrl, state.token);
}

/** Where the share of `blocks` blocks comes from, and what the cache keeps it under. */
function shareSource(llm, base, blocks) {
  return [serverUrl(`${llm.edge_url}${blocks}`, base), `${llm.file_id}-${blocks}`];
}

/** Where cloud-only's tokenizer comes from, and what the cache keeps it under. */
function tokenizerSource(llm, base) {
  return [serverUrl(llm.tokenizer_url, base), `${llm.file_id}-tokenizer`];
}

/** Where this browser keeps what its blocks cost (a name of the client's cache, per model file). */
function edgeCostsKey(llm, base) {
  return new URL(`llm-edge-costs?v=${llm.file_id}`, base);
}

/**
 * The placement the planner (the wasm `planChat`) predicts answers fastest, under the privacy
 * floor and the memory budget: the server's measured costs (`/api/info`), this browser's (timed
 * the last time a share loaded, else assumed from the server's), the link (the round trip of
 * the info request; the downlink `navigator.connection` estimates, else the lab's 4G), and the
 * shares already cached (their download not counted). Resolves with the plan, plus where its
 * inputs came from.
 */
async function planPlacement(llm, base, { floor, memoryBytes, codec, rttMs }) {
  if (!llm.costs || !llm.share_bytes) {
    throw new SplitError("no_cost_table", "this server does not publish the language model's costs: name a placement");
  }
  const measured = await readCachedJson(edgeCostsKey(llm, base));
  const assumed = Object.fromEntries(Object.entries(llm.costs).map(([k, v]) => [k, v * ASSUMED_EDGE_SLOWDOWN]));
  const edge = measured?.block_token_ms > 0 ? measured : assumed;
  const downlink = self.navigator?.connection?.downlink;
  const link = downlink > 0
    ? { rtt_ms: rttMs, up_kbps: downlink * 250, down_kbps: downlink * 1000 }
    : { rtt_ms: rttMs, up_kbps: ASSUMED_LINK_KBPS.up, down_kbps: ASSUMED_LINK_KBPS.down };
  const blocks = PLANNED_BLOCKS.filter((b) => b < llm.layers);
  const cached = [];
  for (const k of [...blocks, llm.layers]) {
    if (await isCached(...shareSource(llm, base, k))) cached.push(k);
  }
  let plan;
  try {
    plan = wasm.planChat({
      shape: { layers: llm.layers, row_bytes: wasm.hiddenRowBytes(codec ?? undefined, llm.width), share_bytes: llm.share_bytes, tokenizer_bytes: llm.tokenizer_bytes },
      edge,
      server: llm.costs,
      link,
      work: {
        prompt_tokens: PLANNED_ANSWER.promptTokens,
        answer_tokens: PLANNED_ANSWER.answerTokens,
        prefill_chunk: PROMPT_PART,
        count_download: true,
        cached_shares: cached,
        cached_tokenizer: await isCached(...tokenizerSource(llm, base)),
      },
      limits: { privacy_floor: floor, memory_bytes: memoryBytes },
      blocks,
    });
  } catch (e) {
    throw fromWasm(e);
  }
  return { ...plan, edgeCosts: measured === edge ? "measured" : "assumed", link, cachedShares: cached };
}

const methods = {
  /**
   * @param {object} options  `server` (the page's origin by default), `blocks` (the edge's
   *   blocks; the rest run on the server; the model's block count: edge-only; the default
   *   privacy floor unless named), `privacyFloor` (fewer blocks than this, short of the whole
   *   model, are refused: a number, or "default"), `positions` (the conversation's longest,
   *   prompt and answer), `token` (the server's bearer token), `codec` (how hidden states
   *   cross: the wasm module's default unless named), `placement` ("split": the server runs
   *   the middle blocks and sees only hidden states; "plain": it also runs the head and sees
   *   the answer's tokens; "cloud": it runs everything and sees the conversation; "edge":
   *   nothing leaves, the whole model is downloaded)
   */
  async create({ server, blocks = null, privacyFloor = 0, positions = 1024, token = null, codec = null, placement = "split", memoryBytes = null, member = null }) {
    if (state) throw new SplitError("bad_option", "this worker already has a chat");
    const base = new URL(server ?? self.location.origin);
    const asked = performance.now();
    const response = await fetch(new URL("api/info", base)).catch(() => null);
    if (!response?.ok) throw new SplitError("network", `cannot read ${base}api/info`);
    const rttMs = performance.now() - asked;
    const llm = (await response.json()).llm;
    if (!llm) throw new SplitError("no_model", "this server hosts no language model");
    // The cpu build: the model's matrix products run in wasm on any browser.
    await loadWasm("cpu", "cpu");
    const floor = privacyFloor === "default" ? wasm.defaultChatPrivacyFloor() : privacyFloor;
    if (!Number.isInteger(floor) || floor < 0) throw new SplitError("bad_option", `privacyFloor: a number of blocks, or "default"`);
    if (!["split", "plain", "cloud", "edge", "auto"].includes(placement)) {
      throw new SplitError("bad_option", `placement: "split", "plain", "cloud", "edge" or "auto", not ${JSON.stringify(placement)}`);
    }
    if (memoryBytes != null && !(memoryBytes > 0)) throw new SplitError("bad_option", "memoryBytes: a positive number of bytes");
    if (member && placement !== "split") {
      throw new SplitError("bad_option", "member: only a U-shaped split (placement \"split\") sends blocks to a member");
    }
    let plan = null;
    if (placement === "auto") {
      plan = await planPlacement(llm, base, { floor, memoryBytes, codec, rttMs });
      placement = plan.chosen.placement;
      blocks = plan.chosen.blocks ?? null;
    }
    const socketUrl = serverUrl(llm.url, base);
    socketUrl.protocol = socketUrl.protocol === "https:" ? "wss:" : "ws:";
    if (placement === "cloud") {
      if (floor > 0) {
        throw new SplitError("privacy_floor", `cloud-only sends the conversation to the server: the privacy floor is ${floor} blocks`);
      }
      positions = Math.min(positions, llm.max_positions);
      const bytes = await fetchCached(...tokenizerSource(llm, base), "llm-weights",
        (value) => postMessage({ event: "progress", value }));
      let cloud;
      try {
        cloud = wasm.LlmCloud.load(bytes, positions);
      } catch (e) {
        throw fromWasm(e);
      }
      state = { cloud, positions, token, socketUrl };
      return { placement, blocks: 0, layers: llm.layers, width: llm.width, positions, shareBytes: bytes.length, weightBytes: 0, codec: null, rowBytes: 0, model: llm.model, plan, member: null };
    }
    if (placement === "edge") blocks = llm.layers;
    blocks ??= Math.max(floor, wasm.defaultChatPrivacyFloor());
    if (!Number.isInteger(blocks) || blocks < 0 || blocks > llm.layers) {
      throw new SplitError("bad_option", `blocks: a number from 0 to ${llm.layers}`);
    }
    if (blocks < floor && blocks < llm.layers) {
      throw new SplitError("privacy_floor", `the hidden states after ${blocks} blocks may not leave this device: ` +
        `the privacy floor is ${floor} blocks (docs/privacy.md)`);
    }
    positions = Math.min(positions, llm.max_positions);
    if (member) {
      if (placement !== "split" || blocks >= llm.layers) {
        throw new SplitError("bad_option", "member: only a U-shaped split (placement \"split\") sends blocks to a member");
      }
      const to = blocks + member.blocks;
      if (!Number.isInteger(member.blocks) || member.blocks < 1 || to > llm.layers) {
        throw new SplitError("bad_option", `member.blocks: a number from 1 to ${llm.layers - blocks} (the blocks after this browser's ${blocks})`);
      }
      member = { ...member, to };
    }
    const bytes = await fetchCached(
      ...shareSource(llm, base, blocks),
      "llm-weights",
      (value) => postMessage({ event: "progress", value }),
    );
    let edge;
    try {
      edge = wasm.LlmEdge.load(bytes, positions);
      if (codec != null) edge.setCodec(codec);
      edge.setServerHead(placement === "plain" && blocks < llm.layers);
      if (member) edge.setResendRows(MEMBER_RESEND_ROWS);
    } catch (e) {
      throw fromWasm(e);
    }
    state = { edge, positions, token, socketUrl, member };
    // What this browser's blocks cost, for the next automatic choice (on this server's model).
    if (blocks > 0) {
      try {
        await writeCachedJson(edgeCostsKey(llm, base), edge.measureCosts());
      } catch {
        // Not measured: the next choice assumes again.
      }
    }
    return {
      placement: blocks === llm.layers ? "edge" : placement,
      blocks,
      layers: llm.layers,
      width: llm.width,
      positions,
      shareBytes: bytes.length,
      weightBytes: edge.weightBytes(),
      codec: edge.codec(),
      rowBytes: edge.rowBytes(),
      model: llm.model,
      plan,
      member: member && { peer: member.peer, name: member.name, blocks: [blocks, member.to] },
    };
  },

  /**
   * Answer `messages` (`[{ role, content }]`): greedy unless `temperature` > 0 (then top-p
   * `topP` from `seed`); at most `maxTokens`. Resolves with the whole answer and its figures.
   */
  async ask(messages, { maxTokens = 128, temperature = 0, topP = 0.9, seed = 0 } = {}) {
    if (!state) throw new SplitError("bad_option", "create the chat first");
    if (state.busy) throw new SplitError("bad_option", "an answer is being written: stop it first");
    if (state.cloud) return askCloud(messages, { maxTokens, temperature, topP, seed });
    state.busy = true;
    stopping = false;
    const { edge } = state;
    // The conversation the last answer left open (its tokens in both sides' caches), taken:
    // kept again only if this answer ends well.
    const kept = state.kept;
    state.kept = null;
    let socket = null;
    try {
      const sampling = JSON.stringify([temperature, topP, seed]);
      const prompt = promptTokens(edge, messages, { maxTokens, temperature, topP, seed });
      const whole = edge.isWhole();
      // A history that goes on from the last answer's (its prompt, the answer and a new
      // message) prefills only what is new; any other starts over.
      const reused = kept && kept.sampling === sampling && prompt.length > kept.tokens.length &&
        kept.tokens.every((t, i) => prompt[i] === t) && edge.position() === kept.tokens.length ? kept.tokens.length : 0;
      if (!reused) {
        kept?.socket?.close();
        edge.reset();
      } else {
        socket = kept.socket;
      }
      const fed = Array.from(prompt.slice(0, reused));
      const figures = { edgeMs: 0, serverMs: 0, bytesUp: 0, bytesDown: 0, promptTokens: prompt.length, reusedTokens: reused, resumes: 0, memberLeft: false };
      // The socket dropped mid-answer: a new one, the conversation opened again, and the hidden
      // states the edge kept sent again, so the server's blocks rebuild their cache; the last
      // reply gives the token the lost one would have.
      const resume = async (error) => {
        for (;;) {
          if (figures.resumes >= RESUME_DELAYS_MS.length || stopping) throw error;
          await sleep(RESUME_DELAYS_MS[figures.resumes]);
          figures.resumes += 1;
          socket?.close();
          if (error.code === "member_left") {
            // The server runs the member's blocks from here: the kept hidden states rebuild them.
            state.member = null;
            figures.memberLeft = true;
          }
          try {
            socket = await connect();
            edge.acceptOpened(await socket.send(edge.reopenFrame()));
            let token;
            for (let f = edge.resendFrame(); f; f = edge.resendFrame()) {
              const reply = await socket.send(f);
              figures.bytesUp += f.length;
              figures.bytesDown += reply.length;
              token = edge.acceptReply(reply);
            }
            return token;
          } catch (e) {
            const failure = fromWasm(e);
            if (!transient(failure)) throw failure;
            error = failure;
          }
        }
      };
      if (!whole && !reused) {
        socket = await connect();
        try {
          edge.acceptOpened(await socket.send(edge.openFrame()));
        } catch (e) {
          // The member gone before the conversation opened: the server takes its blocks.
          const failure = fromWasm(e);
          if (failure.code !== "member_left") throw failure;
          await resume(failure);
        }
      }
      const answer = [];
      let input = prompt.slice(reused);
      const started = performance.now();
      let firstTokenMs = null;
      while (answer.length < maxTokens && !stopping) {
        let t0 = performance.now();
        let next;
        if (whole) {
          next = edge.runLocal(input);
          figures.edgeMs += performance.now() - t0;
          // Let a `stop` message in between tokens.
          await new Promise((resolve) => setTimeout(resolve, 0));
        } else {
          // The prompt of the U-shaped split in parts, every part posted as soon as it is
          // computed and the replies taken in order after; a token a frame afterwards (a plain
          // split's server samples after every frame: its prompt goes whole, with `send`).
          const parts = answer.length === 0 && !edge.serverHead() ? inParts(input, PROMPT_PART) : [input];
          const stepStarted = performance.now();
          let edgeStepMs = 0;
          try {
            for (const [i, part] of parts.entries()) {
              t0 = performance.now();
              const frame = edge.serverHead() ? edge.send(part) : edge.sendPart(part, i === parts.length - 1);
              edgeStepMs += performance.now() - t0;
              figures.bytesUp += frame.length;
              socket.post(frame);
            }
            for (let i = 0; i < parts.length; i++) {
              const reply = await socket.receive();
              figures.bytesDown += reply.length;
              t0 = performance.now();
              next = edge.acceptReply(reply);
              edgeStepMs += performance.now() - t0;
            }
          } catch (e) {
            const failure = fromWasm(e);
            if (!transient(failure)) throw failure;
            next = await resume(failure);
          }
          figures.edgeMs += edgeStepMs;
          figures.serverMs += performance.now() - stepStarted - edgeStepMs;
        }
        fed.push(...input);
        firstTokenMs ??= performance.now() - started;
        if (next === edge.endToken()) break;
        answer.push(next);
        postMessage({ event: "token", value: { text: edge.decode(new Uint32Array(answer)), tokens: answer.length, ...figures } });
        input = new Uint32Array([next]);
      }
      const totalMs = performance.now() - started;
      // Both caches hold `fed`: the next answer of this conversation starts from there.
      if (!stopping) state.kept = { tokens: fed, socket, sampling };
      return {
        text: edge.decode(new Uint32Array(answer)),
        tokens: Array.from(answer),
        stopped: stopping,
        firstTokenMs,
        tokensPerSecond: answer.length > 1 ? (answer.length - 1) / ((totalMs - firstTokenMs) / 1e3) : null,
        placement: whole ? "edge" : edge.serverHead() ? "plain" : "split",
        ...figures,
        // How the frames went to the member, when the answer went through one.
        memberVia: state.member?.via ?? null,
      };
    } catch (e) {
      throw fromWasm(e);
    } finally {
      // The socket stays open with the conversation it serves.
      if (state.kept?.socket !== socket) socket?.close();
      state.busy = false;
    }
  },

  stop() {
    stopping = true;
    state?.stopNow?.();
  },
};

/** `tokens` in consecutive parts of at most `size`. */
function inParts(tokens, size) {
  const parts = [];
  for (let i = 0; i < tokens.length; i += size) parts.push(tokens.subarray(i, i + size));
  return parts;
}

/**
 * The prompt's token ids for `messages` in the model's chat format, with `model` (the
 * `LlmEdge` or the `LlmCloud`) set to sample as asked; `context` when the prompt and
 * `maxTokens` more do not fit the conversation's positions.
 */
function promptTokens(model, messages, { maxTokens, temperature, topP, seed }) {
  model.setSampling(temperature, topP, seed);
  const prompt = model.chatTokens(JSON.stringify(messages));
  if (prompt.length + maxTokens > state.positions) {
    throw new SplitError("context", `${prompt.length} prompt tokens and ${maxTokens} more do not fit ${state.positions} positions`);
  }
  return prompt;
}

/**
 * Cloud-only: the prompt's token ids go up, the server streams the answer. A dropped socket
 * mid-answer: a new one, and the prompt with the answer so far sent again (the server
 * prefills them and goes on).
 */
async function askCloud(messages, { maxTokens, temperature, topP, seed }) {
  state.busy = true;
  stopping = false;
  const { cloud } = state;
  let socket = null;
  try {
    const prompt = promptTokens(cloud, messages, { maxTokens, temperature, topP, seed });
    const figures = { edgeMs: 0, serverMs: 0, bytesUp: 0, bytesDown: 0, promptTokens: prompt.length, reusedTokens: 0, resumes: 0 };
    const answer = [];
    const started = performance.now();
    let firstTokenMs = null;
    let finish = null;
    // One request: a socket, the conversation opened, the tokens so far sent with what is left
    // to write, then its tokens as they come.
    const request = async () => {
      socket?.close();
      cloud.reset();
      socket = await openSocket(state.socketUrl, state.token);
      cloud.acceptOpened(await socket.send(cloud.openFrame()));
      const tokens = new Uint32Array([...prompt, ...answer]);
      const frame = cloud.askFrame(0, tokens, maxTokens - answer.length);
      figures.bytesUp += frame.length;
      socket.post(frame);
      state.stopNow = () => socket.post(cloud.stopFrame());
      if (stopping) state.stopNow();
      for (;;) {
        const reply = await socket.receive();
        figures.bytesDown += reply.length;
        const next = cloud.accept(reply);
        if (next === undefined) return cloud.finish();
        firstTokenMs ??= performance.now() - started;
        if (next === cloud.endToken()) continue;
        answer.push(next);
        postMessage({ event: "token", value: { text: cloud.decode(new Uint32Array(answer)), tokens: answer.length, ...figures } });
      }
    };
    for (;;) {
      try {
        finish = await request();
        break;
      } catch (e) {
        const failure = fromWasm(e);
        if (!transient(failure) || stopping || figures.resumes >= RESUME_DELAYS_MS.length) throw failure;
        await sleep(RESUME_DELAYS_MS[figures.resumes]);
        figures.resumes += 1;
      }
    }
    const totalMs = performance.now() - started;
    figures.serverMs = totalMs;
    return {
      text: cloud.decode(new Uint32Array(answer)),
      tokens: Array.from(answer),
      stopped: finish === "stopped",
      firstTokenMs,
      tokensPerSecond: answer.length > 1 ? (answer.length - 1) / ((totalMs - firstTokenMs) / 1e3) : null,
      placement: "cloud",
      ...figures,
    };
  } catch (e) {
    throw fromWasm(e);
  } finally {
    state.stopNow = null;
    socket?.close();
    state.busy = false;
  }
}

onmessage = async ({ data: { id, method, args } }) => {
  try {
    const f = methods[method];
    if (!f) throw new SplitError("bad_option", `no chat method ${method}`);
    postMessage({ id, result: await f(...args) });
  } catch (e) {
    const error = fromWasm(e);
    postMessage({ id, error: { code: error.code, message: error.message } });
  }
};
