"""Fine-tuning the backbone and a linear head on the train split, so that the task shapes the
layer being explained (as in the paper and LACOAT). Full fine-tuning, LoRA merged back into plain
weights, or only the top blocks; optionally a head started from a probe of the frozen model
(LP-FT); model choice by dev accuracy; a checkpoint after every epoch from which a killed run
resumes to the same weights as an uninterrupted one (same machine and thread count).

`FinetuneConfig` (`settings.py`) is the build's stage `finetune`; `tuning` holds the parts of a run.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from vqlc_core.base import checkpoint, distributed
from vqlc_core.base.options import flag
from vqlc_core.base.runio import RunError, read_json, read_safetensors, write_json, write_safetensors
from vqlc_core.data.backbone import Backbone
from vqlc_core.data.dropout import eager_attention, row_range
from vqlc_core.data.settings import FinetuneConfig
from vqlc_core.data.tuning import (add_lora, bucketed_batches, check_texts, dev_accuracy,
                                   digest, epoch_seed, fingerprint, lr_factor, memory_estimate, plain_state,
                                   probe_head, top_params, train_step)

CHECKPOINT_DIR = "checkpoint"  # under the fine-tuning's folder; removed once the run has finished
MODEL_FILE, HEAD_FILE, INFO_FILE = "model.safetensors", "head.safetensors", "finetune.json"

log = logging.getLogger(__name__)
TIMED_STEPS = 4  # steps timed for the estimate, the first a warm-up
FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)  # AdamW(fused=True) takes these
DEV_SHARE = 0.4  # a dev pass's cost per character against a training step's (forward only; 0.39 on MiniLM)


def finetune(backbone: Backbone, texts_df, class_names: list[str], cfg: FinetuneConfig, out_dir, seed: int = 0,
             progress: bool = True, stop_after_epochs: int | None = None,
             estimate_time: bool = True) -> tuple[nn.Linear, dict]:
    """Fine-tune `backbone` in place with a linear head on its pooled final states, on the
    train rows of `texts_df` (text, label, split), choosing the epoch by dev accuracy; the mode
    is `cfg.mode_for` the backbone, and `seed` seeds the head, the adapters, dropout and the
    batch order.

    Writes `model.safetensors` (the whole model, LoRA merged), `head.safetensors` and
    `finetune.json` into `out_dir`; a checkpoint in `out_dir/checkpoint/` after each epoch lets
    a killed run resume. `stop_after_epochs` ends the run there, as a kill would (no final
    files; info["finished"] is False). The backbone ends frozen and in eval mode either way.
    With `estimate_time`, the run's first steps are timed and how long it will take is logged.

    `--finetune-parts` N cuts each batch into N parts run one after another (`train_step`).
    Under torchrun every rank runs it (DistributedDataParallel's scheme, by hand): the parts
    (at least one a rank) are shared out among the ranks, their gradients are summed and each
    row keeps the dropout mask one process draws for it (`dropout.batch_masks`), so the global
    batch, the schedule and every step are one process's (N ranks: one process's with N parts,
    up to the order in which the all-reduce adds the parts' gradients); dev accuracy is counted across the
    ranks, so all choose the same epoch; rank 0 alone writes the checkpoints and the files.
    """
    plan = cfg.plan(cfg.mode_for(backbone.kind, backbone.is_classifier), seed)
    if plan.mode == "none":
        raise RunError(f"{flag(cfg, 'finetune')} none trains nothing; use the frozen backbone's classifier instead.")
    if plan.train_blocks > backbone.n_layers:
        raise RunError(f"{flag(cfg, 'finetune_train_blocks')} is {plan.train_blocks} but "
                       f"{backbone.name or 'the model'} has only {backbone.n_layers} blocks.")
    check_texts(texts_df, class_names)
    out_dir = Path(out_dir)
    ckpt_dir = out_dir / CHECKPOINT_DIR
    train = texts_df[texts_df["split"] == "train"]
    dev = texts_df[texts_df["split"] == "dev"]
    texts, y = train["text"].tolist(), torch.tensor(train["label"].to_numpy(), dtype=torch.long)
    lengths = np.asarray([len(t) for t in texts])
    dev_texts, dev_y = dev["text"].tolist(), dev["label"].to_numpy()
    per_epoch = -(-len(texts) // plan.batch_size)
    total_steps = min(plan.epochs * per_epoch, plan.max_steps or plan.epochs * per_epoch)
    settings = {"config": asdict(plan), "base": fingerprint(backbone.model), "pooling": backbone.pooling,
                "train": digest(train.index if "text_id" not in train else train["text_id"]),
                "classes": list(class_names)}

    started = time.perf_counter()
    ranks, me, main = distributed.world(), distributed.rank(), distributed.is_main()
    n_parts = max(plan.parts, ranks)  # each batch's parts, shared out among the ranks
    reduce = distributed.collectives().all_reduce if ranks > 1 else None
    progress = progress and main
    # leave the caller's global RNG as it was; the attention eager once for the run (`dropout.batch_masks`)
    with torch.random.fork_rng(devices=[]), eager_attention(backbone.model):
        torch.manual_seed(plan.seed)
        head = nn.Linear(backbone.hidden_size, len(class_names))
        lora = add_lora(backbone, plan) if plan.mode == "lora" else None
        try:
            if lora is None:
                for p in top_params(backbone, plan.train_blocks):
                    p.requires_grad_(True)
            named = [(f"model.{n}", p) for n, p in backbone.model.named_parameters() if p.requires_grad]
            named += [(f"head.{n}", p) for n, p in head.named_parameters()]
            params = [p for _, p in named]
            part_rows = -(-plan.batch_size // n_parts)
            mem = memory_estimate(backbone, sum(p.numel() for p in params), part_rows)
            log.info("fine-tune memory on %s: about %.1f GB (weights %.1f GB, gradients and AdamW state of %.1fM "
                     "trainable weights %.1f GB, activations of %d x %d tokens a part %.1f GB; estimated)",
                     backbone.device, mem["total"] / 2**30, mem["weights"] / 2**30, sum(p.numel() for p in params) / 1e6,
                     mem["optimizer"] / 2**30, part_rows, backbone.max_length, mem["activations"] / 2**30)
            # the fused kernel: the same update as the per-tensor loop, a seventh of its time on MiniLM on one CPU
            # thread (0.10 s against 0.71 s a step, beside other work)
            fused = all(p.device.type in ("cpu", "cuda") and p.dtype in FUSED_DTYPES for p in params)
            opt = torch.optim.AdamW([{"params": params[:-2], "peak_lr": plan.learning_rate},
                                     {"params": params[-2:], "peak_lr": plan.head_learning_rate}], weight_decay=0.01,
                                    fused=fused or None)

            def save(epoch: int, step: int, history: list[dict], best) -> None:
                """A checkpoint: the trained weights, the best epoch's, the optimizer's state and the progress."""
                if main:  # every rank holds the same weights and optimizer state
                    checkpoint.save(ckpt_dir, dict(named), opt, epoch, history, settings,
                                    extra={"step": step, "best_epoch": best[1], "best_dev_accuracy": best[0]},
                                    tensors={f"best.{n}": t for n, t in best[2].items()})

            epoch, step, history, best = 0, 0, [], None
            resumed_from = None
            ck = checkpoint.load(ckpt_dir, dict(named), opt, settings, "finetune")
            if ck is not None:
                epoch, step, history, resumed_from = ck.epoch, ck.extra["step"], ck.history, ck.epoch
                best = (ck.extra["best_dev_accuracy"], ck.extra["best_epoch"],
                        {n: ck.tensors[f"best.{n}"] for n, _ in named})
            elif plan.probe_init:  # "epoch 0": the frozen model with a probe head
                t0 = time.perf_counter()
                probe_head(head, backbone, texts, y.numpy(), class_names, plan, progress)
                dev_acc = dev_accuracy(backbone, head, dev_texts, dev_y, plan, reduce) if dev_texts else None
                history.append({"epoch": 0, "loss": None, "dev_accuracy": dev_acc,
                                "seconds": round(time.perf_counter() - t0, 2)})
                best = (dev_acc, 0, {n: p.detach().clone() for n, p in named})
                save(0, 0, history, best)

            estimate, rate, timed = None, None, []  # (seconds, characters) of this run's first steps
            killed = False
            while epoch < plan.epochs and step < total_steps:
                if plan.patience and best is not None and best[0] is not None and epoch - best[1] >= plan.patience:
                    break  # early stop: no better dev accuracy for `patience` epochs
                batches = bucketed_batches(lengths, plan.batch_size, np.random.default_rng([plan.seed, epoch]))
                t0 = time.perf_counter()
                bar = tqdm(batches, desc=f"fine-tune epoch {epoch + 1}/{plan.epochs}", disable=not progress)
                losses = []
                for idx in bar:
                    if step >= total_steps:
                        break  # --finetune-max-steps reached
                    scale = lr_factor(step, total_steps)
                    t_step = time.perf_counter()
                    cut = [row_range(len(idx), n_parts, j) for j in range(n_parts)][me::ranks]  # this rank's parts
                    losses.append(train_step(backbone, head, opt, [texts[i] for i in idx], y[idx], scale, plan,
                                             reduce, cut, epoch_seed(plan.seed, epoch, step)))
                    step += 1
                    if estimate_time and len(timed) < TIMED_STEPS:
                        timed.append((time.perf_counter() - t_step, sum(len(texts[i]) for i in idx)))
                        if len(timed) == TIMED_STEPS:
                            estimate = _estimate(timed, texts, dev_texts, plan, step, total_steps, per_epoch,
                                                 time.perf_counter() - started)
                            rate = sum(t for t, _ in timed[1:]) / max(sum(c for _, c in timed[1:]), 1)
                    bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
                dev_acc = dev_accuracy(backbone, head, dev_texts, dev_y, plan, reduce) if dev_texts else None
                epoch += 1
                history.append({"epoch": epoch, "loss": float(np.mean(losses)), "dev_accuracy": dev_acc,
                                "seconds": round(time.perf_counter() - t0, 2)})
                bar.set_postfix(loss=f"{history[-1]['loss']:.3f}", dev_acc=dev_acc)
                bar.close()
                if dev_acc is None or best is None or dev_acc > best[0]:  # no dev split: the last epoch
                    best = (dev_acc, epoch, {n: p.detach().clone() for n, p in named})
                save(epoch, step, history, best)
                if epoch == stop_after_epochs and epoch < plan.epochs:
                    killed = True
                    break

            finished = not killed
            info = {"config": asdict(plan), "history": history, "chosen_epoch": best[1] if best else None,
                    "best_dev_accuracy": best[0] if best else None, "resumed_from_epoch": resumed_from,
                    "seconds": round(sum(h["seconds"] for h in history), 2),
                    "seconds_this_run": round(time.perf_counter() - started, 2),
                    "estimated_seconds": round(estimate, 1) if estimate is not None else None, "steps": step,
                    "timed_s_per_char": rate,
                    "n_train": len(texts), "n_dev": len(dev_texts), "pooling": backbone.pooling,
                    "class_names": list(class_names), "trainable_parameters": sum(p.numel() for p in params),
                    "torch_threads": torch.get_num_threads(), "ranks": ranks, "finished": finished}
            if finished:
                with torch.no_grad():
                    for n, p in named:
                        p.copy_(best[2][n])
        finally:
            if lora is not None:
                lora.merge_and_unload(progressbar=False)  # plain modules again, adapters folded in
            backbone.model.eval()
            backbone.model.requires_grad_(False)
            head.requires_grad_(False)

    if finished and main:
        write_safetensors(out_dir / MODEL_FILE, plain_state(backbone.model))
        write_safetensors(out_dir / HEAD_FILE, {"weight": head.weight, "bias": head.bias})
        write_json(out_dir / INFO_FILE, info)
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    distributed.barrier()  # rank 0's files are written (a killed rank 0 leaves the others here: torchrun ends them)
    return head, info


def _estimate(timed: list[tuple[float, int]], texts: list[str], dev_texts: list[str], plan, step: int,
              total_steps: int, per_epoch: int, spent: float) -> float:
    """Seconds the whole run will take (at most: patience may stop it earlier): `spent` so far,
    then the steps from `step` to `total_steps` and their dev passes at the time per character
    of the `timed` steps (the first, a warm-up, left out); logged with how to cap or skip it."""
    rate = sum(t for t, _ in timed[1:]) / max(sum(c for _, c in timed[1:]), 1)
    left = total_steps - step
    passes = (-(-total_steps // per_epoch) - (step - 1) // per_epoch) if dev_texts else 0
    seconds = spent + rate * (sum(len(t) for t in texts) * left / per_epoch
                              + DEV_SHARE * sum(len(t) for t in dev_texts) * passes)
    dev = f" and {passes} dev pass{'' if passes == 1 else 'es'}" if passes else ""
    log.info("fine-tune: about %s in all for %d steps (%s train texts, batch %d)%s, timed on its first steps; cap "
             "it with --finetune-max-steps N (the time scales with N) or skip it with --finetune none",
             _duration(seconds), total_steps, f"{len(texts):,}", plan.batch_size, dev)
    return seconds


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def load_finetuned(backbone: Backbone, out_dir) -> nn.Linear:
    """Load the fine-tuned weights in `out_dir` into a freshly loaded `backbone` in place and
    return the trained head."""
    out_dir = Path(out_dir)
    if not (out_dir / INFO_FILE).is_file():
        raise RunError(f"There is no finished fine-tuning in {out_dir}; run the fine-tuning again.")
    info = read_json(out_dir / INFO_FILE)
    if info.get("pooling") != backbone.pooling:
        raise RunError(f"The model in {out_dir} was fine-tuned with {info.get('pooling')} pooling, "
                       f"not {backbone.pooling}; load the backbone with the same pooling.")
    saved, mine = read_safetensors(out_dir / MODEL_FILE), plain_state(backbone.model)
    wrong = sorted(set(saved) ^ set(mine)) or [k for k in saved if saved[k].shape != mine[k].shape]
    if wrong:
        k = wrong[0]
        detail = (f"{k} has shape {tuple(saved[k].shape)}, expected {tuple(mine[k].shape)}" if k in saved and k in mine
                  else f"{k} is {'missing' if k in mine else 'unexpected'}")
        raise RunError(f"The fine-tuned weights in {out_dir} do not fit {backbone.name or 'this model'} "
                       f"({detail}); load the model they were fine-tuned from.")
    backbone.model.load_state_dict(saved, strict=False)  # left out: only tied twins, set with theirs
    backbone.model.eval().requires_grad_(False)
    t = read_safetensors(out_dir / HEAD_FILE)
    if t["weight"].shape[1] != backbone.hidden_size:
        raise RunError(f"The head in {out_dir} expects hidden size {t['weight'].shape[1]}, got "
                       f"{backbone.hidden_size}; load the model it was fine-tuned from.")
    head = nn.Linear(t["weight"].shape[1], t["weight"].shape[0])
    head.load_state_dict(t)
    return head.requires_grad_(False)
