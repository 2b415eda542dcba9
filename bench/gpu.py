"""Benchmark: the BERT pretraining train step on a GPU (forward + backward + optimizer).

    python bench/gpu.py [--sizes base,large] [--seqs 128,512] [--dtypes bfloat16]
                        [--fp32_rows base:128,large:128] [--batch 256 | --batch large:128=256,...]
                        [--steps 10] [--torch] [--time_budget_s 540]
    python bench/gpu.py --rows jax:large:128:bf16:attn_dropout=0,torch:base:512:bf16

What is timed: `bert_jax.pretraining.step.make_train_step` around
BertForPreTraining (google-research/bert's MLM + NSP objective, dropout on,
bert_adam with global-norm clipping), jitted with the state donated, on one
synthetic batch already on the device. Compilation and one warm-up step are
excluded; each timed step is blocked on (block_until_ready) and the median is
reported. Each configuration runs in its own process, so that an out-of-memory
failure stays in its row and peak GPU memory (jax's memory_stats) is its own.

The model as it stands is measured: no sequence packing (every row is a full
batch of full-length sequences), and attention is what the model does in
training, an einsum softmax with dropout on the probabilities (the
jax.nn.dot_product_attention path, default XLA implementation, serves only
attention dropout 0; the row tagged `attn_dropout=0` measures it).

`--torch` also times transformers' PyTorch BertForPreTraining (bf16 autocast,
fused AdamW, clipping; its default attention) at the bf16 shapes, when torch
and transformers can be imported.

Model FLOPs are analytic (bert_jax.training.flops.train_flops_per_sequence,
3x the forward matmuls, MLM head at the masked positions only), the
convention of MFU figures; MFU is over the device's dense bf16 peak
(bert_jax.training.flops.peak_flops_per_device), also for fp32 rows.

The last line printed is one JSON object with the headline figures.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Masked positions per sequence, as google-research/bert's pretraining data.
NUM_PREDICTIONS = {128: 20, 512: 80}
DEFAULT_BATCH = {("tiny", 128): 8, ("base", 128): 256, ("large", 128): 256,
                 ("base", 512): 64, ("large", 512): 32}
FP32_BATCH = {("large", 128): 128}
SHORT_DTYPE = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}


def num_predictions(seq: int) -> int:
    return NUM_PREDICTIONS.get(seq, max(1, round(0.15 * seq)))


def synthetic_batch(vocab_size: int, batch: int, seq: int, seed: int = 0) -> dict:
    """A full-length batch in google-research/bert's feature names (numpy)."""
    import numpy as np

    p = num_predictions(seq)
    rng = np.random.default_rng(seed)
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq), size=p, replace=False)
                                  for _ in range(batch)]), axis=1)
    return {
        "input_ids": rng.integers(5, vocab_size, (batch, seq)).astype(np.int32),
        "input_mask": np.ones((batch, seq), np.int32),
        "segment_ids": (np.arange(seq)[None, :] >= seq // 2).repeat(batch, 0).astype(np.int32),
        "masked_lm_positions": positions.astype(np.int32),
        "masked_lm_ids": rng.integers(5, vocab_size, (batch, p)).astype(np.int32),
        "masked_lm_weights": np.ones((batch, p), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (batch,)).astype(np.int32),
    }


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


# --------------------------------------------------------------------------- children


def run_jax(row: dict, steps: int) -> dict:
    import jax
    import numpy as np
    from flax import nnx

    from bert_jax.model import BertForPreTraining, preset
    from bert_jax.pretraining.step import make_train_step
    from bert_jax.training.optimizers import optimizer_and_schedule
    from bert_jax.training.state import init_train_state, pure_params

    cfg = preset(row["size"]).replace(dtype=row["dtype"], hidden_act="gelu_tanh")
    if row.get("attn_dropout") is not None:
        cfg = cfg.replace(attention_probs_dropout_prob=row["attn_dropout"])
    optimizer, schedule = optimizer_and_schedule("bert_adam", learning_rate=1e-4, num_steps=1000,
                                                 warmup_steps=100)

    def make_model():
        return BertForPreTraining(cfg, rngs=nnx.Rngs(0))

    graphdef = nnx.graphdef(nnx.eval_shape(make_model))
    t0 = time.perf_counter()
    state = jax.jit(lambda: init_train_state(pure_params(make_model()), optimizer, 0))()
    jax.block_until_ready(state)
    init_s = time.perf_counter() - t0
    data = jax.device_put(synthetic_batch(cfg.vocab_size, row["batch"], row["seq"]))

    step = jax.jit(make_train_step(graphdef, optimizer, schedule), donate_argnums=0)
    t0 = time.perf_counter()
    compiled = step.lower(state, data).compile()
    compile_s = time.perf_counter() - t0

    state, metrics = compiled(state, data)  # warm-up
    jax.block_until_ready((state, metrics))
    first_loss = float(metrics["loss"])
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        state, metrics = compiled(state, data)
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - t0)
    device = jax.devices()[0]
    stats = {}
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - not every backend reports
        pass
    peak = stats.get("peak_bytes_in_use")
    return {"step_s": median(times), "min_step_s": min(times), "max_step_s": max(times),
            "compile_s": compile_s, "init_s": init_s,
            "peak_mem_gib": None if peak is None else peak / 2 ** 30,
            "mem_limit_gib": (stats["bytes_limit"] / 2 ** 30) if "bytes_limit" in stats else None,
            "loss_first": first_loss, "loss_last": float(metrics["loss"]),
            "finite": bool(np.asarray(metrics["finite"])),
            "device_kind": device.device_kind, "platform": device.platform,
            "jax_version": jax.__version__}


def run_torch(row: dict, steps: int) -> dict:
    import numpy as np
    import torch
    import transformers

    from bert_jax.model import preset

    cfg = preset(row["size"])
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    hf = transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size, hidden_act="gelu_new",
        max_position_embeddings=cfg.max_position_embeddings)
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(hf).to(dev).train()
    attn_impl = getattr(model.config, "_attn_implementation", None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                                  **({"fused": True} if cuda else {}))
    batch, seq = row["batch"], row["seq"]
    data = synthetic_batch(cfg.vocab_size, batch, seq)
    labels = np.full((batch, seq), -100, np.int64)
    np.put_along_axis(labels, data["masked_lm_positions"].astype(np.int64),
                      data["masked_lm_ids"].astype(np.int64), axis=1)
    inputs = dict(input_ids=torch.tensor(data["input_ids"], dtype=torch.long),
                  token_type_ids=torch.tensor(data["segment_ids"], dtype=torch.long),
                  attention_mask=torch.tensor(data["input_mask"], dtype=torch.long),
                  labels=torch.tensor(labels),
                  next_sentence_label=torch.tensor(data["next_sentence_labels"],
                                                   dtype=torch.long))
    inputs = {k: v.to(dev) for k, v in inputs.items()}

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def one_step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    t0 = time.perf_counter()
    for _ in range(2):  # warm-up: allocator, cuBLAS handles and heuristics
        loss = one_step()
    sync()
    warm_s = time.perf_counter() - t0
    first_loss = float(loss)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = one_step()
        sync()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if cuda else None
    return {"step_s": median(times), "min_step_s": min(times), "max_step_s": max(times),
            "compile_s": None, "warmup_s": warm_s,
            "peak_mem_gib": None if peak is None else peak / 2 ** 30,
            "loss_first": first_loss, "loss_last": float(loss),
            "finite": bool(np.isfinite(float(loss))),
            "device_kind": torch.cuda.get_device_name(0) if cuda else "cpu",
            "torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "attn_implementation": attn_impl}


def child_main(args) -> None:
    row = json.loads(args.child_row)
    result = (run_jax if row["framework"] == "jax" else run_torch)(row, args.steps)
    print(json.dumps(result))


# --------------------------------------------------------------------------- parent


def parse_batch(spec: str | None):
    """--batch 64 (every row) or --batch large:128=256,base:512:float32=32."""
    if not spec:
        return None, {}
    if "=" not in spec:
        return int(spec), {}
    table = {}
    for item in spec.split(","):
        key, value = item.split("=")
        table[tuple(key.split(":"))] = int(value)
    return None, table


def batch_for(size: str, seq: int, dtype: str, args) -> int:
    every, table = parse_batch(args.batch)
    if every is not None:
        return every
    for key in ((size, str(seq), dtype), (size, str(seq))):
        if key in table:
            return table[key]
    if dtype == "float32" and (size, seq) in FP32_BATCH:
        return FP32_BATCH[(size, seq)]
    return DEFAULT_BATCH.get((size, seq), 32)


def explicit_rows(spec: str) -> list[dict]:
    """--rows jax:large:128:bf16,torch:base:512:bf16,jax:large:128:bf16:attn_dropout=0"""
    long_dtype = {v: k for k, v in SHORT_DTYPE.items()}
    rows = []
    for item in filter(None, spec.split(",")):
        parts = item.split(":")
        row = {"framework": parts[0], "size": parts[1], "seq": int(parts[2]),
               "dtype": long_dtype.get(parts[3], parts[3])}
        for extra in parts[4:]:
            key, value = extra.split("=")
            if key != "attn_dropout":
                raise ValueError(f"--rows: unknown option {extra!r} in {item!r}")
            row["attn_dropout"] = float(value)
        rows.append(row)
    return rows


def plan_rows(args) -> list[dict]:
    """Rows in priority order: bf16 seq 128 (large first), then the rest."""
    if args.rows:
        ordered = explicit_rows(args.rows)
        for r in ordered:
            r["batch"] = batch_for(r["size"], r["seq"], r["dtype"], args)
        return ordered
    sizes = args.sizes.split(",")
    seqs = [int(s) for s in args.seqs.split(",")]
    dtypes = args.dtypes.split(",")
    jax_rows = []
    for seq in seqs:
        for size in sorted(sizes, key=lambda s: s != "large"):
            for dtype in dtypes:
                jax_rows.append({"framework": "jax", "size": size, "seq": seq, "dtype": dtype})
    extra = []
    for item in filter(None, args.fp32_rows.split(",")):
        size, seq = item.split(":")
        if size in sizes and int(seq) in seqs and "float32" not in dtypes:
            extra.append({"framework": "jax", "size": size, "seq": int(seq), "dtype": "float32"})
    for item in filter(None, args.attn_dropout0_rows.split(",")):
        size, seq = item.split(":")
        if size in sizes and int(seq) in seqs:
            extra.append({"framework": "jax", "size": size, "seq": int(seq), "dtype": "bfloat16",
                          "attn_dropout": 0.0})
    torch_rows = []
    if args.torch:
        torch_rows = [{"framework": "torch", "size": r["size"], "seq": r["seq"],
                       "dtype": "bfloat16"} for r in jax_rows if r["dtype"] == "bfloat16"]
    # seq-128 torch rows right after the JAX bf16 rows; the comparisons after.
    first = [r for r in jax_rows if r["seq"] == seqs[0]]
    rest = [r for r in jax_rows if r["seq"] != seqs[0]]
    ordered = (first + [r for r in torch_rows if r["seq"] == seqs[0]] + rest
               + [r for r in torch_rows if r["seq"] != seqs[0]] + extra)
    for r in ordered:
        r["batch"] = batch_for(r["size"], r["seq"], r["dtype"], args)
    return ordered


def row_name(row: dict) -> str:
    name = f"{row['framework']}:{row['size']}:{row['seq']}:{SHORT_DTYPE[row['dtype']]}"
    if row.get("attn_dropout") is not None:
        name += f":attn_dropout={row['attn_dropout']:g}"
    return name


def looks_like_oom(text: str) -> bool:
    return any(s in text for s in ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory",
                                   "OutOfMemoryError"))


def spawn(row: dict, args, timeout: float | None) -> tuple[dict | None, str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child_row", json.dumps(row),
           "--steps", str(args.steps)]
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", str(args.mem_fraction))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    if proc.returncode != 0:
        tail = proc.stderr[-3000:]
        print(f"[{row_name(row)} batch {row['batch']}] failed (rc {proc.returncode}):\n{tail}",
              file=sys.stderr, flush=True)
        return None, "OOM" if looks_like_oom(proc.stderr) else f"error rc {proc.returncode}"
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), ""
    except (ValueError, IndexError):
        return None, "no result"


HEADER = ("| framework | size | seq | batch | dtype | step ms (median) | seq/s | model TFLOP/s "
          "| MFU (bf16 peak) | compile s | peak GPU mem GiB | loss first/last | note |")
RULE = "|---|---|---|---|---|---|---|---|---|---|---|---|---|"


def fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table_line(r: dict) -> str:
    note = r.get("note", "")
    if r.get("attn_dropout") is not None:
        note = (note + "; " if note else "") + f"attention dropout {r['attn_dropout']:g}"
    if "step_s" not in r:
        return (f"| {r['framework']} | {r['size']} | {r['seq']} | {r['batch']} | "
                f"{SHORT_DTYPE[r['dtype']]} | failed: {r.get('error', '?')} | - | - | - | - | - | "
                f"- | {note} |")
    loss = f"{r['loss_first']:.3f}/{r['loss_last']:.3f}"
    return (f"| {r['framework']} | {r['size']} | {r['seq']} | {r['batch']} | "
            f"{SHORT_DTYPE[r['dtype']]}{' autocast' if r['framework'] == 'torch' else ''} | "
            f"{r['step_s'] * 1e3:.1f} | {r['seq_per_s']:.1f} | {r['tflops']:.1f} | "
            f"{fmt(r['mfu'], '.3f')} | {fmt(r.get('compile_s'), '.1f')} | "
            f"{fmt(r.get('peak_mem_gib'), '.1f')} | {loss} | {note} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="base,large")
    parser.add_argument("--seqs", default="128,512")
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--fp32_rows", default="large:128,base:128",
                        help="size:seq rows also run in float32 (TF32 matmuls on GPUs)")
    parser.add_argument("--attn_dropout0_rows", default="large:128",
                        help="size:seq rows also run in bf16 with attention dropout 0 "
                             "(the jax.nn.dot_product_attention path)")
    parser.add_argument("--batch", default=None,
                        help="one batch for every row, or size:seq[:dtype]=B,... overrides")
    parser.add_argument("--rows", default=None,
                        help="explicit rows instead of the grid, in order: "
                             "framework:size:seq:dtype[:attn_dropout=R],... "
                             "(e.g. jax:large:128:bf16,torch:base:512:bf16)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per row")
    parser.add_argument("--torch", action="store_true",
                        help="also time transformers' PyTorch BertForPreTraining (bf16 autocast)")
    parser.add_argument("--time_budget_s", type=float, default=0.0,
                        help="skip rows once this much wall time has passed (0: no limit)")
    parser.add_argument("--mem_fraction", type=float, default=0.9,
                        help="XLA_PYTHON_CLIENT_MEM_FRACTION for the JAX children, unless set")
    parser.add_argument("--no_oom_retry", action="store_true",
                        help="do not retry an out-of-memory row at half the batch")
    parser.add_argument("--child_row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_row:
        child_main(args)
        return

    from bert_jax.model import preset
    from bert_jax.training.flops import peak_flops_per_device, train_flops_per_sequence

    start = time.perf_counter()
    rows = plan_rows(args)
    print(f"{len(rows)} rows: " + ", ".join(f"{row_name(r)}x{r['batch']}" for r in rows),
          flush=True)
    results = []
    device_kind = jax_version = None
    for row in rows:
        elapsed = time.perf_counter() - start
        remaining = args.time_budget_s - elapsed if args.time_budget_s else None
        if remaining is not None and remaining < 30:
            row.update(error="skipped (time budget)")
            results.append(row)
            print(table_line(row), flush=True)
            continue
        if row["framework"] == "torch":
            try:
                import torch  # noqa: F401
                import transformers  # noqa: F401
            except ImportError as e:
                row.update(error=f"skipped ({e.name} not installed)")
                results.append(row)
                print(table_line(row), flush=True)
                continue
        result, error = spawn(row, args, remaining)
        if error == "OOM" and not args.no_oom_retry and row["batch"] > 1:
            row["note"] = f"batch {row['batch']} ran out of memory"
            row["batch"] //= 2
            remaining = args.time_budget_s - (time.perf_counter() - start) if args.time_budget_s \
                else None
            result, error = spawn(row, args, remaining)
        if result is None:
            row["error"] = error
        else:
            cfg = preset(row["size"])
            flops = train_flops_per_sequence(cfg, row["seq"], num_predictions(row["seq"]))
            seq_per_s = row["batch"] / result["step_s"]
            peak = peak_flops_per_device(result["device_kind"])
            row.update(result, seq_per_s=seq_per_s, tflops=flops * seq_per_s / 1e12,
                       mfu=None if peak is None else flops * seq_per_s / peak,
                       flops_per_seq=flops, peak_flops=peak)
            if row["framework"] == "jax":
                device_kind, jax_version = result["device_kind"], result["jax_version"]
            if not result["finite"]:
                row["note"] = (row.get("note", "") + "; " if row.get("note") else "") + \
                    "NON-FINITE loss"
        results.append(row)
        print(table_line(row), flush=True)

    print()
    print(f"device: {device_kind}; jax {jax_version}; {args.steps} timed steps per row "
          f"after compile + 1 warm-up; no sequence packing; JAX attention in training: einsum "
          f"softmax + dropout (no cuDNN fused attention); wall {time.perf_counter() - start:.0f} s")
    print(HEADER)
    print(RULE)
    for r in results:
        print(table_line(r))

    def pick(framework, size, seq, dtype="bfloat16"):
        for r in results:
            if (r["framework"], r["size"], r["seq"], r["dtype"]) == (framework, size, seq, dtype) \
                    and r.get("attn_dropout") is None and "step_s" in r:
                return r
        return None

    headline = {"device": device_kind, "jax_version": jax_version}
    for framework in ("jax", "torch"):
        for size in ("large", "base"):
            for seq in (128, 512):
                r = pick(framework, size, seq)
                if r is None:
                    continue
                key = ("" if framework == "jax" else "torch_") + f"{size}_seq{seq}_bf16"
                headline[key + "_batch"] = r["batch"]
                headline[key + "_seq_per_s"] = round(r["seq_per_s"], 1)
                if r["mfu"] is not None:
                    headline[key + "_mfu"] = round(r["mfu"], 4)
    headline["rows"] = [{k: r.get(k) for k in ("framework", "size", "seq", "batch", "dtype",
                                                "attn_dropout", "step_s", "seq_per_s", "mfu",
                                                "compile_s", "peak_mem_gib", "error")}
                        for r in results]
    print(json.dumps(headline))


if __name__ == "__main__":
    main()
