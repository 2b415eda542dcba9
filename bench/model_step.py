"""Benchmark: one BertForPreTraining training step (forward + backward + AdamW).

    python bench/model_step.py [--sizes tiny,base] [--batch 8] [--seq 128] [--steps 5]

For each size it runs, each in its own subprocess so that peak memory is the
framework's own: our jitted NNX step (bf16 off, fp32), and transformers'
PyTorch BertForPreTraining with torch.optim.AdamW on the same shapes. It also
times a large fp32 matmul on the same machine as the practical FLOP/s ceiling,
and reports the model step's achieved FLOP/s as a fraction of it.

Model FLOPs are counted analytically (bert_jax.flops: 3x the forward matmuls),
the convention of MFU figures.

The last line printed is one JSON object with the headline figures of the
largest size run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NUM_PREDICTIONS = 20  # masked positions per sequence, as pretraining at seq 128


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def synthetic_batch(np, config, batch: int, seq: int):
    rng = np.random.default_rng(0)
    positions = np.sort(rng.choice(np.arange(1, seq), size=(batch, NUM_PREDICTIONS)), axis=1)
    return {
        "input_ids": rng.integers(5, config.vocab_size, (batch, seq)).astype(np.int32),
        "segment_ids": (np.arange(seq)[None, :] >= seq // 2).repeat(batch, 0).astype(np.int32),
        "input_mask": np.ones((batch, seq), np.int32),
        "masked_lm_positions": positions.astype(np.int32),
        "masked_lm_ids": rng.integers(5, config.vocab_size, (batch, NUM_PREDICTIONS)).astype(
            np.int32),
        "masked_lm_weights": np.ones((batch, NUM_PREDICTIONS), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32),
    }


def run_jax(size: str, batch: int, seq: int, steps: int) -> dict:
    import jax
    import numpy as np
    import optax
    from flax import nnx

    from bert_jax.model.config import preset
    from bert_jax.model.task_models import BertForPreTraining
    from bert_jax.pretraining.step import make_train_step
    from bert_jax.training.state import init_train_state

    config = preset(size)
    model = BertForPreTraining(config, rngs=nnx.Rngs(0))
    optimizer = optax.adamw(1e-4, weight_decay=0.01)
    state = init_train_state(nnx.to_pure_dict(nnx.state(model, nnx.Param)), optimizer, seed=0)
    graphdef = nnx.graphdef(model)
    del model
    step = jax.jit(make_train_step(graphdef, optimizer, lambda s: 1e-4), donate_argnums=0)
    data = jax.device_put(synthetic_batch(np, config, batch, seq))
    state, metrics = step(state, data)  # compile
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state, data)
    jax.block_until_ready((state, metrics))
    seconds = (time.perf_counter() - start) / steps
    return {"seconds_per_step": seconds, "sequences_per_s": batch / seconds,
            "peak_rss_mb": peak_rss_mb(), "loss": float(metrics["loss"]),
            "device": str(jax.devices()[0].platform)}


def run_torch(size: str, batch: int, seq: int, steps: int) -> dict:
    import numpy as np
    import torch
    import transformers

    from bert_jax.model.config import preset

    config = preset(size)
    hf = transformers.BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size, hidden_act="gelu")
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(hf).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    data = synthetic_batch(np, config, batch, seq)
    labels = np.full((batch, seq), -100, np.int64)
    np.put_along_axis(labels, data["masked_lm_positions"].astype(np.int64),
                      data["masked_lm_ids"].astype(np.int64), axis=1)
    inputs = dict(input_ids=torch.tensor(data["input_ids"], dtype=torch.long),
                  token_type_ids=torch.tensor(data["segment_ids"], dtype=torch.long),
                  attention_mask=torch.tensor(data["input_mask"], dtype=torch.long),
                  labels=torch.tensor(labels),
                  next_sentence_label=torch.tensor(data["next_sentence_labels"][:, 0],
                                                   dtype=torch.long))

    def one_step():
        optimizer.zero_grad(set_to_none=True)
        loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    one_step()  # warm up allocators
    start = time.perf_counter()
    for _ in range(steps):
        loss = one_step()
    seconds = (time.perf_counter() - start) / steps
    return {"seconds_per_step": seconds, "sequences_per_s": batch / seconds,
            "peak_rss_mb": peak_rss_mb(), "loss": float(loss), "threads": torch.get_num_threads()}


def child(args) -> None:
    run = {"jax": run_jax, "torch": run_torch}[args.child]
    print(json.dumps(run(args.size, args.batch, args.seq, args.steps)))


def spawn(kind: str, size: str, args) -> dict | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--size", size,
           "--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"[{kind} {size}] failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="tiny,base")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--no_torch", action="store_true", help="skip the PyTorch reference")
    parser.add_argument("--child", choices=("jax", "torch"), help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    from bert_jax.model.config import preset
    from bert_jax.training.flops import measure_matmul_flops_per_s, train_flops_per_sequence

    matmul_flops = measure_matmul_flops_per_s()
    print(f"fp32 matmul 2048^3: {matmul_flops / 1e9:.1f} GFLOP/s")
    results = {}
    for size in args.sizes.split(","):
        flops = train_flops_per_sequence(preset(size), args.seq, NUM_PREDICTIONS)
        ours = spawn("jax", size, args)
        torch_result = None if args.no_torch else spawn("torch", size, args)
        row = {"size": size, "batch": args.batch, "seq": args.seq}
        if ours:
            achieved = flops * ours["sequences_per_s"]
            row.update(sequences_per_s=ours["sequences_per_s"], peak_rss_mb=ours["peak_rss_mb"],
                       achieved_flops_per_s=achieved,
                       mfu_vs_matmul=achieved / matmul_flops, device=ours["device"])
        if torch_result:
            row.update(pytorch_sequences_per_s=torch_result["sequences_per_s"],
                       pytorch_peak_rss_mb=torch_result["peak_rss_mb"])
        if ours and torch_result:
            row["vs_pytorch"] = ours["sequences_per_s"] / torch_result["sequences_per_s"]
        results[size] = row
        print(json.dumps(row))
    headline = results[args.sizes.split(",")[-1]]
    print(json.dumps({
        "size": headline["size"],
        "sequences_per_s": headline.get("sequences_per_s"),
        "pytorch_sequences_per_s": headline.get("pytorch_sequences_per_s"),
        "vs_pytorch": headline.get("vs_pytorch"),
        "matmul_flops_per_s": matmul_flops,
        "mfu_vs_matmul": headline.get("mfu_vs_matmul"),
        "peak_rss_mb": headline.get("peak_rss_mb"),
        "pytorch_peak_rss_mb": headline.get("pytorch_peak_rss_mb"),
        "all": results,
    }))


if __name__ == "__main__":
    main()
