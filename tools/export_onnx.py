#!/usr/bin/env python3
"""Export EfficientNet-Lite0 from the project's weights file (.splw) to ONNX, check it against the
golden logits, and time ONNX Runtime on the CPU. Run by `./run.sh onnx` (lab/src/onnx.rs), which
passes the architecture (block specs from `split_shared::model::blocks()`) as JSON.

    python export_onnx.py --weights W.splw --arch arch.json --out DIR
        [--fixture shared/tests/data/chelsea] [--repeats 30] [--serve]

Writes DIR/efficientnet-lite0.onnx (whole network) and DIR/tail-<boundary>.onnx (from a boundary
to the logits, the cloud tier's part), and prints a JSON report on stdout.

With --serve the report (on one line) leaves the timings out, and the script then times on
request: each line `NAME THREADS REPEATS` on stdin (NAME: full, block5, block11) is answered
by one line on stdout, the JSON list of that many run times in ms. The caller interleaves
these with its own timings, so that both engines meet the same moments of a machine whose
speed drifts (`./run.sh onnx` does).
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def read_splw(path):
    """The project's weights container: magic, version, count, then named f32 tensors."""
    b = open(path, "rb").read()
    if b[:4] != b"SPLW":
        sys.exit(f"{path}: not a .splw weights file")
    count = struct.unpack_from("<I", b, 8)[0]
    off, out = 12, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<H", b, off)
        off += 2
        name = b[off:off + n].decode()
        off += n
        nd = b[off]
        off += 1
        dims = struct.unpack_from("<" + "I" * nd, b, off)
        off += 4 * nd
        size = math.prod(dims)
        out[name] = np.frombuffer(b, "<f4", size, off).reshape(dims).copy()
        off += 4 * size
    return out


def load_fixture(prefix):
    """A golden fixture: the normalized image `[1, 3, 224, 224]` and the logits it must give."""
    rgb = np.fromfile(prefix + "_224.rgb", "u1").reshape(224, 224, 3).astype("f4")
    x = np.ascontiguousarray(((rgb - 127.0) / 128.0).transpose(2, 0, 1)[None])
    return x, np.fromfile(prefix + "_logits.f32", "<f4")


class Graph:
    def __init__(self, weights):
        self.w, self.nodes, self.inits, self.n = weights, [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def conv(self, x, prefix, size, stride, groups):
        """A convolution with TensorFlow's SAME padding (more on the bottom/right when odd)."""
        w, b = self.w[prefix + ".weight"], self.w[prefix + ".bias"]
        k = w.shape[2]
        out = math.ceil(size / stride)
        total = max((out - 1) * stride + k - size, 0)
        before, after = total // 2, total - total // 2
        wn, bn = prefix + ".weight", prefix + ".bias"
        self.inits += [numpy_helper.from_array(w, wn), numpy_helper.from_array(b, bn)]
        y = self.name(prefix)
        self.nodes.append(helper.make_node(
            "Conv", [x, wn, bn], [y], kernel_shape=[k, k], strides=[stride, stride],
            pads=[before, before, after, after], group=groups, name=y))
        return y, out

    def relu6(self, x):
        lo, hi = self.name("zero"), self.name("six")
        self.inits += [numpy_helper.from_array(np.array(0, "f4"), lo), numpy_helper.from_array(np.array(6, "f4"), hi)]
        y = self.name("relu6")
        self.nodes.append(helper.make_node("Clip", [x, lo, hi], [y], name=y))
        return y

    def add(self, a, b):
        y = self.name("add")
        self.nodes.append(helper.make_node("Add", [a, b], [y], name=y))
        return y


def build(weights, arch, start, batch=1):
    """The network from `start` (0 = the image, k = after block k-1... as boundary index - 2 for
    blocks) to the logits, for `batch` images a run. `start` is a block index: -1 means the input
    image."""
    g = Graph(weights)
    blocks = arch["blocks"]
    if start < 0:
        shape, size = [batch, 3, 224, 224], 224
        x, size = g.conv("input", "stem", size, 2, 1)
        x = g.relu6(x)
        first = 0
    else:
        spec = blocks[start]
        size = arch["sizes"][start]
        shape = [batch, spec["c_out"], size, size]
        x, first = "input", start + 1
    for i in range(first, len(blocks)):
        spec = blocks[i]
        p = f"blocks.{i}"
        inp, in_size = x, size
        hidden = spec["c_in"] * spec["expand"]
        if spec["expand"] != 1:
            x, _ = g.conv(x, p + ".expand", size, 1, 1)
            x = g.relu6(x)
        x, size = g.conv(x, p + ".depthwise", size, spec["stride"], hidden)
        x = g.relu6(x)
        x, _ = g.conv(x, p + ".project", size, 1, 1)
        if spec["stride"] == 1 and spec["c_in"] == spec["c_out"]:
            x = g.add(x, inp)
    x, _ = g.conv(x, "head", size, 1, 1)
    x = g.relu6(x)
    pooled, flat = g.name("pool"), g.name("flat")
    g.nodes.append(helper.make_node("GlobalAveragePool", [x], [pooled], name=pooled))
    g.nodes.append(helper.make_node("Flatten", [pooled], [flat], axis=1, name=flat))
    g.inits += [numpy_helper.from_array(weights["fc.weight"], "fc.weight"), numpy_helper.from_array(weights["fc.bias"], "fc.bias")]
    g.nodes.append(helper.make_node("Gemm", [flat, "fc.weight", "fc.bias"], ["logits"], transB=1, name="fc"))
    graph = helper.make_graph(
        g.nodes, "efficientnet-lite0", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 1000])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="splitinfer")
    # IR 8 is what opset 17 came with; newer runtimes read it, and so do older ones (ORT Web 1.30).
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, shape


def session(path, threads):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def run_times(sess, shape, repeats, warmup=3):
    """Times of `repeats` runs after `warmup` untimed ones, ms."""
    x = np.random.default_rng(0).standard_normal(shape).astype("f4")
    for _ in range(warmup):
        sess.run(None, {"input": x})
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        sess.run(None, {"input": x})
        times.append((time.perf_counter() - t) * 1e3)
    return times


def time_session(path, shape, threads, repeats):
    return statistics.median(run_times(session(path, threads), shape, repeats))


def serve(models):
    """Answer `NAME THREADS REPEATS` lines with the run times, until stdin closes."""
    sessions = {}
    for line in sys.stdin:
        name, threads, repeats = line.split()
        threads, repeats = int(threads), int(repeats)
        path, shape = models[name]
        if (name, threads) not in sessions:
            sessions[(name, threads)] = session(path, threads)
        print(json.dumps(run_times(sessions[(name, threads)], shape, repeats, warmup=2)), flush=True)


def op_category(op, args):
    """The category of an ORT profile node, the same names `cargo xtask onnx` uses for burn.
    By shapes, not names: ORT renames what it fuses (Conv + Clip becomes one node)."""
    if op in ("Conv", "FusedConv"):
        x, w = args["input_type_shape"][0]["float"], args["input_type_shape"][1]["float"]
        c_out, per_group, k = w[0], w[1], w[2]
        c_in = x[1] if len(x) == 4 else c_out
        if per_group == 1 and k > 1:
            return f"depthwise {k}x{k}"
        if k == 3:
            return "stem conv 3x3"
        if c_out == 1280:
            return "head conv 1x1"
        return "expand conv 1x1" if c_out > c_in else "project conv 1x1"
    if op == "Clip":
        return "relu6"
    if op in ("Add", "Sum"):
        return "residual add"
    if op in ("GlobalAveragePool", "Flatten", "Gemm"):
        return "pool + fc"
    return f"other ({op})"


def profile_ops(path, threads, runs):
    """Per-op time of the whole network from ORT's profiler: ms per image by category."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(os.path.dirname(path), "ort-profile")
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal([1, 3, 224, 224]).astype("f4")
    for _ in range(3 + runs):
        sess.run(None, {"input": x})
    trace = sess.end_profiling()
    events = json.load(open(trace))
    os.remove(trace)
    runs_seen = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]
    keep_after = runs_seen[2]["ts"] + runs_seen[2]["dur"] if len(runs_seen) > 3 else 0
    out = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or e["ts"] < keep_after:
            continue
        op = e.get("args", {}).get("op_name", "")
        cat = op_category(op, e.get("args", {}))
        out[cat] = out.get(cat, 0.0) + e["dur"] / 1e3 / runs
    return {"ms": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--arch", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fixture", required=True, help="path prefix: <p>_224.rgb and <p>_logits.f32")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--profile-ops", action="store_true", help="add ORT's per-op profile (1 thread)")
    ap.add_argument("--batch", type=int, default=1, help="images a run in the timed models (ms are per run)")
    ap.add_argument("--serve", action="store_true", help="no timings in the report; time on request (see above)")
    a = ap.parse_args()
    import onnxruntime as ort

    weights = read_splw(a.weights)
    arch = json.load(open(a.arch))
    report = {"onnxruntime": ort.__version__, "onnx": onnx.__version__, "models": {}}
    full, shape = build(weights, arch, -1)
    path = f"{a.out}/efficientnet-lite0.onnx"
    onnx.save(full, path)
    x, want = load_fixture(a.fixture)
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0][0]
    report["max_abs_logit_diff"] = float(np.abs(got - want).max())
    report["top1"] = [int(got.argmax()), int(want.argmax())]
    models = {}
    for name, start in [("full", -1)] + [(b, i) for b, i in arch["tails"]]:
        if start >= 0 or a.batch != 1:
            model, shape = build(weights, arch, start, a.batch)
            path = f"{a.out}/{'tail-' + name if start >= 0 else 'full'}-b{a.batch}.onnx"
            onnx.save(model, path)
        else:
            path, shape = f"{a.out}/efficientnet-lite0.onnx", [1, 3, 224, 224]
        models[name] = (path, shape)
        if not a.serve:
            report["models"][name] = {t: time_session(path, shape, t, a.repeats) for t in (1, 2)}
    if a.profile_ops:
        report["ops"] = {t: profile_ops(f"{a.out}/efficientnet-lite0.onnx", t, a.repeats) for t in (1, 2)}
    if a.serve:
        print(json.dumps(report), flush=True)
        serve(models)
    else:
        json.dump(report, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
