"""Fine-tuning the backbone and a linear head on the train split, so that the task shapes the
layer being explained (as in the paper and LACOAT). Full fine-tuning, LoRA merged back into plain
weights, or only the top blocks; optionally a head started from a probe of the frozen model
(LP-FT); model choice by dev accuracy; a checkpoint after every epoch from which a killed run
resumes to the same weights as an uninterrupted one (same machine and thread count).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from .backbone import Backbone
from .classifier import Classifier, pooled_features
from .runio import RunError, read_json, read_safetensors, write_json, write_safetensors

MODES = ("none", "full", "lora")
DTYPES = {"float32": None, "bfloat16": torch.bfloat16}
# MR, 2 epochs: full at 3e-5 reaches 0.80 test accuracy with MiniLM; LoRA at 1e-3 learns in
# tens of steps on SmolLM2, where 1e-4 on the top blocks barely moves it.
DEFAULT_LR = {"full": 3e-5, "lora": 1e-3}
CHECKPOINT = "checkpoint/checkpoint.safetensors"
MODEL_FILE, HEAD_FILE, INFO_FILE = "model.safetensors", "head.safetensors", "finetune.json"
WARMUP = 0.1  # share of the steps over which the learning rate rises linearly, then falls to 0
MAX_GRAD_NORM = 1.0
HEAD_LR = 1e-3  # for a head started at random (probe_init off): at 3e-5 it barely moves in a short run


def cli_flag(name: str) -> str:
    """The command-line flag of a config field: --finetune for the mode, --finetune-<name> otherwise."""
    return "--finetune" if name == "mode" else "--finetune-" + name.replace("_", "-")


@dataclass
class FinetuneConfig:
    mode: str = field(default="full", metadata={"help":
        "fine-tuning: none (frozen backbone), full (every weight) or lora (low-rank adapters, merged after)"})
    epochs: int = field(default=2, metadata={"help": "passes over the train split (default: 2)"})
    batch_size: int = field(default=32, metadata={"help": "texts per optimizer step (default: 32)"})
    lr: float | None = field(default=None, metadata={"help":
        "peak learning rate of the model's weights (default: 3e-5 for full, 1e-3 for lora; the head's is at least 1e-3)"})
    lora_rank: int = field(default=8, metadata={"help": "rank of the LoRA adapters (default: 8)"})
    train_blocks: int = field(default=0, metadata={"help":
        "train only the top N transformer blocks (0: all of them)"})
    dtype: str = field(default="float32", metadata={"help":
        "float32, or bfloat16 CPU autocast (faster on CPUs with BF16)"})
    probe_init: bool = field(default=False, metadata={"help":
        "start the head from a logistic-regression probe of the frozen model, which stays the choice "
        "when no epoch beats it on dev (LP-FT)"})
    patience: int = field(default=2, metadata={"help":
        "stop after this many epochs without a better dev accuracy (0: never stop early)"})
    seed: int = field(default=0, metadata={"help": "seed for the head, the adapters, dropout and the batch order"})

    def __post_init__(self):
        if self.mode not in MODES:
            raise RunError(f"{cli_flag('mode')} must be one of {', '.join(MODES)}, got {self.mode!r}.")
        for name, low in (("epochs", 1), ("batch_size", 1), ("lora_rank", 1), ("train_blocks", 0),
                          ("patience", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise RunError(f"{cli_flag(name)} must be a whole number of at least {low}, got {value!r}.")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and 0 < self.lr < 1):
            raise RunError(f"{cli_flag('lr')} must be a number between 0 and 1, got {self.lr!r}.")
        if self.dtype not in DTYPES:
            raise RunError(f"{cli_flag('dtype')} must be float32 or bfloat16, got {self.dtype!r}.")
        if not isinstance(self.probe_init, bool):
            raise RunError(f"{cli_flag('probe_init')} must be true or false, got {self.probe_init!r}.")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise RunError(f"{cli_flag('seed')} must be a whole number, got {self.seed!r}.")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR.get(self.mode, 0.0)

    @property
    def autocast_dtype(self):
        return DTYPES[self.dtype]


# --------------------------------------------------------------------------- helpers


def _epoch_seed(seed: int, epoch: int) -> int:
    """The torch seed of one epoch: a function of (seed, epoch) only, so a resumed run draws the
    same dropout masks as an uninterrupted one without saving any RNG state."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


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


def _fingerprint(model: nn.Module) -> float:
    """A sum over every weight: tells a checkpoint's base model from another one."""
    with torch.no_grad():
        return float(sum(p.double().sum() for p in model.parameters()))


def _digest(values) -> str:
    return hashlib.sha1(np.ascontiguousarray(np.asarray(values, dtype=np.int64)).tobytes()).hexdigest()


def _block_linears(backbone: Backbone, blocks) -> list[str]:
    """Full names of the nn.Linear modules inside `blocks`: the LoRA targets."""
    names = {id(m): n for n, m in backbone.model.named_modules()}
    return [names[id(m)] for block in blocks for m in block.modules() if isinstance(m, nn.Linear)]


def _top_params(backbone: Backbone, n_blocks: int) -> list[nn.Parameter]:
    """Parameters of the base model from the top `n_blocks` blocks up (final norm included);
    every parameter when n_blocks is 0."""
    params = list(backbone.base.parameters())
    if n_blocks == 0:
        return params
    top = {id(p) for block in backbone.blocks[-n_blocks:] for p in block.parameters()}
    in_blocks = {id(p) for p in backbone.blocks.parameters()}
    last_block = max(i for i, p in enumerate(params) if id(p) in in_blocks)
    return [p for i, p in enumerate(params) if id(p) in top or (i > last_block and id(p) not in in_blocks)]


def _add_lora(backbone: Backbone, cfg: FinetuneConfig):
    """Inject LoRA adapters into the linear layers of the trained blocks, in place."""
    from peft import LoraConfig, LoraModel

    blocks = backbone.blocks[-cfg.train_blocks:] if cfg.train_blocks else backbone.blocks
    lora = LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, lora_dropout=0.0,
                      target_modules=_block_linears(backbone, blocks))
    return LoraModel(backbone.model, lora, "default")


def _optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    return {f"optim.{i}.{k}": torch.as_tensor(v) for i, s in opt.state_dict()["state"].items() for k, v in s.items()}


def _load_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    state = opt.state_dict()
    for i in (i for group in state["param_groups"] for i in group["params"]):
        prefix = f"optim.{i}."
        got = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        if got:
            state["state"][i] = got
    opt.load_state_dict(state)


def _accuracy(backbone: Backbone, head: nn.Linear, texts: list[str], labels: np.ndarray, cfg) -> float:
    was_training = backbone.model.training
    backbone.model.eval()
    feats = pooled_features(backbone, texts, batch_size=2 * cfg.batch_size, autocast_dtype=cfg.autocast_dtype,
                            progress=False)
    with torch.no_grad():
        pred = head(torch.as_tensor(feats)).argmax(1).numpy()
    backbone.model.train(was_training)
    return float((pred == labels).mean())


def _check_texts(texts_df, class_names) -> None:
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


# --------------------------------------------------------------------------- training


def _probe_(head: nn.Linear, backbone: Backbone, texts: list[str], labels: np.ndarray, class_names,
            cfg: FinetuneConfig, progress: bool) -> None:
    """Set `head` to a logistic-regression probe of the (still frozen) model's pooled features:
    the first step of LP-FT (Kumar et al., 2022), so fine-tuning starts from a good head."""
    feats = pooled_features(backbone, texts, batch_size=2 * cfg.batch_size, autocast_dtype=cfg.autocast_dtype,
                            progress=progress)
    probe = Classifier.train(backbone, feats, labels, class_names, seed=cfg.seed).head
    with torch.no_grad():
        head.weight.copy_(probe.weight)
        head.bias.copy_(probe.bias)


def _train_step(backbone: Backbone, head: nn.Linear, opt: torch.optim.Optimizer, texts: list[str],
                labels: torch.Tensor, lr_scale: float, cfg: FinetuneConfig) -> float:
    """One AdamW step on one batch of texts (clipped gradients, each group's peak learning rate
    times `lr_scale`); returns the batch's loss."""
    backbone.model.train()
    enc, _ = backbone.tokenize(texts)
    hidden = backbone.final_states(enc, cfg.autocast_dtype)  # (B, T, d)
    loss = F.cross_entropy(head(backbone.pool(hidden, enc["attention_mask"])), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_([p for group in opt.param_groups for p in group["params"]], MAX_GRAD_NORM)
    for group in opt.param_groups:
        group["lr"] = group["peak_lr"] * lr_scale
    opt.step()
    return loss.item()


def finetune(backbone: Backbone, texts_df, class_names: list[str], cfg: FinetuneConfig, out_dir,
             progress: bool = True, stop_after_epochs: int | None = None) -> tuple[nn.Linear, dict]:
    """Fine-tune `backbone` in place with a linear head on its pooled final states, on the
    train rows of `texts_df` (text, label, split), choosing the epoch by dev accuracy.

    Writes `model.safetensors` (the whole model, LoRA merged), `head.safetensors` and
    `finetune.json` into `out_dir`; a checkpoint in `out_dir/checkpoint/` after each epoch lets
    a killed run resume. `stop_after_epochs` ends the run there, as a kill would (no final
    files; info["finished"] is False). The backbone ends frozen and in eval mode either way.
    """
    if cfg.mode == "none":
        raise RunError(f"{cli_flag('mode')} none trains nothing; use the frozen backbone's classifier instead.")
    if cfg.train_blocks > backbone.n_layers:
        raise RunError(f"{cli_flag('train_blocks')} is {cfg.train_blocks} but {backbone.name or 'the model'} "
                       f"has only {backbone.n_layers} blocks.")
    _check_texts(texts_df, class_names)
    out_dir = Path(out_dir)
    train = texts_df[texts_df["split"] == "train"]
    dev = texts_df[texts_df["split"] == "dev"]
    texts, y = train["text"].tolist(), torch.tensor(train["label"].to_numpy(), dtype=torch.long)
    lengths = np.asarray([len(t) for t in texts])
    dev_texts, dev_y = dev["text"].tolist(), dev["label"].to_numpy()
    n_batches = -(-len(texts) // cfg.batch_size)
    total_steps = cfg.epochs * n_batches
    settings = {"config": asdict(cfg), "base": _fingerprint(backbone.model), "pooling": backbone.pooling,
                "train": _digest(train.index if "text_id" not in train else train["text_id"]),
                "classes": list(class_names)}

    started = time.perf_counter()
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG as it was
        torch.manual_seed(cfg.seed)
        head = nn.Linear(backbone.hidden_size, len(class_names))
        lora = _add_lora(backbone, cfg) if cfg.mode == "lora" else None
        try:
            if lora is None:
                for p in _top_params(backbone, cfg.train_blocks):
                    p.requires_grad_(True)
            named = [(f"model.{n}", p) for n, p in backbone.model.named_parameters() if p.requires_grad]
            named += [(f"head.{n}", p) for n, p in head.named_parameters()]
            params = [p for _, p in named]
            head_lr = cfg.learning_rate if cfg.probe_init else max(HEAD_LR, cfg.learning_rate)
            opt = torch.optim.AdamW([{"params": params[:-2], "peak_lr": cfg.learning_rate},
                                     {"params": params[-2:], "peak_lr": head_lr}], weight_decay=0.01)

            epoch, step, history, best = 0, 0, [], None
            resumed_from = None
            ckpt = out_dir / CHECKPOINT
            if ckpt.exists():
                meta, best = _load_checkpoint(ckpt, named, opt, settings)
                epoch, step, history, resumed_from = meta["epoch"], meta["step"], meta["history"], meta["epoch"]
            elif cfg.probe_init:  # "epoch 0": the frozen model with a probe head
                t0 = time.perf_counter()
                _probe_(head, backbone, texts, y.numpy(), class_names, cfg, progress)
                dev_acc = _accuracy(backbone, head, dev_texts, dev_y, cfg) if dev_texts else None
                history.append({"epoch": 0, "loss": None, "dev_accuracy": dev_acc,
                                "seconds": round(time.perf_counter() - t0, 2)})
                best = (dev_acc, 0, {n: p.detach().clone() for n, p in named})
                _save_checkpoint(ckpt, named, opt, best, settings, {"epoch": 0, "step": 0, "history": history})

            killed = False
            while epoch < cfg.epochs:
                if cfg.patience and best is not None and best[0] is not None and epoch - best[1] >= cfg.patience:
                    break  # early stop: no better dev accuracy for `patience` epochs
                torch.manual_seed(_epoch_seed(cfg.seed, epoch))  # dropout masks
                batches = bucketed_batches(lengths, cfg.batch_size, np.random.default_rng([cfg.seed, epoch]))
                t0 = time.perf_counter()
                bar = tqdm(batches, desc=f"fine-tune epoch {epoch + 1}/{cfg.epochs}", disable=not progress)
                losses = []
                for idx in bar:
                    scale = lr_factor(step, total_steps)
                    losses.append(_train_step(backbone, head, opt, [texts[i] for i in idx], y[idx], scale, cfg))
                    step += 1
                    bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
                dev_acc = _accuracy(backbone, head, dev_texts, dev_y, cfg) if dev_texts else None
                epoch += 1
                history.append({"epoch": epoch, "loss": float(np.mean(losses)), "dev_accuracy": dev_acc,
                                "seconds": round(time.perf_counter() - t0, 2)})
                bar.set_postfix(loss=f"{history[-1]['loss']:.3f}", dev_acc=dev_acc)
                bar.close()
                if dev_acc is None or best is None or dev_acc > best[0]:  # no dev split: the last epoch
                    best = (dev_acc, epoch, {n: p.detach().clone() for n, p in named})
                _save_checkpoint(ckpt, named, opt, best, settings,
                                 {"epoch": epoch, "step": step, "history": history})
                if epoch == stop_after_epochs and epoch < cfg.epochs:
                    killed = True
                    break

            finished = not killed
            info = {"config": asdict(cfg), "history": history, "chosen_epoch": best[1] if best else None,
                    "best_dev_accuracy": best[0] if best else None, "resumed_from_epoch": resumed_from,
                    "seconds": round(sum(h["seconds"] for h in history), 2),
                    "seconds_this_run": round(time.perf_counter() - started, 2),
                    "n_train": len(texts), "n_dev": len(dev_texts), "pooling": backbone.pooling,
                    "class_names": list(class_names), "trainable_parameters": sum(p.numel() for p in params),
                    "torch_threads": torch.get_num_threads(), "finished": finished}
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

    if finished:
        write_safetensors(out_dir / MODEL_FILE, plain_state(backbone.model))
        write_safetensors(out_dir / HEAD_FILE, {"weight": head.weight, "bias": head.bias})
        write_json(out_dir / INFO_FILE, info)
        shutil.rmtree(out_dir / Path(CHECKPOINT).parent, ignore_errors=True)
    return head, info


def _save_checkpoint(path: Path, named, opt, best, settings: dict, progress: dict) -> None:
    """One safetensors file (atomic): the trained weights, the best epoch's, the optimizer state,
    and in its header the epoch, step, history and the settings the run started with."""
    tensors = {n: p for n, p in named}
    tensors.update({f"best.{n}": t for n, t in best[2].items()})
    tensors.update(_optimizer_tensors(opt))
    meta = {**progress, "best_epoch": best[1], "best_dev_accuracy": best[0], "settings": settings}
    write_safetensors(path, tensors, metadata={"finetune": json.dumps(meta)})


def _load_checkpoint(path: Path, named, opt, settings: dict):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = json.loads((f.metadata() or {}).get("finetune", "{}"))
    theirs = meta.get("settings", {})
    diff = sorted(k for k in settings if settings[k] != theirs.get(k))
    if diff:
        raise RunError(f"The checkpoint in {path.parent} was made with other {', '.join(diff)}; "
                       f"delete it or fine-tune with the same settings.")
    tensors = read_safetensors(path)
    with torch.no_grad():
        for n, p in named:
            p.copy_(tensors[n])
    _load_optimizer(opt, tensors)
    best = (meta["best_dev_accuracy"], meta["best_epoch"], {n: tensors[f"best.{n}"] for n, _ in named})
    return meta, best


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
