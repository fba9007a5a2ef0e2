// The demo's Devices panel: start or join a device group, watch its members, and use it —
// share an album over the devices, run one photo through a pipeline across them, or fuse
// their views. All group logic lives in client/group.js; this file only draws.

import { qrSvg } from "./qr.js";

const $ = (id) => document.getElementById(id);

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text;
  return td;
}

function power(p) {
  if (!p || p.state === "unknown") return "unknown";
  return p.state === "charging" ? "charging" : `battery ${(p.level * 100).toFixed(0)}%`;
}

/** The member list as a table. */
function showMembers(g) {
  $("d-members").tBodies[0].replaceChildren(...g.members.map((m) => {
    const tr = document.createElement("tr");
    const link = m.peer === g.you ? "—" : g.links?.[m.peer] === "open" ? "direct" : "via server";
    tr.append(cell(`${m.name}${m.peer === g.you ? " (this one)" : ""}`), cell(m.backend),
      cell(m.msPerImage.toFixed(1)), cell(String(m.load)), cell(power(m.power)), cell(link));
    return tr;
  }));
  document.body.dataset.groupMembers = String(g.members.length);
}

/** A chain as boxes, each as wide as its share of the blocks. */
function drawChain(stages, names) {
  const order = names.map((b) => b.name);
  const span = (s) => Math.max(1, order.indexOf(s.to) - order.indexOf(s.from));
  $("d-chain").replaceChildren(...stages.map((s, i) => {
    const box = document.createElement("span");
    box.className = `stage s${i % 4}`;
    box.style.flexGrow = String(span(s));
    box.textContent = `${s.device ?? `peer ${s.peer}`}: ${s.from}→${s.to}`;
    box.title = s.sendBytes ? `sends ${Math.round(s.sendBytes)} bytes on` : "";
    return box;
  }));
}

/**
 * Wire the panel.
 * @param {object} client  the page's SplitClient
 * @param {() => Uint8Array | null} currentImage  the photo the page shows
 * @param {(e: Error) => void} showError
 */
export function setupDevices(client, currentImage, showError) {
  let group = null;
  // The Chat tab offers members that run chat blocks (`chat-ui.js` listens).
  const announce = () => document.dispatchEvent(new CustomEvent("split-group", { detail: group }));
  const samples = async () => Promise.all(["chelsea", "coffee", "camera"].map(async (n) =>
    new Uint8Array(await (await fetch(`samples/${n}.png`)).arrayBuffer())));

  const joined = (g) => {
    group = g;
    $("d-join").hidden = true;
    $("d-group").hidden = false;
    $("d-code-shown").textContent = g.code;
    const link = new URL(location.href);
    link.search = `?group=${g.code}`;
    $("d-link").href = link.href;
    $("d-link").textContent = link.href;
    // A phone's camera reads the link off this screen.
    $("d-qr").innerHTML = qrSvg(link.href, 3);
    $("d-expires").textContent = `${Math.round(g.codeExpiresS / 60)} min`;
    showMembers(g);
    document.body.dataset.group = g.code;
    announce();
  };
  const join = async (code) => {
    $("d-status").textContent = code ? `Joining ${code}… (this device downloads every stage first)` : "Starting a group… (this device downloads every stage first)";
    try {
      const g = await client.joinGroup({
        code: code || undefined,
        llm: $("d-llm").checked,
        onMembers: (s) => { showMembers({ ...s }); announce(); },
      });
      joined(g);
      $("d-status").textContent = "";
    } catch (e) {
      $("d-status").textContent = "";
      showError(e);
    }
  };
  $("d-create").addEventListener("click", () => join(null));
  $("d-join-button").addEventListener("click", () => join($("d-code").value.trim().toUpperCase()));
  $("d-code").addEventListener("keydown", (e) => { if (e.key === "Enter") join($("d-code").value.trim().toUpperCase()); });
  $("d-leave").addEventListener("click", async () => {
    await group?.leave();
    group = null;
    $("d-group").hidden = true;
    $("d-join").hidden = false;
    delete document.body.dataset.group;
    announce();
  });
  $("d-run").addEventListener("click", async () => {
    if (!group) return;
    const mode = $("d-mode").value;
    $("d-run").disabled = true;
    $("d-out").textContent = "";
    try {
      if (mode === "album") {
        // The page's photo (if any) and the samples, four times over: an album of 12 or 13.
        const album = [...(currentImage() ? [currentImage()] : []), ...(await samples()).flatMap((s) => [s, s, s, s])];
        $("d-progress").hidden = false;
        $("d-progress").max = album.length;
        $("d-progress").value = 0;
        const names = Object.fromEntries(group.members.map((m) => [m.peer, m.name]));
        const started = performance.now();
        const results = await group.classifyAll(album, {
          onProgress: (p) => {
            $("d-progress").value = p.done;
            $("d-out").textContent = `${p.done} of ${p.total}: ${Object.entries(p.counts).map(([peer, n]) => `${names[peer] ?? peer} ${n}`).join(", ")}`;
          },
        });
        const counts = {};
        for (const r of results) counts[r.peer] = (counts[r.peer] ?? 0) + 1;
        $("d-out").textContent = `${results.length} photos in ${(performance.now() - started).toFixed(0)} ms — `
          + Object.entries(counts).map(([peer, n]) => `${names[peer] ?? `peer ${peer}`}: ${n}`).join(", ");
        $("d-chain").replaceChildren();
      } else if (mode === "pipeline") {
        const photo = currentImage() ?? (await samples())[0];
        const r = await group.classify(photo, { goal: $("d-goal").value });
        drawChain(r.stages, client.boundaries());
        $("d-out").textContent = `${r.top[0].name} (${(r.top[0].prob * 100).toFixed(1)}%) in ${r.totalMs.toFixed(0)} ms`
          + (r.predicted.latencyMs ? `, predicted ${r.predicted.latencyMs.toFixed(0)} ms` : "")
          + ` — features ${{ relay: "relayed by the server", p2p: "sent device to device", mixed: "partly device to device", local: "stayed here" }[r.via]}`
          + (r.replans ? `, planned again ${r.replans}× after a device left` : "");
      } else {
        const photo = currentImage() ?? (await samples())[0];
        await group.setView(photo);
        const r = await group.fuse();
        $("d-out").textContent = `Fused (${r.rule}): ${r.top[0].name} (${(r.top[0].prob * 100).toFixed(1)}%) — `
          + r.views.map((v) => `${v.device}: ${v.top[0].name}`).join("; ")
          + (r.missing.length ? `; no view on ${r.missing.map((m) => m.device).join(", ")}` : "");
        $("d-chain").replaceChildren();
      }
      document.body.dataset.groupRuns = String(Number(document.body.dataset.groupRuns ?? 0) + 1);
    } catch (e) {
      showError(e);
    } finally {
      $("d-run").disabled = false;
      $("d-progress").hidden = true;
    }
  });
  $("d-mode").addEventListener("change", () => { $("d-goal-label").hidden = $("d-mode").value !== "pipeline"; });
  $("devices").hidden = false;
  const code = new URLSearchParams(location.search).get("group");
  if (code) join(code.toUpperCase());
}
