"""The parts of a fine-tuning run (`finetune.finetune`): what one run does (`settings.FinetunePlan`),
the seeded batch order and learning-rate schedule, which weights train (the top blocks, or LoRA
adapters on them), one optimizer step, the head's start from a probe of the frozen model (LP-FT),
dev accuracy, and the fingerprints a checkpoint is checked against.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vqlc_core.base import distributed
from vqlc_core.base.distributed import all_reduce_grads_
from vqlc_core.base.runio import RunError
from vqlc_core.data.backbone import Backbone
from vqlc_core.data.classifier import Classifier, pooled_features
from vqlc_core.data.dropout import batch_masks
from vqlc_core.data.settings import FinetunePlan

WARMUP = 0.1  # share of the steps over which the learning rate rises linearly, then falls to 0
MAX_GRAD_NORM = 1.0


# --------------------------------------------------------------------------- order and schedule


def epoch_seed(seed: int, epoch: int, step: int | None = None) -> int:
    """The torch seed of one epoch (or of one step of it): a function of (seed, epoch, step) only,
    so a resumed run draws the same dropout masks as an uninterrupted one without saving any RNG
    state, and every rank draws the same numbers at every step."""
    keys = [seed, epoch] if step is None else [seed, epoch, step]
    return int(np.random.SeedSequence(keys).generate_state(1)[0])


def bucketed_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches of texts of similar length (less padding): shuffle, sort each window of
    50 batches by length, cut it into batches, shuffle the batches."""
    order = rng.permutation(len(lengths))
    window = batch_size * 50
    batches = []
    for w in range(0, len(order), window):
        chunk = order[w : w + window]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches += [chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def lr_factor(step: int, total: int) -> float:
    """Linear warmup over the first WARMUP of the steps, then linear decay to zero."""
    warmup = max(1, int(WARMUP * total))
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


# --------------------------------------------------------------------------- weights


def plain_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state_dict with tied tensors kept once (safetensors refuses shared storage;
    loading the kept one sets its twins too)."""
    out, seen = {}, set()
    for name, t in model.state_dict().items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if t.numel() and key in seen:
            continue
        seen.add(key)
        out[name] = t
    return out


def fingerprint(model: nn.Module) -> float:
    """A sum over every weight: tells a checkpoint's base model from another one."""
    with torch.no_grad():
        return float(sum(p.double().sum() for p in model.parameters()))


def digest(values) -> str:
    """A short hash of a sequence of whole numbers (e.g. the train texts' ids)."""
    return hashlib.sha1(np.ascontiguousarray(np.asarray(values, dtype=np.int64)).tobytes()).hexdigest()


def _block_linears(backbone: Backbone, blocks) -> list[str]:
    """Full names of the nn.Linear modules inside `blocks`: the LoRA targets."""
    names = {id(m): n for n, m in backbone.model.named_modules()}
    return [names[id(m)] for block in blocks for m in block.modules() if isinstance(m, nn.Linear)]


def top_params(backbone: Backbone, n_blocks: int) -> list[nn.Parameter]:
    """Parameters of the base model from the top `n_blocks` blocks up (final norm included);
    every parameter when n_blocks is 0."""
    params = list(backbone.base.parameters())
    if n_blocks == 0:
        return params
    top = {id(p) for block in backbone.blocks[-n_blocks:] for p in block.parameters()}
    in_blocks = {id(p) for p in backbone.blocks.parameters()}
    last_block = max(i for i, p in enumerate(params) if id(p) in in_blocks)
    return [p for i, p in enumerate(params) if id(p) in top or (i > last_block and id(p) not in in_blocks)]


def add_lora(backbone: Backbone, plan: FinetunePlan):
    """Inject LoRA adapters into the linear layers of the trained blocks, in place."""
    from peft import LoraConfig, LoraModel

    blocks = backbone.blocks[-plan.train_blocks:] if plan.train_blocks else backbone.blocks
    lora = LoraConfig(r=plan.lora_rank, lora_alpha=2 * plan.lora_rank, lora_dropout=0.0,
                      target_modules=_block_linears(backbone, blocks))
    return LoraModel(backbone.model, lora, "default")


# --------------------------------------------------------------------------- texts, steps, accuracy


def check_texts(texts_df, class_names) -> None:
    """A one-sentence RunError unless `texts_df` holds train texts of two classes or more, labelled 0..C-1."""
    missing = {"text", "label", "split"} - set(texts_df.columns)
    if missing:
        raise RunError(f"The texts table lacks the column(s) {', '.join(sorted(missing))}; rebuild the 'texts' stage.")
    if not (texts_df["split"] == "train").any():
        raise RunError("There are no train texts to fine-tune on; use more texts or another split.")
    labels = texts_df["label"].to_numpy()
    if texts_df.loc[texts_df["split"] == "train", "label"].nunique() < 2:
        raise RunError("The train texts hold a single class; a classifier needs train texts of at least two classes.")
    if labels.min() < 0 or labels.max() >= len(class_names):
        raise RunError(f"Labels must be class indices 0..{len(class_names) - 1}, got {labels.min()}..{labels.max()}.")


def dev_accuracy(backbone: Backbone, head: nn.Linear, texts: list[str], labels: np.ndarray,
                 plan: FinetunePlan, all_reduce=None) -> float:
    """Accuracy of `head` on the pooled final states of `texts`; the model's train mode is kept.
    Under torchrun (`all_reduce`) each rank scores every world()-th text from its rank, and the
    counts are summed: every rank gets the accuracy of them all."""
    was_training = backbone.model.training
    backbone.model.eval()
    mine = slice(distributed.rank(), None, distributed.world()) if all_reduce is not None else slice(None)
    texts, labels = texts[mine], np.asarray(labels)[mine]
    right = 0.0
    if texts:
        feats = pooled_features(backbone, texts, batch_size=2 * plan.batch_size, autocast_dtype=plan.autocast_dtype,
                                progress=False)
        with torch.no_grad():
            right = float((head(torch.as_tensor(feats)).argmax(1).numpy() == labels).sum())
    backbone.model.train(was_training)
    counts = torch.tensor([right, float(len(texts))], dtype=torch.float64)
    if all_reduce is not None:
        counts = counts.to(next(backbone.model.parameters()).device)  # nccl reduces GPU tensors only
        all_reduce(counts)
    return float(counts[0] / counts[1]) if counts[1] else float("nan")


def probe_head(head: nn.Linear, backbone: Backbone, texts: list[str], labels: np.ndarray, class_names,
               plan: FinetunePlan, progress: bool) -> None:
    """Set `head` to a logistic-regression probe of the (still frozen) model's pooled features:
    the first step of LP-FT (Kumar et al., 2022), so fine-tuning starts from a good head."""
    feats = pooled_features(backbone, texts, batch_size=2 * plan.batch_size, autocast_dtype=plan.autocast_dtype,
                            progress=progress)
    probe = Classifier.train(backbone, feats, labels, class_names, seed=plan.seed).head
    with torch.no_grad():
        head.weight.copy_(probe.weight)
        head.bias.copy_(probe.bias)


def train_step(backbone: Backbone, head: nn.Linear, opt: torch.optim.Optimizer, texts: list[str],
               labels: torch.Tensor, lr_scale: float, plan: FinetunePlan, all_reduce=None,
               parts: list[tuple[int, int]] | None = None, seed: int | None = None) -> float:
    """One AdamW step on one global batch of texts (clipped gradients, each group's peak learning
    rate times `lr_scale`); returns the batch's loss.

    `parts`: the row ranges [lo, hi) of the batch this process runs, one after another, each
    loss weighted by its rows' share and its gradients added to the others' (default: the whole
    batch at once). Each part is padded as the whole batch is padded and keeps its rows of the
    whole batch's dropout masks, drawn after seeding torch with `seed` (`dropout.batch_masks`), so
    a part's gradient does not depend on which process runs it. Under torchrun every rank passes
    the whole batch, its parts (possibly none) and `all_reduce`: the summed gradients are then
    the global batch's mean-loss gradients, every rank takes the same step, and the loss
    returned is the global batch's."""
    backbone.model.train()
    params = [p for group in opt.param_groups for p in group["params"]]
    opt.zero_grad(set_to_none=True)
    n = len(texts)
    parts = [(lo, hi) for lo, hi in (parts if parts is not None else [(0, n)]) if hi > lo]
    loss = torch.zeros(())
    whole = backbone.tokenize(texts)[0] if parts else None  # every part padded as the whole batch is
    for lo, hi in parts:
        if seed is not None:
            torch.manual_seed(seed)  # each part draws from the same whole-batch masks
        enc = {k: whole[k][lo:hi] for k in ("input_ids", "attention_mask")}
        with batch_masks(backbone.model, (lo, hi), n):
            hidden = backbone.final_states(enc, plan.autocast_dtype)  # (rows, T, d)
        part = F.cross_entropy(head(backbone.pool(hidden, enc["attention_mask"])), labels[lo:hi]) * ((hi - lo) / n)
        part.backward()
        loss = loss + part.detach()
    if all_reduce is not None:
        all_reduce_grads_(params, all_reduce)
        loss = loss.detach().float().reshape(1).to(params[0].device)  # nccl reduces GPU tensors only
        all_reduce(loss)
    nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
    for group in opt.param_groups:
        group["lr"] = group["peak_lr"] * lr_scale
    opt.step()
    return float(loss.detach().sum())


def memory_estimate(backbone: Backbone, trainable: int, batch_size: int) -> dict:
    """Fine-tuning's memory, estimated before it starts (bytes): the weights as loaded, the
    trainable weights' gradients and AdamW's two float32 moments (12 bytes each), and the
    activations kept for the backward pass at the longest batch, by Korthikanti et al.'s
    count (34 s b h + 5 a s² b bytes a layer in 16-bit, twice that in float32)."""
    cfg = backbone.model.config
    weights = sum(p.numel() * p.element_size() for p in backbone.model.parameters())
    s, b, h, L = backbone.max_length, batch_size, backbone.hidden_size, backbone.n_layers
    heads = int(getattr(cfg, "num_attention_heads", 1) or 1)
    scale = 2 if next(backbone.model.parameters()).dtype == torch.float32 else 1
    activations = scale * L * (34 * s * b * h + 5 * heads * s * s * b)
    return {"weights": weights, "optimizer": 12 * trainable, "activations": activations,
            "total": weights + 12 * trainable + activations}
