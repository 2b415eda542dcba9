"""Checks a pretraining config before any compute, and resolves its data files.

Every error names the config field (or file) at fault (training.run_config);
this module checks values, their consistency, and the files.
"""
from __future__ import annotations

import json
import os

import jax
import ml_collections

from bert_jax.model.config import BertConfig
from bert_jax.training.optimizers import OPTIMIZERS
from bert_jax.training.run_config import check_batch_split, check_positive, fail
from bert_jax.training.schedules import SCHEDULE_KINDS


def model_config(config: ml_collections.ConfigDict) -> BertConfig:
    """The BertConfig of `config.model`."""
    return BertConfig.from_dict(config.model.to_dict(), source="config.model")


def _expand(field: str, patterns: str) -> list[str]:
    from bert_jax.fileio.file_patterns import expand_file_patterns

    try:
        return expand_file_patterns(patterns)
    except FileNotFoundError as e:
        fail(field, str(e))


def _check_record_lengths(field: str, path: str, max_seq_length: int,
                          max_predictions: int) -> None:
    """Reads the first record of `path`: its lengths must match the config."""
    import tensorflow as tf

    for record in tf.data.TFRecordDataset(path).take(1):
        example = tf.train.Example.FromString(record.numpy())
        feats = example.features.feature
        if "input_ids" not in feats:
            fail(field, f"{path} has no input_ids feature: not a pretraining TFRecord")
        seq = len(feats["input_ids"].int64_list.value)
        if seq != max_seq_length:
            fail("data.max_seq_length", f"is {max_seq_length} but {path} holds sequences of "
                  f"length {seq}")
        if "masked_lm_positions" in feats:
            pred = len(feats["masked_lm_positions"].int64_list.value)
            if pred != max_predictions:
                fail("data.max_predictions_per_seq", f"is {max_predictions} but {path} holds "
                      f"{pred} predictions per sequence")


def _read_vocab(path: str) -> list[str]:
    if not os.path.exists(path):
        fail("data.vocab_file", f"{path} does not exist")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").strip() for line in f]


# Fields that must agree between config.model and a checkpoint we start from:
# the shapes, and the numerics the weights were trained with.
_ARCHITECTURE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                        "intermediate_size", "max_position_embeddings", "type_vocab_size",
                        "hidden_act", "layer_norm_eps")


def _check_init_checkpoint_model(path: str, init_mode: str, ours: BertConfig) -> None:
    if init_mode == "full":  # a pretraining workdir: its config.json has the model section
        with open(os.path.join(path, "config.json")) as f:
            theirs = BertConfig.from_dict(json.load(f)["model"], source=f"{path}/config.json")
    else:
        from bert_jax.checkpoints import detect_format, read_config

        try:
            theirs = read_config(path, detect_format(path))
        except (ValueError, FileNotFoundError) as e:
            fail("train.init_checkpoint", str(e))
    for field in _ARCHITECTURE_FIELDS:
        if getattr(theirs, field) != getattr(ours, field):
            fail(f"model.{field}", f"is {getattr(ours, field)!r} but train.init_checkpoint "
                  f"{path} was trained with {getattr(theirs, field)!r}")


def validate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Checks `config`; returns the data to train on.

    Returns {"train_files", "eval_files" (lists), "vocab_file" (or None),
    "masking" (the dynamic-masking keyword arguments of the pipeline)}.
    Builds the embedded default corpus when `data.default_corpus` is set and
    no train files are given.
    """
    d, t, m = config.data, config.train, config.model
    model_config(config)  # raises on a bad config.model field
    check_positive(t, "train", ("batch_size", "num_steps", "log_every", "checkpoint_every",
                                "grad_accum_steps"))
    check_batch_split("train.batch_size", t.batch_size, t.grad_accum_steps, config.mesh.tensor)
    if d.max_seq_length > m.max_position_embeddings:
        fail("data.max_seq_length", f"{d.max_seq_length} exceeds model.max_position_embeddings="
              f"{m.max_position_embeddings}")
    if not 0 < d.max_predictions_per_seq <= d.max_seq_length:
        fail("data.max_predictions_per_seq", f"must be in [1, data.max_seq_length], got "
              f"{d.max_predictions_per_seq}")
    if not 0 <= t.warmup_steps < t.num_steps:
        fail("train.warmup_steps", f"must be in [0, train.num_steps={t.num_steps}), got "
              f"{t.warmup_steps}")
    if t.optimizer not in OPTIMIZERS:
        fail("train.optimizer", f"{t.optimizer!r} is not one of {OPTIMIZERS}")
    if t.schedule not in SCHEDULE_KINDS:
        fail("train.schedule", f"{t.schedule!r} is not one of {SCHEDULE_KINDS}")
    if t.init_mode not in ("params", "full"):
        fail("train.init_mode", f"{t.init_mode!r} is not 'params' or 'full'")
    if t.init_checkpoint and not os.path.exists(t.init_checkpoint):
        fail("train.init_checkpoint", f"{t.init_checkpoint} does not exist")
    if (t.init_checkpoint and t.init_mode == "full"
            and not os.path.isdir(os.path.join(t.init_checkpoint, "checkpoints"))):
        fail("train.init_checkpoint", f"init_mode 'full' takes a pretraining workdir, and "
              f"{t.init_checkpoint} has no checkpoints/")
    if t.init_checkpoint:
        _check_init_checkpoint_model(t.init_checkpoint, t.init_mode, model_config(config))
    if config.get("require_init_checkpoint") and not t.init_checkpoint:
        fail("train.init_checkpoint", "this preset continues from a phase-1 checkpoint; set it")

    vocab_file = d.vocab_file or None
    if d.train_files:
        train_files = _expand("data.train_files", d.train_files)
        eval_files = _expand("data.eval_files", d.eval_files) if d.eval_files else []
    elif d.default_corpus:
        from bert_jax.pretraining.embedded_corpus import ensure_default_pretraining_data

        def build():
            return ensure_default_pretraining_data(
                d.cache_dir or os.path.join(workdir, "data"), max_seq_length=d.max_seq_length,
                max_predictions_per_seq=d.max_predictions_per_seq, vocab_size=m.vocab_size)

        # One process builds (into the shared workdir); the others then find it.
        if jax.process_index() == 0:
            built = build()
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("bert_jax default corpus built")
        if jax.process_index() != 0:
            built = build()
        train_files, eval_files = list(built["train_files"]), list(built["eval_files"])
        vocab_file = built["vocab_file"]
    else:
        fail("data.train_files", "is empty (set it, or data.default_corpus=True)")
    for field, files in (("data.train_files", train_files), ("data.eval_files", eval_files)):
        if files:
            _check_record_lengths(field, files[0], d.max_seq_length, d.max_predictions_per_seq)

    masking = {}
    if vocab_file:
        tokens = _read_vocab(vocab_file)
        if len(tokens) != m.vocab_size:
            fail("model.vocab_size", f"is {m.vocab_size} but {vocab_file} has {len(tokens)} "
                  "tokens")
    if d.dynamic_masking:
        if not vocab_file:
            fail("data.vocab_file", "dynamic masking needs the vocabulary (special and "
                  "continuation ids)")
        from bert_jax.pretraining.dynamic_masking import SpecialIds, continuation_mask

        try:
            special = SpecialIds.from_vocab(tokens)
        except (KeyError, ValueError) as e:
            fail("data.vocab_file", f"{vocab_file}: {e}")
        masking = dict(vocab_size=m.vocab_size, special_ids=special,
                       continuation_ids=continuation_mask(tokens))
    return {"train_files": train_files, "eval_files": eval_files, "vocab_file": vocab_file,
            "masking": masking}

