// "What the server could reconstruct from this split": next to a sample photo, the picture a
// white-box attacker rebuilt from the features that split sends (computed offline by
// `./run.sh invert --page-dir web/samples/seen`, docs/privacy.md). Only the bundled samples
// have one: nothing is computed from the visitor's own photos.

const SAMPLES = new Set(["chelsea", "coffee", "camera"]);
let index = null; // samples/seen/index.json, fetched once
let shown = 0; // the latest call: an earlier one still waiting for the index writes nothing

async function loadIndex() {
  if (!index) {
    const response = await fetch("samples/seen/index.json");
    if (!response.ok) throw new Error(`samples/seen/index.json: HTTP ${response.status}`);
    index = await response.json();
  }
  return index;
}

/**
 * Show, in `figure` (an <img> and a <figcaption> inside), what the server could rebuild of
 * `photo` when the request is cut at `cut` (a boundary name, "input" for cloud only, "logits"
 * for edge only, null while auto has not chosen).
 */
export async function showSeen(figure, photo, cut) {
  const call = ++shown;
  const img = figure.querySelector("img");
  const caption = figure.querySelector("figcaption");
  const say = (text, src = null) => {
    if (call !== shown) return;
    figure.hidden = false;
    caption.textContent = text;
    if (src) {
      img.src = src;
      img.alt = text;
      img.hidden = false;
    } else {
      img.removeAttribute("src");
      img.alt = "";
      img.hidden = true;
    }
    figure.dataset.cut = cut ?? "";
    delete figure.dataset.verdict;
  };
  if (!photo) {
    figure.hidden = true;
    return;
  }
  if (cut === "logits") return say("What the server sees: nothing, the whole network runs in this browser.");
  if (cut === "input") return say("What the server sees: the photo itself (cloud only).");
  if (cut === "encrypted") {
    return say("What the server sees: ciphertext of the pooled features, under a key only this browser holds; it cannot read them, nor the answer it computes.");
  }
  if (!SAMPLES.has(photo)) {
    return say("What the server could reconstruct is computed offline for the three samples only; pick one to see it.");
  }
  if (!cut) return say("auto: classify to see where the planner cut, and what that reveals.");
  const seen = await loadIndex();
  const measured = seen.samples[photo] ?? {};
  const i = seen.boundaries.indexOf(cut);
  // The nearest measured boundary at or before the cut: a later one reveals no more than it,
  // since each stage computes only from the one before.
  const at = i < 0 ? undefined : seen.boundaries.slice(0, i + 1).reverse().find((b) => measured[b]);
  if (!at) return say(`No reconstruction was measured at or before ${cut}.`);
  const m = measured[at];
  const where = at === cut ? `after ${cut}` : `after ${at} (the nearest measured before ${cut}, which reveals at most as much)`;
  const verdict = m.structure >= seen.threshold.structure ? "recognisable" : "not recognisable";
  say(`What the server could reconstruct from the features ${where}, ${seen.codec}: SSIM ${m.ssim.toFixed(2)}, ` +
    `layout kept ${m.structure.toFixed(2)} (${seen.threshold.structure} and up: recognisable), so ${verdict}.`,
  `samples/seen/${m.file}`);
  if (call === shown) figure.dataset.verdict = verdict;
}
