"""The settings of the data stages, fine-tuning and extraction (`FinetuneConfig`, its resolved
`FinetunePlan`, `ExtractConfig`) and the choices they offer, apart from the code that runs them:
the build's settings and the command line read them without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from vqlc_core.base.hardware import AUTO, resolve_dtype
from vqlc_core.base.options import at_least, one_of, opt
from vqlc_core.base.runio import RunError

POOLINGS = ("cls", "mean", "last")  # the prediction representation: first token, mean over the text, last token
AGGREGATIONS = ("last", "first", "mean")  # which sub-word's state a word gets
DTYPES = ("float32", "bfloat16")  # the precision of a forward: float32, or bfloat16 autocast
WEIGHT_DTYPES = ("auto", "float32", "bfloat16", "float16")  # the precision the weights are loaded in
FINETUNE_MODES = ("full", "lora", "none")
# MR, 2 epochs: full at 3e-5 reaches 0.80 test accuracy with MiniLM; LoRA at 1e-3 learns in
# tens of steps on SmolLM2, where 1e-4 on the top blocks barely moves it.
DEFAULT_LR = {"full": 3e-5, "lora": 1e-3}
HEAD_LR = 1e-3  # for a head started at random (probe_init off): at 3e-5 it barely moves in a short run


@dataclass
class FinetuneConfig:
    """Stage `finetune`: the model is first trained for its task (backbone and a linear head on
    the train split, the epoch chosen by dev accuracy), as the paper's models are."""

    finetune: str | None = opt(None, "train the model for its task before explaining it: full (every weight), lora "
                                     "(low-rank adapters, merged after) or none (explain the frozen model through a "
                                     "linear head) (default: full for encoders, lora for decoders, none for a "
                                     "sequence-classification model, which is used as it is)", choices=FINETUNE_MODES)
    finetune_epochs: int = opt(2, "fine-tuning passes over the train split")
    finetune_batch_size: int = opt(32, "texts per fine-tuning step")
    finetune_parts: int = opt(1, "cut each fine-tuning batch into N parts run one after another, their gradients "
                                 "summed (gradient accumulation: one part's activations in memory at a time; the "
                                 "same steps up to float rounding); under torchrun the parts are shared out among "
                                 "the ranks, at least one each, so N ranks train what one process with N parts "
                                 "trains")
    finetune_lr: float | None = opt(None, "peak AdamW learning rate (default: 3e-5 for full, 1e-3 for lora)")
    finetune_lora_rank: int = opt(8, "rank of the LoRA adapters")
    finetune_train_blocks: int = opt(0, "train only the top N transformer blocks (0: all of them)")
    # bf16 autocast reached the same test accuracy as fp32 on MiniLM/MR (0.8025); it is the faster
    # precision only on AMX: 1.4x fp32's step time with AVX-512 BF16 alone, 3x where emulated (`base.hardware`).
    finetune_dtype: str = opt(AUTO, "fine-tuning precision: float32, bfloat16 (CPU autocast) or auto (bfloat16 on a "
                                    "CPU with AMX, where it trains fastest; float32 elsewhere, where bf16 steps took "
                                    "1.4x (AVX-512 BF16) to 3x (emulated) as long)", choices=(AUTO, *DTYPES))
    finetune_probe_init: str | None = opt(None, "start the head from a logistic-regression probe of the frozen model "
                                                "(LP-FT) (default: on for lora, off for full)", choices=("on", "off"))
    finetune_patience: int = opt(1, "stop after this many epochs without a better dev accuracy (0: never early)")
    finetune_max_steps: int | None = opt(None, "stop after this many optimizer steps in all, the learning-rate "
                                               "schedule fitted to them (default: every step of every epoch); the "
                                               "stage prints its time estimate after its first steps, to choose by")

    def __post_init__(self):
        one_of(self, "finetune", FINETUNE_MODES)
        one_of(self, "finetune_dtype", (AUTO, *DTYPES))
        one_of(self, "finetune_probe_init", ("on", "off"))
        for name in ("finetune_epochs", "finetune_batch_size", "finetune_lora_rank", "finetune_parts"):
            at_least(self, name, 1)
        for name in ("finetune_train_blocks", "finetune_patience"):
            at_least(self, name, 0)
        at_least(self, "finetune_max_steps", 1)
        if self.finetune_lr is not None and not 0 < self.finetune_lr < 1:
            raise RunError(f"--finetune-lr must lie between 0 and 1, got {self.finetune_lr}.")

    def mode_for(self, kind: str, is_classifier: bool) -> str:
        """The fine-tuning mode for a model of `kind` ("encoder" or "decoder")."""
        if is_classifier:
            return "none"  # a user's own task model is explained as it is
        return self.finetune or ("lora" if kind == "decoder" else "full")

    def plan(self, mode: str, seed: int) -> FinetunePlan:
        """What a run in `mode` with `seed` does, every default resolved."""
        return FinetunePlan(mode=mode, epochs=self.finetune_epochs, batch_size=self.finetune_batch_size,
                            lr=self.finetune_lr, lora_rank=self.finetune_lora_rank,
                            train_blocks=self.finetune_train_blocks, dtype=resolve_dtype(self.finetune_dtype),
                            probe_init=(self.finetune_probe_init or ("on" if mode == "lora" else "off")) == "on",
                            patience=self.finetune_patience, seed=seed, max_steps=self.finetune_max_steps,
                            parts=self.finetune_parts)


@dataclass(frozen=True)
class FinetunePlan:
    """What one fine-tuning run does: a `FinetuneConfig` with its defaults resolved for the model
    and the run's seed. `finetune.json` records it as its "config"."""

    mode: str  # "full" or "lora"
    epochs: int
    batch_size: int
    lr: float | None  # None: DEFAULT_LR of the mode
    lora_rank: int
    train_blocks: int  # 0: every block
    dtype: str  # "float32" or "bfloat16" (CPU autocast)
    probe_init: bool
    patience: int  # 0: never stop early
    seed: int
    max_steps: int | None = None  # at most this many optimizer steps in all (None: every epoch's)
    parts: int = 1  # each batch in this many parts, their gradients summed (at least one a rank)

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR.get(self.mode, 0.0)

    @property
    def head_learning_rate(self) -> float:
        """A head started from a probe moves at the model's rate; one started at random at least at HEAD_LR."""
        return self.learning_rate if self.probe_init else max(HEAD_LR, self.learning_rate)

    @property
    def autocast_dtype(self):
        import torch  # the settings themselves import no torch

        return torch.bfloat16 if self.dtype == "bfloat16" else None


@dataclass
class ExtractConfig:
    """Stage `extract`: the model, the layer, and how token states become word and prediction rows.
    The explainer and the faithfulness evaluation read the same settings."""

    model: str = opt("minilm", "model: minilm, smollm2-135m, a Hugging Face name, a local directory or a .gguf file")
    layer: int | None = opt(None, "layer l whose token states are used (default: the second-to-last)")
    pooling: str | None = opt(None, "prediction representation (default: mean for MiniLM, last token for decoders)",
                              choices=POOLINGS)
    aggregation: str = opt("last", "which sub-word's state a word gets", choices=AGGREGATIONS)
    max_length: int = opt(128, "tokens per text; longer texts are truncated")
    dtype: str = opt("float32", "bfloat16 autocast is faster on CPUs with BF16", choices=DTYPES)
    weights: str = opt(AUTO, "the precision the model's weights are loaded in, directly from its files (never "
                             "through a float32 copy): auto = float32 for full fine-tuning; otherwise on a GPU the "
                             "model's own half precision (else --dtype's), on a CPU float32 unless float32 weights "
                             "would not fit in its memory; the choice is recorded in the manifest",
                       choices=WEIGHT_DTYPES)
    batch_size: int = opt(32, "texts per forward pass")
    chunk_texts: int = opt(512, "texts per extraction chunk, the unit of resumption and of sharing out under "
                                "torchrun: rank r takes chunks r, r+N, ...")
    shard_rows: int = opt(65536, "rows per float16 shard of the store", cli=False)

    def __post_init__(self):
        one_of(self, "pooling", POOLINGS)
        one_of(self, "aggregation", AGGREGATIONS)
        one_of(self, "dtype", DTYPES)
        one_of(self, "weights", WEIGHT_DTYPES)
        at_least(self, "layer", 1)
        at_least(self, "max_length", 4)
        for name in ("batch_size", "chunk_texts", "shard_rows"):
            at_least(self, name, 1)

    @property
    def autocast_dtype(self):
        """torch.bfloat16 for bf16 autocast, else None."""
        import torch  # the settings themselves import no torch

        return torch.bfloat16 if self.dtype == "bfloat16" else None
