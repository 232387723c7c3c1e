"""Where the recompute's time goes on one device: per layer (read, host-to-device, dequantize, load, forward over the
serve path's 44 default prompt lengths) and the one-time set-up (transformers' layer classes on the meta device).

    PYTHONPATH=... python benchmarks/self_reference_layer_profile.py MODEL [LAYER ...]

Run on the GPU lane's machine after ``serve.sh prep`` (PYTHONPATH as ``serve.sh``'s ``serve_env``), on the
real-width checkpoint (``device.sh real -``).  The rows are random: only time is measured.  Prints, never asserts.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LENGTHS = [5, 17, 33, 64, 65, 90, 120, 7, 1, 150, 40] * 4  # the serve path's first call's lengths, 44 prompts


def main(argv: list[str]) -> int:
    import torch

    from compat.serve import layers as layers_module
    from compat.serve import recompute

    model, numbers = argv[0], [int(n) for n in argv[1:]] or [1, 2]
    index = layers_module.WeightIndex.of(model)
    started = time.time()
    stack = layers_module.Layers(model, index)
    print(f"set-up: Layers() {time.time() - started:.2f} s (transformers import, meta decoder, device {stack.device})")
    rows = [torch.randn(n, stack.config.hidden_size) for n in LENGTHS]
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for number in numbers:
        names = index.layer_names(number)
        sync()
        t0 = time.time()
        tensors = index.read(names.values())
        t1 = time.time()
        state = {inner: tensors[name].to(stack.device) for inner, name in names.items()}
        sync()
        t2 = time.time()
        if stack.scheme is not None:
            layers_module.dequantize(state, stack.scheme)
        sync()
        t3 = time.time()
        layer = stack.load(number)
        sync()
        t4 = time.time()
        for r in rows:
            stack.forward(layer, r)
        sync()
        t5 = time.time()
        stack.unload(layer)
        size = sum(index.sizes[k] for k in names.values()) / 1e9
        print(f"layer {number}: read {t1 - t0:.2f} s, to device {t2 - t1:.2f}, dequantize {t3 - t2:.2f}, load (all "
              f"again) {t4 - t3:.2f}, forward over {len(rows)} prompts {t5 - t4:.2f}; {size:.2f} GB")
    prompts = [[(i * 7 + j) % 1000 + 4 for j in range(n)] for i, n in enumerate(LENGTHS)]
    files = [(p, torch.randn(len(p), len(numbers) + 2, stack.config.hidden_size).bfloat16()) for p in prompts]
    ids = list(range(1, len(numbers) + 3))
    started = time.time()
    chain = recompute.check(model, files, ids, bound=0.2, tie=2 ** -8)
    print(f"the whole chain to id {ids[-1]} again, set-up paid: {time.time() - started:.2f} s, {chain.layers_run} layers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
