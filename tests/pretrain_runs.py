"""Helpers for tests that run pretraining: tiny models on random TFRecords."""
import os
import sys

import numpy as np
import tensorflow as tf

from configs import pretrain as pretrain_configs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB, SEQ, PRED = 120, 32, 5

# A model small enough that a step takes milliseconds on a CPU.
SMALL_MODEL = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=2 * SEQ)


def write_random_tfrecord(path, num_examples, seed=0, seq=SEQ, pred=PRED):
    """Random but well-formed pretraining examples (google-research/bert's features)."""
    SEQ, PRED = seq, pred  # noqa: N806
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for _ in range(num_examples):
            length = int(rng.integers(2 * PRED + 2, SEQ + 1))
            ids = np.zeros(SEQ, np.int64)
            ids[:length] = rng.integers(5, VOCAB, length)
            ids[0], ids[length - 1] = 2, 3
            mask = (np.arange(SEQ) < length).astype(np.int64)
            segments = ((np.arange(SEQ) >= length // 2) & (mask == 1)).astype(np.int64)
            positions = np.sort(rng.choice(np.arange(1, length - 1), PRED, replace=False))
            feature = {
                "input_ids": ids, "input_mask": mask, "segment_ids": segments,
                "masked_lm_positions": positions, "masked_lm_ids": ids[positions],
                "next_sentence_labels": np.array([rng.integers(0, 2)]),
            }
            feats = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v.tolist()))
                     for k, v in feature.items()}
            feats["masked_lm_weights"] = tf.train.Feature(
                float_list=tf.train.FloatList(value=[1.0] * PRED))
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feats)).SerializeToString())


def make_random_data(folder):
    """train/eval/train_long TFRecords of random examples in `folder`."""
    write_random_tfrecord(folder / "train.tfrecord", 400, seed=0)
    write_random_tfrecord(folder / "eval.tfrecord", 40, seed=1)
    write_random_tfrecord(folder / "train_long.tfrecord", 100, seed=2, seq=2 * SEQ, pred=2 * PRED)
    return folder


def small_overrides(data_dir, **train):
    values = {"data.train_files": str(data_dir / "train.tfrecord"),
              "data.eval_files": str(data_dir / "eval.tfrecord"),
              "data.default_corpus": False, "data.max_seq_length": SEQ,
              "data.max_predictions_per_seq": PRED, "data.shuffle_buffer": 100,
              "data.eval_batches": 2, "train.batch_size": 8, "train.num_steps": 12,
              "train.warmup_steps": 2, "train.log_every": 1, "train.checkpoint_every": 4,
              "train.eval_every": 0}
    values.update({f"model.{k}": v for k, v in SMALL_MODEL.items()})
    values.update({f"train.{k}": v for k, v in train.items()})
    return values


def config_with(overrides):
    config = pretrain_configs.get_config("tiny")
    for key, value in overrides.items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return config


def cli(workdir, overrides):
    args = [sys.executable, "-m", "bert_jax.pretrain", "--config",
            "configs/pretrain.py:tiny", "--workdir", str(workdir)]
    args += [f"--config.{k}={v}" for k, v in overrides.items()]
    return args
