"""Memory and throughput of Llama-sized models through the ordinary `vqlc train --model DIR`
path, on this machine, with no model hub (issue: the models the paper studies).

Each model is built from its published configuration (Llama-3.2-1B, Llama-2-7B) with RANDOM
weights, so this measures memory and speed, not concepts: nothing a random model's concepts
say means anything. The weights are drawn tensor by tensor from the architecture's names and
shapes (read off a model on the meta device: the full model is never instantiated here) and
written in bfloat16 as safetensors shards into cache/bench_models/<name>/, with SmolLM2's
tokenizer beside them. Each is then run in a fresh process as a user would:

    vqlc train --model DIR --finetune none --weights bfloat16 --dtype bfloat16 --methods vqlc ...

(stages texts, finetune (none), extract, fitset, vqlc), and that process's peak resident memory
is read from the kernel (wait4's ru_maxrss) and set against the weights' bytes.

Usage: python bench/big_model.py [--models 1b 7b] [--texts 64] [--max-length 32] [--keep]
Writes bench/results/big_model.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from results_io import write_result  # noqa: E402  (bench/ is on sys.path when a bench runs)

ROOT = Path(__file__).resolve().parents[1]
GB = 1024**3

# The published configurations (their config.json on the hub), the fields a LlamaConfig needs.
CONFIGS = {
    "1b": {"name": "Llama-3.2-1B", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
           "tie_word_embeddings": True, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
           "max_position_embeddings": 131072},
    "3b": {"name": "Llama-3.2-3B", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
           "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
           "tie_word_embeddings": True, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
           "max_position_embeddings": 131072},
    "135m": {"name": "SmolLM2-135M", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
             "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
             "tie_word_embeddings": True, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
             "max_position_embeddings": 8192},
    "7b": {"name": "Llama-2-7B", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "vocab_size": 32000,
           "tie_word_embeddings": False, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
           "max_position_embeddings": 4096},
}
SHARD_BYTES = 2 * GB


def tokenizer_dir() -> Path:
    """Where the tokenizer of the random models comes from: SmolLM2's (a converted model's
    folder), or cache/bench_tokenizer/ where the SmolLM2 weights are not here (a device machine:
    copy its tokenizer files there and carry that folder)."""
    spare = ROOT / "cache" / "bench_tokenizer"
    if (spare / "tokenizer.json").exists():
        return spare
    from vqlc_core.data.models import resolve_model

    return Path(resolve_model("smollm2-135m", cache_dir=ROOT / "cache").path)


def architecture(spec: dict, stand_in: bool = True):
    """(LlamaConfig, [(name, shape)]) of the model, from a copy on the meta device (no memory);
    `stand_in`: with as many token embeddings as the stand-in tokenizer needs."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    smol = json.loads((tokenizer_dir() / "config.json").read_text()) if (tokenizer_dir() / "config.json").exists() else {}
    from transformers import AutoTokenizer

    # SmolLM2's tokenizer stands in for the model's own: the embedding needs a row for each of its ids
    vocab = max(spec["vocab_size"], len(AutoTokenizer.from_pretrained(tokenizer_dir())) if stand_in else 0)
    cfg = LlamaConfig(**{k: v for k, v in spec.items() if k not in ("name", "vocab_size")}, vocab_size=vocab,
                      bos_token_id=smol.get("bos_token_id"),
                      eos_token_id=smol.get("eos_token_id"), architectures=["LlamaForCausalLM"])
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    shapes = [(n, tuple(p.shape)) for n, p in model.state_dict().items()]
    if cfg.tie_word_embeddings:
        shapes = [(n, s) for n, s in shapes if n != "lm_head.weight"]
    return cfg, shapes


def write_model(key: str, out: Path, seed: int = 0) -> dict:
    """A local model directory of `key`'s architecture with random bfloat16 weights (N(0, 0.02)
    matrices, unit norms), written shard by shard; its weights' size and count."""
    import torch
    from safetensors.torch import save_file

    cfg, shapes = architecture(CONFIGS[key])
    n_weights = sum(int(torch.Size(s).numel()) for _, s in shapes)
    done = out / "done.json"
    if done.exists() and json.loads(done.read_text()).get("n_weights") == n_weights:
        return json.loads(done.read_text())
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    gen = torch.Generator().manual_seed(seed)
    shard, size, index, names = {}, 0, {}, []
    t0 = time.perf_counter()

    def flush() -> None:
        nonlocal shard, size
        if shard:
            fname = f"model-{len(names) + 1:05d}.safetensors"
            save_file(shard, str(out / fname), metadata={"format": "pt"})
            index.update({n: fname for n in shard})
            names.append(fname)
            shard, size = {}, 0

    for name, shape in shapes:
        if name.endswith("norm.weight"):
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = torch.empty(shape, dtype=torch.bfloat16)
            for i in range(0, shape[0], 4096):  # drawn in float32 a slab at a time, stored in bf16
                t[i:i + 4096] = torch.randn((min(4096, shape[0] - i), *shape[1:]), generator=gen) * 0.02
        shard[name] = t
        size += t.numel() * 2
        if size >= SHARD_BYTES:
            flush()
        print(f"\r{key}: {len(index) + len(shard)}/{len(shapes)} tensors", end="", file=sys.stderr, flush=True)
    flush()
    # the shards' names: final ones once there is more than one
    total = len(names)
    final = {f: f"model-{i + 1:05d}-of-{total:05d}.safetensors" for i, f in enumerate(names)}
    for f, g in final.items():
        (out / f).rename(out / g)
    weight_map = {n: final[f] for n, f in index.items()}
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": n_weights * 2}, "weight_map": weight_map}, indent=1))
    config = cfg.to_dict()
    config["dtype"] = config["torch_dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(config, indent=1))
    smol = tokenizer_dir()
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (smol / f).exists():
            shutil.copy(smol / f, out / f)
    info = {"architecture": CONFIGS[key]["name"], "vocab_size": cfg.vocab_size, "n_weights": n_weights, "weights_bytes": n_weights * 2,
            "shards": total, "write_s": round(time.perf_counter() - t0, 1)}
    print(file=sys.stderr)
    done.write_text(json.dumps(info))
    return info


def gpu_estimates(key: str, batch_size: int = 8, max_length: int = 128, lora_rank: int = 8) -> dict:
    """GPU memory for `key`, ESTIMATED (nothing runs): extraction, the bf16 weights plus vqlc's 1 GB
    to run; LoRA fine-tuning, `tuning.memory_estimate` (what a build prints before it trains)
    over a copy of the model on the meta device, rank `lora_rank` on every block's linear layers."""
    from types import SimpleNamespace

    import torch
    from torch import nn
    from transformers import LlamaForCausalLM

    from vqlc_core.data.models import RUN_OVERHEAD
    from vqlc_core.data.tuning import memory_estimate

    cfg, _ = architecture(CONFIGS[key], stand_in=False)  # the published vocabulary
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    lora = sum(lora_rank * (m.in_features + m.out_features) for block in model.model.layers
               for m in block.modules() if isinstance(m, nn.Linear))
    shim = SimpleNamespace(model=model, max_length=max_length, hidden_size=cfg.hidden_size,
                           n_layers=cfg.num_hidden_layers)
    mem = memory_estimate(shim, lora, batch_size)
    weights = mem["weights"]
    return {"estimated": True, "weights_gb": round(weights / GB, 2),
            "extract_gb": round((weights + RUN_OVERHEAD) / GB, 1),
            "lora_finetune_gb": round(mem["total"] / GB, 1),
            "lora_finetune_setting": f"rank {lora_rank}, batch {batch_size} x {max_length} tokens, bf16 weights"}


def token_count(model_dir: Path, texts: list[str], max_length: int) -> int:
    """Tokens one forward over `texts` processes (truncated to max_length, a BOS each)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    return sum(min(len(tok(t, add_special_tokens=False)["input_ids"]) + 1, max_length) for t in texts)


def run_vqlc(key: str, model_dir: Path, args, cache: Path) -> dict:
    """`vqlc train` on the model in a fresh process: its exit code, last words, peak RSS and
    stage times."""
    layers = CONFIGS[key]["num_hidden_layers"]
    cmd = [sys.executable, "-m", "vqlc_core", "train", "--preset", "decoder", "--model", str(model_dir),
           "--run", f"big-{key}", "--cache-dir", str(cache), "--device", args.device,
           "--finetune", "none", "--weights", "bfloat16", "--dtype", "bfloat16", "--methods", "vqlc",
           "--limit", str(args.texts), "--max-length", str(args.max_length), "--layer", str(layers - 4),
           "--n-concepts", "10", "--prediction-concepts", "4", "--seeds", "0", "--batch-size", "8", "-v"]
    shutil.rmtree(cache / "runs" / f"big-{key}", ignore_errors=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip())
        if "] done in" in line or "needs about" in line:
            print(f"  {line.rstrip()[:160]}", file=sys.stderr)
    _, status, usage = os.wait4(proc.pid, 0)
    out = {"command": " ".join(cmd[1:]).replace(str(ROOT) + "/", ""), "exit_code": os.waitstatus_to_exitcode(status),
           "wall_s": round(time.perf_counter() - t0, 1), "peak_rss_bytes": usage.ru_maxrss * 1024,
           "last_lines": [ln[:300] for ln in lines if ln.strip() and "it/s]" not in ln and "text/s]" not in ln][-3:]}
    (cache / f"big-{key}.log").write_text("\n".join(lines) + "\n")
    manifest = cache / "runs" / f"big-{key}" / "manifest.json"
    if out["exit_code"] == 0 and manifest.exists():
        stages = json.loads(manifest.read_text())["stages"]
        out["stages_s"] = {s: v.get("wall_s") for s, v in stages.items()}
        ex = stages["extract"]
        out.update(extract_s=ex.get("extract_s"), weights=ex.get("weights"),
                   n_rows=ex.get("n_rows"), dim=ex.get("dim"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", choices=sorted(CONFIGS), default=["1b", "7b"],
                    help="which published configurations to build and run (default: 1b 7b)")
    ap.add_argument("--texts", type=int, default=64, help="MR sentences to run through the model (default: 64)")
    ap.add_argument("--max-length", type=int, default=32, help="tokens per sentence at most (default: 32)")
    ap.add_argument("--device", default="cpu", help="--device of the vqlc runs (default: cpu)")
    ap.add_argument("--keep", action="store_true", help="keep the random models in cache/bench_models (else deleted)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "big_model.json"))
    ap.add_argument("--write", choices=sorted(CONFIGS), help=argparse.SUPPRESS)  # the writing process
    ap.add_argument("--estimate", action="store_true",
                    help="only print the estimated GPU memory of each published configuration (nothing runs)")
    args = ap.parse_args()
    if args.estimate:
        print(json.dumps({k: gpu_estimates(k) for k in CONFIGS}, indent=1))
        return
    if args.write:
        write_model(args.write, ROOT / "cache" / "bench_models" / args.write)
        return
    from vqlc_core.base.hardware import free_bytes, native_bf16
    from vqlc_core.data.datasets import load_dataset

    ds = load_dataset("mr", cache_dir=ROOT / "cache", limit=args.texts, seed=0)
    results = {"what": "memory and throughput of random-weight models of published architectures through "
                       "`vqlc train`; random weights: no concept here means anything",
               "machine": {"cpus": os.cpu_count(), "available_ram_gb": round(free_bytes("cpu") / GB, 1),
                           "native_bf16": native_bf16(), "torch_threads": int(os.environ.get("OMP_NUM_THREADS", 0)) or None},
               "texts": args.texts, "max_length": args.max_length, "models": {},
               "gpu_estimates": {k: gpu_estimates(k) for k in CONFIGS}}
    cache = ROOT / "cache" / "bench_big_model"
    for key in args.models:
        model_dir = ROOT / "cache" / "bench_models" / key
        print(f"{key}: writing {CONFIGS[key]['name']}-shaped random weights into {model_dir}", file=sys.stderr)
        # written by another process: a child forked from a parent that held the weights would
        # count the parent's memory in its own peak
        subprocess.run([sys.executable, __file__, "--write", key], check=True)
        info = json.loads((model_dir / "done.json").read_text())
        tokens = token_count(model_dir, ds.texts, args.max_length)
        print(f"{key}: {info['n_weights'] / 1e9:.2f}B weights, {info['weights_bytes'] / GB:.2f} GB in bf16; running vqlc",
              file=sys.stderr)
        r = run_vqlc(key, model_dir, args, cache)
        r.update(info, tokens=tokens)
        if r["exit_code"] == 0:
            r["peak_rss_over_weights"] = round(r["peak_rss_bytes"] / info["weights_bytes"], 3)
            r["limit_bytes"] = int(1.5 * info["weights_bytes"] + GB)
            r["within_limit"] = r["peak_rss_bytes"] <= r["limit_bytes"]
            # the store's forward over the texts (a second, final-layer pass is part of it)
            r["extract_tokens_per_s"] = round(tokens / r["extract_s"], 1) if r.get("extract_s") else None
        results["models"][key] = r
        print(f"{key}: exit {r['exit_code']}, peak RSS {r['peak_rss_bytes'] / GB:.2f} GB, "
              f"{r.get('extract_tokens_per_s')} tokens/s", file=sys.stderr)
        if not args.keep:
            shutil.rmtree(model_dir, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_result(Path(args.out), results)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
