"""llama.cpp (through llama-cpp-python) on the same GGUF file, prompt and thread count as
`./run.sh chat`: prefill tokens/s (the prompt in one batch) and greedy decode tokens/s.

    ~/.llm-venv/bin/pip install llama-cpp-python==0.3.16   # builds llama.cpp from source
    ~/.llm-venv/bin/python tools/llamacpp_bench.py MODEL.gguf --threads 2 --max-tokens 32

The prompt is the golden file's first chat prompt, as token ids (shared/tests/data/
smollm2_golden.json), so both engines start from identical input; the greedy tokens are
printed beside the golden continuation.
"""
import argparse
import json
import os
import time

import numpy as np
from llama_cpp import Llama

p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--max-tokens", type=int, default=32)
p.add_argument("--repeats", type=int, default=3)
p.add_argument("--prompt", type=int, default=0, help="index of the golden file's prompt")
a = p.parse_args()

golden = json.load(open(os.path.join(os.path.dirname(__file__), "../shared/tests/data/smollm2_golden.json")))
case = golden["prompts"][a.prompt]
prompt = case["ids"]
llm = Llama(model_path=a.model, n_threads=a.threads, n_threads_batch=a.threads, n_ctx=512, n_batch=512, logits_all=True, verbose=False)
for run in range(a.repeats):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    prefill = time.perf_counter() - t0
    nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    out = [nxt]
    t1 = time.perf_counter()
    while len(out) < a.max_tokens and nxt != 2:
        llm.eval([nxt])
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(nxt)
    decode = time.perf_counter() - t1
    steps = max(len(out) - 1, 1)
    print(f"llama.cpp: run {run}: prefill {len(prompt)} tokens in {prefill * 1e3:.1f} ms ({len(prompt) / prefill:.1f} tokens/s); "
          f"decode {steps} tokens in {decode * 1e3:.1f} ms ({steps / decode:.2f} tokens/s)")
print("greedy:", out[: len(case["greedy"])] == case["greedy"][: len(out)], out)
