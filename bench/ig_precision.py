"""Integrated Gradients' completeness error under the forward's bf16 autocast against float32,
at 8 and 16 Gauss-Legendre nodes, on a built run's test sentences (the states from a bf16
forward either way, as the dashboard's explainer takes them):

    python bench/ig_precision.py --run decoder --texts 40
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from vqlc_core.pipeline.run import open_run
from vqlc_core.explain.attribution import layer_attributions


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="a built run (name or path)")
    ap.add_argument("--cache-dir", default=None, help="the cache holding it (default: $VQLC_CACHE_DIR or cache)")
    ap.add_argument("--texts", type=int, default=40, help="test sentences")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    run = open_run(args.run, cache_dir=args.cache_dir)
    ex = run.explainer(methods={})
    texts = run.texts
    test = texts[texts["split"] == "test"]["text"].tolist()[: args.texts]
    from vqlc_core.data.backbone import autocast

    for steps in (8, 16):
        for dtype in (torch.bfloat16, None):
            errors, start = [], time.perf_counter()
            for i in range(0, len(test), 8):
                enc, _ = ex.backbone.tokenize(test[i:i + 8])
                ex.autocast_dtype = torch.bfloat16
                states, proba = ex.forward(enc)
                with autocast(dtype):
                    a = layer_attributions(ex.classifier, enc, ex.layer, states, proba.argmax(1), steps,
                                           baseline=ex.baseline_states(enc, states))
                errors.append(a.completeness_error)
            e = np.concatenate(errors)
            print(f"{steps} nodes, IG in {'bf16 autocast' if dtype else 'float32'}: completeness error "
                  f"{100 * e.mean():.3f}% mean, {100 * np.quantile(e, 0.95):.3f}% p95, {100 * e.max():.3f}% max "
                  f"({time.perf_counter() - start:.1f} s, {len(e)} sentences)", flush=True)


if __name__ == "__main__":
    main()
