// The demo's Chat tab: SmolLM2-135M-Instruct split between this browser and the server
// (`client/chat.js`). The model's share downloads when the tab is first opened, or again when
// the blocks kept here change; the answer streams in as it is written, with where the blocks
// ran and what each token cost on each side. This file only draws.

import { SplitChat } from "./client/chat.js";

const $ = (id) => document.getElementById(id);

/** What the page knows: the chat (once made), the blocks it was made for, the conversation. */
const ui = { chat: null, blocks: null, loading: null, messages: [] };

function selectTab(tab) {
  document.body.dataset.tab = tab;
  $("tab-classify").setAttribute("aria-selected", String(tab !== "chat"));
  $("tab-chat").setAttribute("aria-selected", String(tab === "chat"));
  if (tab === "chat") ensureChat().catch(() => {});
}

function kb(bytes) {
  return bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e3).toFixed(1)} kB`;
}

/** One cell per block, the embedding and the output projection at the ends, coloured by side. */
function drawSplit(blocks, layers) {
  const cells = [];
  const cell = (cls, title) => {
    const s = document.createElement("span");
    s.className = cls;
    s.title = title;
    cells.push(s);
  };
  cell("ends", "embedding: this browser");
  for (let i = 0; i < layers; i++) cell(i < blocks ? "edge" : "server", `block ${i}: ${i < blocks ? "this browser" : "server"}`);
  cell("ends", "final norm, output projection, sampling: this browser");
  $("chat-split").replaceChildren(...cells);
  $("chat-split-caption").textContent = blocks === layers
    ? `All ${layers} blocks run here: nothing goes to the server.`
    : `Dark: this browser (the embedding, blocks 0–${blocks - 1}, the output layer). Light: the server (blocks ${blocks}–${layers - 1}).`;
}

function setStatus(text) {
  $("chat-status").textContent = text;
}

/** The chat for the blocks selected, made (downloading the share) when it is not there yet. */
async function ensureChat() {
  const blocks = Number($("chat-blocks").value);
  if (ui.chat && ui.blocks === blocks) return ui.chat;
  if (ui.loading?.blocks === blocks) return ui.loading.promise;
  ui.chat?.close();
  ui.chat = null;
  $("chat-send").disabled = true;
  const promise = SplitChat.create({
    blocks,
    onProgress: (p) => setStatus(p.cached
      ? `Model share read from this browser's cache (${kb(p.total)}).`
      : `Downloading the model's share: ${kb(p.loaded)}${p.total ? ` of ${kb(p.total)}` : ""}…`),
  });
  ui.loading = { blocks, promise };
  try {
    const chat = await promise;
    if (ui.loading?.promise !== promise) {
      chat.close();
      return ui.chat;
    }
    ui.chat = chat;
    ui.blocks = blocks;
    drawSplit(blocks, chat.info.layers);
    setStatus(`Ready: ${kb(chat.info.shareBytes)} of the model downloaded, ${kb(chat.info.weightBytes)} held here.`);
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

function showStats(a) {
  const tokens = Math.max(1, a.tokens?.length ?? a.tokens ?? 1);
  const steps = tokens + 1;
  const parts = [];
  if (a.placement === "edge" || a.serverMs === 0) {
    parts.push(`all blocks here: ${(a.edgeMs / steps).toFixed(1)} ms per token`);
  } else {
    parts.push(`here ${(a.edgeMs / steps).toFixed(1)} ms per token, server and link ${(a.serverMs / steps).toFixed(1)} ms`);
    const positions = a.promptTokens + tokens;
    parts.push(`${kb(a.bytesUp)} up, ${kb(a.bytesDown)} down (${a.promptTokens} prompt tokens, then ${tokens}: ${kb(a.bytesUp / positions)} per token each way)`);
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
        showStats(t);
      },
    });
    answer.textContent = a.text + (a.stopped ? " [stopped]" : "");
    ui.messages.push({ role: "assistant", content: a.text });
    showStats(a);
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
$("chat-blocks").addEventListener("change", () => {
  ui.messages = [];
  $("chat-log").replaceChildren();
  ensureChat().catch(() => {});
});
if (new URLSearchParams(location.search).get("tab") === "chat") selectTab("chat");
