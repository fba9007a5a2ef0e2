"""Top-1 of the numpy EfficientNet-Lite0 reference for every image of a folder, as `file,top1` CSV.

The evaluator compares the burn model against this file (`cargo xtask eval --reference FILE`).
It needs the reference implementation (not part of this repository) on PYTHONPATH:

    PYTHONPATH=../shared/reference:$HOME/.cache/splitinfer/pypi \
        python tools/reference_predictions.py ../shared/data/imagenet-dev > ref.csv
"""
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np
from PIL import Image

import reference as R

folder = sys.argv[1]
model = R.EfficientNetLite0()
files = sorted(f for f in os.listdir(folder) if f.lower().endswith((".jpg", ".jpeg", ".png")))
print("file,top1")
for i, name in enumerate(files):
    x = R.normalize(R.preprocess(Image.open(os.path.join(folder, name))), model.cfg)[None]
    print(f"{name},{int(np.argmax(model.forward(x)[0]))}", flush=True)
    if (i + 1) % 50 == 0:
        print(f"{i + 1}/{len(files)}", file=sys.stderr)
