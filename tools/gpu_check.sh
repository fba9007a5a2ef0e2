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
#   (cd .gl && apt-get download libvulkan1)       # the loader; the device has the driver's ICD
# Then: the device's run with carry [".gpu", ".gl"] and `bash tools/gpu_check.sh` (~6 minutes;
# the whole tree with both folders is ~50 MB of the 64 allowed).
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
# The driver's Vulkan library (libGLX_nvidia.so.0) finds its own parts only from the driver's
# folder: without it the loader says "Could not get 'vkCreateInstance'" and wgpu sees no adapter.
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
timeout 200 .gpu/split-lab profile --device wgpu --limit 20 --out "$OUT/cost-table-wgpu.json" \
  > "$OUT/profile-wgpu.log" 2>&1
echo "rc=$?"; grep -v "profile: [0-9]*/" "$OUT/profile-wgpu.log" | tail -15
echo "== burn flex on the device's CPU"
timeout 60 .gpu/split-lab profile --limit 20 --codecs f32 --out "$OUT/cost-table-cpu.json" \
  > "$OUT/profile-cpu.log" 2>&1
echo "rc=$?"; tail -2 "$OUT/profile-cpu.log"
