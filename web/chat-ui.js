// The demo's Chat tab: SmolLM2-135M-Instruct split between this browser and the server
// (`client/chat.js`). The model's share downloads when the tab is first opened, or again when
// the blocks kept here change; the answer streams in as it is written, with where the blocks
// ran and what each token cost on each side. This file only draws.

import { SplitChat } from "./client/chat.js";

const $ = (id) => document.getElementById(id);

/** Blocks a group member runs for the chat, after this browser's (docs/llm.md, "Through a
 * device group"). */
const MEMBER_BLOCKS = 8;

/** What the page knows: the chat (once made), the placement and blocks it was made for, the
 * conversation, the device group the Devices panel joined. */
const ui = { chat: null, key: null, loading: null, messages: [], group: null, layers: 30 };

function selectTab(tab) {
  document.body.dataset.tab = tab;
  $("tab-classify").setAttribute("aria-selected", String(tab !== "chat"));
  $("tab-chat").setAttribute("aria-selected", String(tab === "chat"));
  if (tab === "chat") ensureChat().catch(() => {});
}

function kb(bytes) {
  return bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e3).toFixed(1)} kB`;
}

/** Where each part runs in a placement: the embedding, block `i`, the output layer. */
function sides({ placement, blocks, member }) {
  const here = "this browser";
  const onMember = (i) => member && i >= member.blocks[0] && i < member.blocks[1];
  return {
    embedding: placement === "cloud" ? "server" : here,
    block: (i) => (placement === "edge" || (placement !== "cloud" && i < blocks) ? here
      : onMember(i) ? member.name : "server"),
    head: placement === "split" || placement === "edge" ? here : "server",
  };
}

/** One cell per block, the embedding and the output projection at the ends, coloured by side. */
function drawSplit(info) {
  const { placement, blocks, layers } = info;
  const side = sides(info);
  const cells = [];
  const cell = (where, end, title) => {
    const s = document.createElement("span");
    s.className = where === "server" ? (end ? "server-end" : "server")
      : where !== "this browser" ? "member" : end ? "ends" : "edge";
    s.title = `${title}: ${where}`;
    cells.push(s);
  };
  cell(side.embedding, true, "embedding");
  for (let i = 0; i < layers; i++) cell(side.block(i), false, `block ${i}`);
  cell(side.head, true, "final norm, output projection, sampling");
  $("chat-split").replaceChildren(...cells);
  $("chat-split-caption").textContent = {
    edge: `All ${layers} blocks and the output layer run here: nothing goes to the server.`,
    cloud: "Everything runs on the server: it receives your conversation's token ids and writes the answer; this browser holds only the tokenizer.",
    plain: `Dark: this browser (the embedding, blocks 0–${blocks - 1}). Light: the server (blocks ${blocks}–${layers - 1}, the output layer and sampling: it writes, and sees, the answer).`,
    split: `Dark: this browser (the embedding, blocks 0–${blocks - 1}, the output layer). Light: the server (blocks ${blocks}–${layers - 1}).`,
  }[placement];
  const m = info.member;
  if (m) {
    const rest = m.blocks[1] < layers ? `Light: the server (blocks ${m.blocks[1]}–${layers - 1}).` : "The server runs no blocks.";
    $("chat-split-caption").textContent = `Dark: this browser (the embedding, blocks 0–${blocks - 1}, the output layer). `
      + `Orange: ${m.name} (blocks ${m.blocks[0]}–${m.blocks[1] - 1}), through the server's relay. ${rest}`;
  }
}

/** The Chat tab's choice of group members that run chat blocks (`llm` in the member list). */
function showMembers(group) {
  ui.group = group;
  const select = $("chat-member");
  const chosen = select.value;
  const members = (group?.members ?? []).filter((m) => m.llm && m.peer !== group.you);
  select.replaceChildren(new Option("the server", ""), ...members.map((m) => new Option(`${m.name}, then the server`, String(m.peer))));
  // A member that left is no choice any more (a chat through it goes on with the server).
  select.value = members.some((m) => String(m.peer) === chosen) ? chosen : "";
  $("chat-member-label").hidden = members.length === 0;
}

function setStatus(text) {
  $("chat-status").textContent = text;
}

/** The chat for the placement and blocks selected, made (downloading its share) when it is
 * not there yet. */
async function ensureChat() {
  const placement = $("chat-placement").value;
  const local = placement === "split" || placement === "plain";
  $("chat-blocks").disabled = !local;
  $("chat-member").disabled = placement !== "split";
  // "auto": the planner chooses among the placements the default privacy floor allows.
  const options = local ? { placement, blocks: Number($("chat-blocks").value) }
    : placement === "auto" ? { placement, privacyFloor: "default" } : { placement };
  // A member's blocks follow this browser's in a U-shaped split (not past the model's end).
  const peer = placement === "split" && $("chat-member").value ? Number($("chat-member").value) : null;
  const key = JSON.stringify({ ...options, peer });
  const layers = ui.chat?.info?.layers ?? ui.layers;
  if (peer != null) options.member = { group: ui.group, peer, blocks: Math.min(MEMBER_BLOCKS, layers - options.blocks) };
  if (ui.chat && ui.key === key) return ui.chat;
  if (ui.loading?.key === key) return ui.loading.promise;
  ui.chat?.close();
  ui.chat = null;
  $("chat-send").disabled = true;
  const promise = SplitChat.create({
    ...options,
    onProgress: (p) => setStatus(p.cached
      ? `Model share read from this browser's cache (${kb(p.total)}).`
      : `Downloading the model's share: ${kb(p.loaded)}${p.total ? ` of ${kb(p.total)}` : ""}…`),
  });
  ui.loading = { key, promise };
  try {
    const chat = await promise;
    if (ui.loading?.promise !== promise) {
      chat.close();
      return ui.chat;
    }
    ui.chat = chat;
    ui.key = key;
    ui.layers = chat.info.layers;
    drawSplit(chat.info);
    const chosen = chat.info.plan?.chosen;
    const why = chosen
      ? ` The planner chose it: first token in ${chosen.firstTokenMs.toFixed(0)} ms, ${(1000 / chosen.tokenMs).toFixed(1)} tokens/s predicted (this browser's speed ${chat.info.plan.edgeCosts}).`
      : "";
    // The planner's reason stays beside the drawing (the status line changes as answers come).
    $("chat-split-caption").textContent += why;
    setStatus(chat.info.placement === "cloud"
      ? `Ready: the tokenizer downloaded (${kb(chat.info.shareBytes)}); the model runs on the server.`
      : `Ready: ${kb(chat.info.shareBytes)} of the model downloaded, ${kb(chat.info.weightBytes)} held here.`);
    document.body.dataset.chat = "ready";
    return chat;
  } catch (e) {
    setStatus(`The chat cannot start: ${e.message} (${e.code})`);
    document.body.dataset.chat = "failed";
    throw e;
  } finally {
    if (ui.loading?.promise === promise) ui.loading = null;
    $("chat-send").disabled = false;
  }
}

function bubble(role, text) {
  const p = document.createElement("p");
  p.className = role;
  p.textContent = text;
  $("chat-log").append(p);
  return p;
}

/** The answer's figures, `a` as `ask` resolves or a token event has them; `placement` the
 * chat's (token events do not carry it), `member` the name of the group member running
 * blocks of it, if any. */
function showStats(a, placement, member = null) {
  const tokens = Math.max(1, a.tokens?.length ?? a.tokens ?? 1);
  const steps = tokens + 1;
  const parts = [];
  if (placement === "edge") {
    parts.push(`all blocks here: ${(a.edgeMs / steps).toFixed(1)} ms per token`);
  } else if (placement === "cloud") {
    if (a.serverMs) parts.push(`server and link ${(a.serverMs / steps).toFixed(1)} ms per token`);
    parts.push(`${kb(a.bytesUp)} up (the ${a.promptTokens} prompt tokens' ids), ${kb(a.bytesDown)} down`);
  } else {
    const away = member && !a.memberLeft ? `${member}, server and links` : "server and link";
    parts.push(`here ${(a.edgeMs / steps).toFixed(1)} ms per token, ${away} ${(a.serverMs / steps).toFixed(1)} ms`);
    if (member && a.memberLeft) parts.push(`${member} left the group: the server took its blocks`);
    // Prompt tokens the last answer left in both caches were not sent again.
    const kept = a.reusedTokens ?? 0;
    const positions = a.promptTokens - kept + tokens;
    const reuse = kept ? `, ${kept} of them kept from the last answer` : "";
    parts.push(`${kb(a.bytesUp)} up, ${kb(a.bytesDown)} down (${a.promptTokens} prompt tokens${reuse}, then ${tokens}: ${kb(a.bytesUp / positions)} per token up)`);
  }
  if (a.firstTokenMs != null) parts.push(`first token after ${a.firstTokenMs.toFixed(0)} ms`);
  if (a.tokensPerSecond) parts.push(`${a.tokensPerSecond.toFixed(1)} tokens/s`);
  $("chat-stats").textContent = parts.join(" · ");
}

async function send(event) {
  event.preventDefault();
  const text = $("chat-input").value.trim();
  if (!text) return;
  let chat;
  try {
    chat = await ensureChat();
  } catch {
    return;
  }
  $("chat-input").value = "";
  ui.messages.push({ role: "user", content: text });
  bubble("user", text);
  const answer = bubble("assistant", "…");
  $("chat-send").disabled = true;
  $("chat-stop").disabled = false;
  document.body.dataset.chat = "answering";
  try {
    const a = await chat.ask(ui.messages, {
      maxTokens: 128,
      onToken: (t) => {
        answer.textContent = t.text;
        showStats(t, chat.info.placement, chat.info.member?.name);
      },
    });
    answer.textContent = a.text + (a.stopped ? " [stopped]" : "");
    ui.messages.push({ role: "assistant", content: a.text });
    showStats(a, chat.info.placement, chat.info.member?.name);
    setStatus(a.stopped ? "Stopped." : "Answered.");
    document.body.dataset.chat = "answered";
  } catch (e) {
    answer.textContent = `(no answer: ${e.message})`;
    answer.dataset.error = e.code;
    ui.messages.pop();
    setStatus(`The answer failed: ${e.message} (${e.code})`);
    document.body.dataset.chat = "failed";
  } finally {
    $("chat-send").disabled = false;
    $("chat-stop").disabled = true;
  }
}

$("tab-classify").addEventListener("click", () => selectTab("classify"));
$("tab-chat").addEventListener("click", () => selectTab("chat"));
$("chat-form").addEventListener("submit", send);
$("chat-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) send(e);
});
$("chat-stop").addEventListener("click", () => ui.chat?.stop());
document.addEventListener("split-group", (e) => showMembers(e.detail));
for (const id of ["chat-placement", "chat-blocks", "chat-member"]) {
  $(id).addEventListener("change", () => {
    ui.messages = [];
    $("chat-log").replaceChildren();
    ensureChat().catch(() => {});
  });
}
if (new URLSearchParams(location.search).get("tab") === "chat") selectTab("chat");
