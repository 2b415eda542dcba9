"""tf.data input pipeline for BERT pretraining.

Reads google-research/bert TFRecords (`record_spec.py`) into per-host batches of
`global_batch_size // process_count` examples: int32 `input_ids`, `input_mask`,
`segment_ids` [B, S], `masked_lm_positions`, `masked_lm_ids` [B, P], float32
`masked_lm_weights` [B, P] and int32 `next_sentence_labels` [B] (squeezed from
the file's [B, 1], so a loss cannot broadcast it against [B, 2] logits).
Eval batches also carry int32 `is_real` [B] (see below). Iterate with
`dataset.as_numpy_iterator()`; that iterator is what checkpoints.train_state saves.

Host split: each host reads files `files[process_index::process_count]`. With
fewer files than hosts, every host reads all files and keeps every
`process_count`-th example instead (more reading, same result).

Training: shuffle files, repeat, interleave (deterministic), shuffle examples,
batch with drop_remainder, parse, mask, prefetch. Eval: files in order, one
pass; the final partial batch is padded with all-zero examples with
`is_real = 0` (their masked_lm_weights are 0 too), so weighted metrics stay
honest if NSP metrics are weighted by `is_real`. With several hosts, every host
pads with zero batches up to the largest host's batch count so collectives in
the eval loop stay in step (this counts the eval records once at set-up).

Determinism: all seeds derive from `seed` and `process_index`, the dataset
runs with `deterministic=True` (parallel interleave and map keep their order),
and dynamic masking is stateless, keyed by (seed, batch counter) where the
counter comes from `enumerate()` after batching. The counter is part of the
iterator state, so a restored iterator produces the very masks the original
would have, and every epoch sees fresh masks because the counter keeps growing.
"""
import math
from typing import Sequence

import jax
import numpy as np
import tensorflow as tf

from bert_jax.fileio.file_patterns import expand_file_patterns
from bert_jax.pretraining import record_spec
from bert_jax.pretraining.dynamic_masking import SpecialIds, mask_batch, original_input_ids

# tf.data runs on the host; keep TensorFlow off any accelerator JAX uses.
tf.config.set_visible_devices([], "GPU")

_TF_DTYPES = {"int64": tf.int64, "float32": tf.float32}


def _is_masked_file(files: list[str]) -> bool:
    """Whether the first record holds the masked-LM features (7) or not (4)."""
    for record in tf.data.TFRecordDataset(files).take(1):
        example = tf.train.Example.FromString(record.numpy())
        return "masked_lm_positions" in example.features.feature
    raise ValueError(f"input files {files[:3]}... hold no records")


def _parse_fn(spec: dict, max_seq_length: int, max_predictions_per_seq: int):
    """Returns serialized [B] -> dict of int32/float32 [B, length] (labels [B])."""
    lengths = record_spec.feature_lengths(spec, max_seq_length, max_predictions_per_seq)
    parse_spec = {
        name: tf.io.FixedLenFeature([length], _TF_DTYPES[dtype])
        for name, (length, dtype) in lengths.items()
    }

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, parse_spec)
        out = {
            name: tf.cast(x, tf.int32) if x.dtype == tf.int64 else x for name, x in parsed.items()
        }
        out["next_sentence_labels"] = out["next_sentence_labels"][:, 0]  # [B, 1] -> [B]
        return out

    return parse


def _count_records(files: Sequence[str]) -> list[int]:
    """Records per file (one read of each file)."""
    return [int(tf.data.TFRecordDataset(f).reduce(np.int64(0), lambda n, _: n + 1)) for f in files]


def _max_host_examples(files: list[str], process_count: int, split_files: bool) -> int:
    """The number of examples of the host that gets the most."""
    counts = _count_records(files)
    if split_files:
        return max(sum(counts[i::process_count]) for i in range(process_count))
    return math.ceil(sum(counts) / process_count)


def _pad_batch(batch: dict, batch_size: int) -> dict:
    """Pads a (partial) batch with all-zero rows to `batch_size`; marks rows with `is_real`."""
    num_real = tf.shape(batch["input_ids"])[0]
    batch = dict(batch, is_real=tf.ones([num_real], tf.int32))

    def pad(x):
        paddings = [[0, batch_size - num_real]] + [[0, 0]] * (len(x.shape) - 1)
        return tf.ensure_shape(tf.pad(x, paddings), [batch_size] + x.shape[1:])

    return {name: pad(x) for name, x in batch.items()}


def make_pretraining_dataset(
    file_patterns: str | Sequence[str],
    *,
    global_batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    seed: int,
    is_training: bool = True,
    dynamic_masking: bool = False,
    masked_lm_prob: float = 0.15,
    whole_word_mask: bool = False,
    vocab_size: int | None = None,
    special_ids: SpecialIds | Sequence[int] | None = None,
    continuation_ids: np.ndarray | None = None,
    process_index: int | None = None,
    process_count: int | None = None,
    num_epochs: int | None = None,
    shuffle_buffer_size: int = 10_000,
    cycle_length: int = 8,
) -> tf.data.Dataset:
    """Returns this host's pretraining batches (see the module docstring).

    Args:
      file_patterns: comma-separated files/globs, or a list of them.
      global_batch_size: examples per step over all hosts (`train.batch_size`).
      max_seq_length, max_predictions_per_seq: the files' S and P.
      seed: seeds file and example shuffling and dynamic masking.
      is_training: shuffled, repeated, full batches; else one ordered, padded pass.
      dynamic_masking: mask in the pipeline. Required for unmasked (4-feature)
        files; on masked files it restores the original tokens and re-masks.
      masked_lm_prob, whole_word_mask: masking rules (see dynamic_masking.py).
      vocab_size, special_ids: needed by dynamic masking (random replacement
        ids; [CLS]/[SEP]/[MASK]/[PAD] ids, e.g. `SpecialIds.from_vocab(tokens)`).
      continuation_ids: [vocab_size] bool, True for "##" pieces
        (`dynamic_masking.continuation_mask(tokens)`); needed for whole words.
      process_index, process_count: this host and the number of hosts
        (default: JAX's).
      num_epochs: training passes over the data; None repeats forever.
      shuffle_buffer_size: examples in the shuffle buffer (training).
      cycle_length: files read concurrently (training).
    """
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
    if global_batch_size % process_count:
        raise ValueError(
            f"train.batch_size={global_batch_size} is not divisible by the "
            f"{process_count} processes"
        )
    if max_predictions_per_seq > max_seq_length:
        raise ValueError(
            f"max_predictions_per_seq={max_predictions_per_seq} exceeds "
            f"max_seq_length={max_seq_length}"
        )
    batch_size = global_batch_size // process_count
    files = expand_file_patterns(file_patterns)
    masked_files = _is_masked_file(files)
    if not masked_files and not dynamic_masking:
        raise ValueError(
            f"{files[0]} holds unmasked instances (4 features): set dynamic_masking=True"
        )
    if dynamic_masking and (vocab_size is None or special_ids is None):
        raise ValueError("dynamic_masking needs vocab_size and special_ids")
    if whole_word_mask and continuation_ids is None:
        raise ValueError("whole_word_mask needs continuation_ids (a [vocab_size] bool array)")
    if whole_word_mask and len(continuation_ids) != vocab_size:
        raise ValueError(
            f"continuation_ids has {len(continuation_ids)} entries, vocab_size is {vocab_size}"
        )

    # Independent, per-host seeds for files, examples and masks.
    file_seed, example_seed, mask_seed = (
        int(s) for s in np.random.SeedSequence([seed, process_index]).generate_state(3)
    )
    split_files = len(files) >= process_count
    if split_files:
        host_files = files[process_index::process_count]
        file_ds = tf.data.Dataset.from_tensor_slices(host_files)
        if is_training:
            file_ds = file_ds.shuffle(
                len(host_files), seed=file_seed, reshuffle_each_iteration=True
            )
            file_ds = file_ds.repeat(num_epochs)
            records = file_ds.interleave(
                tf.data.TFRecordDataset,
                cycle_length=min(cycle_length, len(host_files)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
        else:
            records = tf.data.TFRecordDataset(host_files)
    else:
        records = tf.data.TFRecordDataset(files).shard(process_count, process_index)
        if is_training:
            records = records.repeat(num_epochs)

    if is_training:
        records = records.shuffle(shuffle_buffer_size, seed=example_seed)
    ds = records.batch(batch_size, drop_remainder=is_training)
    spec = record_spec.MASKED_FEATURES if masked_files else record_spec.UNMASKED_FEATURES
    ds = ds.map(
        _parse_fn(spec, max_seq_length, max_predictions_per_seq),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    if not is_training:
        ds = ds.map(lambda batch: _pad_batch(batch, batch_size))
        if process_count > 1:
            num_batches = math.ceil(
                _max_host_examples(files, process_count, split_files) / batch_size
            )
            zeros = tf.data.Dataset.from_tensors(
                {k: tf.zeros(s.shape, s.dtype) for k, s in ds.element_spec.items()}
            )
            ds = ds.concatenate(zeros.repeat()).take(num_batches)

    if dynamic_masking:
        continuation = (
            tf.constant(np.asarray(continuation_ids, bool)) if whole_word_mask else None
        )
        special = SpecialIds(*special_ids)

        def remask(counter, batch):
            if masked_files:
                batch = dict(batch, input_ids=original_input_ids(batch))
            return mask_batch(
                batch,
                tf.stack([tf.constant(mask_seed, tf.int64), counter]),
                max_predictions_per_seq=max_predictions_per_seq,
                masked_lm_prob=masked_lm_prob,
                vocab_size=vocab_size,
                special_ids=special,
                continuation=continuation,
            )

        ds = ds.enumerate().map(remask, num_parallel_calls=tf.data.AUTOTUNE)

    options = tf.data.Options()
    options.deterministic = True
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options)
