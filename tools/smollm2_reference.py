"""An independent float32 numpy forward of SmolLM2-135M-Instruct from its GGUF file.

The Rust model (shared/src/models/smollm2/) is checked against the golden file this writes:
the weights are dequantized by the `gguf` package (not by our reader), the text is tokenized by
Hugging Face's `tokenizers` built from the GGUF's vocabulary and merges (not by our BPE), and
the forward pass is written from the Llama architecture's definition with the conventions the
GGUF file needs (below).

    python3 -m venv ~/.llm-venv && ~/.llm-venv/bin/pip install numpy gguf tokenizers
    ~/.llm-venv/bin/python tools/smollm2_reference.py MODEL.gguf > shared/tests/data/smollm2_golden.json

Conventions of the GGUF file (llama.cpp's converter wrote them):
- a tensor of GGUF shape [n_in, n_out] is a row-major matrix of n_out rows of n_in values
  (`gguf`'s dequantize returns it as (n_out, n_in)); y = W @ x;
- Q and K rows are permuted so that RoPE rotates adjacent pairs (x[2i], x[2i+1]) of each head
  with angle pos * base^(-2i / head_dim) (llama.cpp's "normal" rope), not the two halves;
- the output projection is tied to the token embedding (no `output.weight`).
"""
import json
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

# Prompts of the golden file: chat-formatted user messages, the system prompt the template adds.
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers between 10 and 30.",
]
# Tokens of greedy continuation per prompt, and fixed vocabulary ids whose logits are kept at
# every position (beside each position's top 5), so a wrong value anywhere in the row shows.
CONTINUATION = 32
PROBE_IDS = [0, 2, 17, 198, 1000, 5000, 12345, 30000, 49151]


def field(reader, key):
    return reader.fields[key].contents()


class Model:
    def __init__(self, path):
        r = GGUFReader(path)
        self.reader = r
        self.n_layer = field(r, "llama.block_count")
        self.dim = field(r, "llama.embedding_length")
        self.n_head = field(r, "llama.attention.head_count")
        self.n_kv = field(r, "llama.attention.head_count_kv")
        self.head_dim = self.dim // self.n_head
        self.base = field(r, "llama.rope.freq_base")
        self.eps = field(r, "llama.attention.layer_norm_rms_epsilon")
        self.w = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float32)
            self.w[t.name] = a.reshape([int(n) for n in reversed(t.shape)]) if a.ndim > 1 else a.reshape(-1)

    def rms(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x, positions):
        # x: (tokens, heads, head_dim); rotate adjacent pairs.
        half = self.head_dim // 2
        freq = self.base ** (-np.arange(half, dtype=np.float64) * 2 / self.head_dim)
        angle = positions[:, None].astype(np.float64) * freq[None, :]
        cos = np.cos(angle).astype(np.float32)[:, None, :]
        sin = np.sin(angle).astype(np.float32)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def forward(self, tokens, cache, start):
        """Logits (len(tokens), vocab) for `tokens` at positions start.., appending to `cache`."""
        w = self.w
        n = len(tokens)
        positions = np.arange(start, start + n)
        x = w["token_embd.weight"][tokens]
        group = self.n_head // self.n_kv
        for i in range(self.n_layer):
            p = f"blk.{i}."
            h = self.rms(x, w[p + "attn_norm.weight"])
            q = (h @ w[p + "attn_q.weight"].T).reshape(n, self.n_head, self.head_dim)
            k = (h @ w[p + "attn_k.weight"].T).reshape(n, self.n_kv, self.head_dim)
            v = (h @ w[p + "attn_v.weight"].T).reshape(n, self.n_kv, self.head_dim)
            q, k = self.rope(q, positions), self.rope(k, positions)
            ks, vs = cache.setdefault(i, ([], []))
            ks.append(k)
            vs.append(v)
            K, V = np.concatenate(ks), np.concatenate(vs)  # (total, kv, hd)
            total = K.shape[0]
            out = np.empty((n, self.n_head, self.head_dim), np.float32)
            for hd in range(self.n_head):
                kv = hd // group
                s = q[:, hd, :] @ K[:, kv, :].T / np.sqrt(self.head_dim)
                # Causal: query at position start+t sees keys 0..start+t.
                mask = np.arange(total)[None, :] > (positions[:, None])
                s = np.where(mask, -np.inf, s)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                out[:, hd, :] = s @ V[:, kv, :]
            x = x + out.reshape(n, self.dim) @ w[p + "attn_output.weight"].T
            h = self.rms(x, w[p + "ffn_norm.weight"])
            gate = h @ w[p + "ffn_gate.weight"].T
            up = h @ w[p + "ffn_up.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
        x = self.rms(x, w["output_norm.weight"])
        return x @ w["token_embd.weight"].T


def tokenizer(reader):
    tokens = field(reader, "tokenizer.ggml.tokens")
    kinds = field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ")) for m in field(reader, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t, k in zip(tokens, kinds) if k == 3])
    return tok


def chat(user):
    return ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def main():
    model = Model(sys.argv[1])
    tok = tokenizer(model.reader)
    eos = field(model.reader, "tokenizer.ggml.eos_token_id")
    out = {"probe_ids": PROBE_IDS, "prompts": []}
    # Pieces, digits, contractions, runs of whitespace, multi-byte characters, a byte the
    # vocabulary has no token for (dropped), and a control token's name (recognised).
    texts = ["Hello, world! 12345 don't  stop\n\ttabs", "naïve café — 你好 🙂", "A  B\n\n\nC", "a\x04b", "x<|im_end|>y"]
    out["tokenizer"] = [{"text": t, "ids": tok.encode(t).ids, "controls": "<|" in t} for t in texts]
    for prompt in PROMPTS:
        ids = tok.encode(chat(prompt)).ids
        cache = {}
        logits = model.forward(np.array(ids), cache, 0)
        positions = []
        for row in logits:
            top = np.argsort(-row)[:5]
            positions.append({"top": [[int(i), float(row[i])] for i in top],
                              "probe": [float(row[i]) for i in PROBE_IDS]})
        generated = []
        nxt = int(np.argmax(logits[-1]))
        while len(generated) < CONTINUATION and nxt != eos:
            generated.append(nxt)
            nxt = int(np.argmax(model.forward(np.array([nxt]), cache, len(ids) + len(generated) - 1)[-1]))
        out["prompts"].append({"user": prompt, "ids": ids, "positions": positions, "greedy": generated,
                               "greedy_text": tok.decode(generated)})
        print(f"{prompt!r} -> {tok.decode(generated)!r}", file=sys.stderr)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
