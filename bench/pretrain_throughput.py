"""Benchmark: the full pretraining step (input pipeline included), and the pipeline alone.

    python bench/pretrain_throughput.py [--sizes tiny,base] [--data FILE] [--vocab VOCAB]

1. For each model size, `bert_jax.pretrain.train_and_evaluate` runs for a few
   steps on real TFRecords (seq 128, 20 predictions); the sequences/s are those
   it logs to metrics.jsonl for the steps after the first (compilation
   excluded). MFU is the model's analytic FLOP/s over a large fp32 matmul
   measured in the same run (the CPU has no published peak).
2. The tf.data pipeline alone (parse, shuffle, batch; and with dynamic masking)
   on one core (tf.data's private thread pool of 1), in sequences/s.

Data: google-research/bert's speeches TFRecords from ../shared/data by default.
The last line printed is one JSON object with the headline figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                      "shared", "data", "google_bert")
SIZES = {"tiny": dict(batch=32, steps=40), "base": dict(batch=8, steps=5)}


def full_step(size: str, data: str, batch: int, steps: int) -> dict:
    from bert_jax import pretrain
    from bert_jax.pretraining import config_check
    from bert_jax.training.flops import train_flops_per_sequence
    from bert_jax.training.metrics_writer import read_metrics
    from configs import model as model_configs
    from configs import pretrain as pretrain_configs

    config = pretrain_configs.get_config("tiny")
    config.model = model_configs.get_config(size)
    config.data.default_corpus = False
    config.data.train_files = data
    config.data.shuffle_buffer = 1000
    config.train.update(batch_size=batch, num_steps=steps, warmup_steps=1, log_every=steps,
                        checkpoint_every=10 * steps, eval_every=0, export_params=False)
    with tempfile.TemporaryDirectory() as workdir:
        pretrain.train_and_evaluate(config, workdir)
        row = read_metrics(workdir)[-1]
    seqs = row["sequences_per_second"]
    model_config = config_check.model_config(config)
    return {"size": size, "batch": batch, "steps": steps, "sequences_per_s": seqs,
            "model_flops_per_s": seqs * train_flops_per_sequence(model_config, 128, 20)}


def pipeline_alone(data: str, vocab: str, dynamic: bool, batches: int = 200) -> dict:
    import tensorflow as tf

    from bert_jax.pretraining.dynamic_masking import SpecialIds, continuation_mask
    from bert_jax.pretraining.input_pipeline import make_pretraining_dataset

    with open(vocab, encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    masking = dict(vocab_size=len(tokens), special_ids=SpecialIds.from_vocab(tokens),
                   continuation_ids=continuation_mask(tokens)) if dynamic else {}
    ds = make_pretraining_dataset(data, global_batch_size=32, max_seq_length=128,
                                  max_predictions_per_seq=20, seed=0, dynamic_masking=dynamic,
                                  shuffle_buffer_size=1000, process_index=0, process_count=1,
                                  **masking)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1  # one core's worth
    options.threading.max_intra_op_parallelism = 1
    it = ds.with_options(options).as_numpy_iterator()
    for _ in range(20):  # fill the shuffle buffer
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    seconds = time.perf_counter() - start
    return {"dynamic_masking": dynamic, "sequences_per_s_per_core": batches * 32 / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="tiny,base")
    parser.add_argument("--data", default=os.path.join(SHARED, "speeches_seq128.tfrecord"))
    parser.add_argument("--vocab", default=os.path.join(SHARED, "vocab.txt"))
    args = parser.parse_args()
    if not os.path.exists(args.data):
        sys.exit(f"{args.data} not found: pass --data (TFRecords at seq 128, 20 predictions) "
                 "and --vocab")
    from absl import logging

    from bert_jax.training.flops import measure_matmul_flops_per_s

    logging.set_verbosity(logging.WARNING)
    matmul = measure_matmul_flops_per_s()
    print(f"fp32 matmul: {matmul / 1e9:.1f} GFLOP/s")
    steps = {}
    for size in args.sizes.split(","):
        result = full_step(size, args.data, **SIZES[size])
        result["mfu_vs_matmul"] = result["model_flops_per_s"] / matmul
        steps[size] = result
        print(json.dumps(result))
    pipelines = [pipeline_alone(args.data, args.vocab, dynamic) for dynamic in (False, True)]
    for result in pipelines:
        print(json.dumps(result))
    print(json.dumps({
        **{f"{size}_sequences_per_s": r["sequences_per_s"] for size, r in steps.items()},
        **{f"{size}_mfu_vs_matmul": r["mfu_vs_matmul"] for size, r in steps.items()},
        "matmul_flops_per_s": matmul,
        "pipeline_sequences_per_s_per_core": pipelines[0]["sequences_per_s_per_core"],
        "pipeline_dynamic_masking_sequences_per_s_per_core":
            pipelines[1]["sequences_per_s_per_core"],
    }))


if __name__ == "__main__":
    main()
