#!/usr/bin/env python3
"""EfficientNet-Lite0 in PyTorch on a CUDA GPU, built from the project's weights file: the anchor
beside which `split-lab profile --device wgpu` puts burn-wgpu's cloud column (docs/adaptive.md).

    python3 torch_cuda_bench.py --weights W.splw --arch arch.json \
        --fixture shared/tests/data/chelsea [--repeats 50]

`arch.json` is the one `./run.sh onnx` writes (~/.cache/splitinfer/onnx/arch.json). Float32
throughout (TF32 off). Checks the whole network's logits against the golden fixture, then times,
for batch 1, each cloud part (from the image, the stem and every block to the logits): the
activation copied to the GPU, the network run, the logits copied back; the median of the runs
after ten warm-up runs. Prints a JSON report.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_onnx import load_fixture, read_splw  # noqa: E402  (shared with the export)


def same_pad(size, k, stride):
    """TensorFlow's SAME padding, more on the bottom/right when odd, as the model's convolutions."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + k - size, 0)
    return (total // 2, total - total // 2, total // 2, total - total // 2), out


class Net:
    def __init__(self, weights, arch, device):
        self.w = {k: torch.from_numpy(v).to(device) for k, v in weights.items()}
        self.blocks, self.sizes = arch["blocks"], arch["sizes"]

    def conv(self, x, prefix, size, stride, groups):
        w = self.w[prefix + ".weight"]
        pad, out = same_pad(size, w.shape[2], stride)
        x = F.conv2d(F.pad(x, pad), w, self.w[prefix + ".bias"], stride=stride, groups=groups)
        return x, out

    def size_after(self, start):
        """Spatial size of the activation after `start` (-1: the stem, i: block i)."""
        return 112 if start == -1 else self.sizes[start]

    def block(self, x, i, size):
        spec, p, inp = self.blocks[i], f"blocks.{i}", x
        if spec["expand"] != 1:
            x = F.relu6(self.conv(x, p + ".expand", size, 1, 1)[0])
        x, size = self.conv(x, p + ".depthwise", size, spec["stride"], spec["c_in"] * spec["expand"])
        x = self.conv(F.relu6(x), p + ".project", size, 1, 1)[0]
        if spec["stride"] == 1 and spec["c_in"] == spec["c_out"]:
            x = x + inp
        return x, size

    def run(self, x, start, stop, head=True):
        """From after `start` (-2: the image, -1: the stem, i: block i) through block `stop`,
        then, with `head`, the head, the pool and the classifier (`stop` the last block)."""
        if start == -2:
            x, size = self.conv(x, "stem", 224, 2, 1)
            x, start = F.relu6(x), -1
        size = self.size_after(start)
        for i in range(start + 1, stop + 1):
            x, size = self.block(x, i, size)
        if not head:
            return x
        x = F.relu6(self.conv(x, "head", size, 1, 1)[0])
        return F.linear(x.mean((2, 3)), self.w["fc.weight"], self.w["fc.bias"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--arch", required=True)
    ap.add_argument("--fixture", required=True, help="path prefix: <p>_224.rgb and <p>_logits.f32")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--device", default="cuda", help="cpu: check the script where no GPU is")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dev = torch.device(a.device)
    arch = json.load(open(a.arch))
    net = Net(read_splw(a.weights), arch, dev)
    last = len(arch["blocks"]) - 1
    image, want = load_fixture(a.fixture)
    report = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu", "ms": {},
              "max_abs_logit_diff": {}, "top1": {}}
    with torch.inference_mode():
        for start in range(-2, last + 1):
            name = {-2: "input", -1: "stem"}.get(start, f"block{start}")
            # The part's input: the activation the network computes there, on the host.
            host = image if start == -2 else np.ascontiguousarray(
                net.run(torch.from_numpy(image).to(dev), -2, start, head=False).cpu().numpy())
            times = []
            for r in range(10 + a.repeats):
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t = time.perf_counter()
                logits = net.run(torch.from_numpy(host).to(dev), start, last).cpu().numpy()[0]
                if r >= 10:
                    times.append((time.perf_counter() - t) * 1e3)
            report["ms"][name] = statistics.median(times)
            report["max_abs_logit_diff"][name] = float(np.abs(logits - want).max())
            report["top1"][name] = [int(logits.argmax()), int(want.argmax())]
        # The whole network on the photo stacked into batches of 1, 2 and 4 (the server's
        # `--batch` limit): what batching requests buys on this device.
        report["batch_ms"] = {}
        for n in (1, 2, 4):
            host = np.ascontiguousarray(np.repeat(image, n, axis=0))
            times = []
            for r in range(10 + a.repeats):
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t = time.perf_counter()
                net.run(torch.from_numpy(host).to(dev), -2, last).cpu()
                if r >= 10:
                    times.append((time.perf_counter() - t) * 1e3)
            report["batch_ms"][str(n)] = statistics.median(times)
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
