#!/bin/bash
# The GPU check for a session lent a device machine (docs/adaptive.md): EfficientNet-Lite0's
# cloud column through burn-wgpu (Vulkan) on the GPU, beside PyTorch CUDA on the same GPU
# (tools/torch_cuda_bench.py) and burn flex on the same machine's CPU. Results go to $OUT.
#
# Prepare on this machine, in the repository root (the folders are ignored by git; carry them):
#   echo /.gpu/ >> .git/info/exclude; echo /.gl/ >> .git/info/exclude; mkdir -p .gpu .gl
#   cargo build -p split-lab --features wgpu      # ~17 minutes on 2 cores from a warm cache
#   cp $CARGO_TARGET_DIR/debug/split-lab .gpu/ && strip .gpu/split-lab && gzip -1 .gpu/split-lab
#   cp ~/.cache/splitinfer/weights/efficientnet-lite0.splw .gpu/
#   cp ~/.cache/splitinfer/onnx/arch.json .gpu/    # written by ./run.sh onnx
#   (cd .gl && apt-get download libvulkan1 libglvnd0 libegl1)  # the loader, and the GL dispatch
#                                                 # the driver's Vulkan library needs (below)
# Then: the device's run with carry [".gpu", ".gl"] and `bash tools/gpu_check.sh` (about 30 s
# once the machine is up; the whole tree with both folders is ~50 MB of the 64 allowed).
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
# The driver's Vulkan library (libGLX_nvidia.so.0) finds its own parts only from the driver's
# folder, and glvnd's dispatch libraries (libglvnd0, libegl1) beside it: on a fresh machine with
# the folder alone the loader said "Could not get 'vkCreateInstance'" and wgpu saw no adapter;
# with both it found the H200.
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
lscpu | grep "Model name" | tee -a "$OUT/gpu.txt"
export SPLIT_WEIGHTS=$PWD/.gpu/efficientnet-lite0.splw SPLIT_CALIBRATION=$PWD/profiles/calibration.splc
export CARGO_MANIFEST_DIR=$PWD/xtask SPLIT_CACHE=/tmp/split-cache
gunzip -kf .gpu/split-lab.gz && chmod +x .gpu/split-lab
echo "== PyTorch CUDA"
PYTHONUNBUFFERED=1 timeout 90 python3 tools/torch_cuda_bench.py --weights "$SPLIT_WEIGHTS" \
  --arch .gpu/arch.json --fixture shared/tests/data/chelsea --repeats 50 \
  > "$OUT/torch-cuda.json" 2> "$OUT/torch.err"
echo "rc=$?"; tail -3 "$OUT/torch.err"
echo "== burn-wgpu"
# 10 runs a part: burn-wgpu tunes its kernels during the first runs of each shape, and a
# median of 3 after one warm-up still held tuning runs (batch 4 read 31.8 ms, then 7.2).
timeout 200 .gpu/split-lab profile --device wgpu --limit 20 --gpu-repeats 10 --batch-sweep \
  --out "$OUT/cost-table-wgpu.json" \
  > "$OUT/profile-wgpu.log" 2>&1
echo "rc=$?"; grep -v "profile: [0-9]*/" "$OUT/profile-wgpu.log" | tail -15
echo "== burn flex on the device's CPU"
timeout 60 .gpu/split-lab profile --limit 20 --codecs f32 --batch-sweep --out "$OUT/cost-table-cpu.json" \
  > "$OUT/profile-cpu.log" 2>&1
echo "rc=$?"; tail -3 "$OUT/profile-cpu.log"
