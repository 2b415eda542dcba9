"""One shard of create_pretraining_data: documents in, TFRecord bytes out.

A shard is a bounded group of whole documents. Everything random about it
derives from (random_seed, shard index), so its output depends only on the
shard layout, never on which worker process runs it or when:
  * the document order (G-BERT shuffles its documents once),
  * pair building, one stream per dupe (G-BERT rebuilds pairs per dupe),
  * the instance shuffle over all dupes, truncation and masking.
Random next segments come from the shard's own documents.

The shard's instances are dealt round-robin over the output files, starting
at file `shard index % num_outputs`, so every output file gets a share of
every shard and the files stay within one instance of each other per shard.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import random

import numpy as np

from bert_jax import features, pretraining_instances, tfrecord_writer

_BATCH = 4096  # instances assembled, masked and encoded together

# Stream ids of the shard's random generators.
_DOCUMENT_ORDER, _PAIRS, _INSTANCES = range(3)


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """How instances are built and masked (create_pretraining_data's flags)."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    random_seed: int = 12345
    do_whole_word_mask: bool = False
    unmasked: bool = False  # write only the features dynamic masking needs

    def validate(self) -> None:
        """Raises ValueError naming the first option out of range."""
        if self.max_seq_length < 5:
            raise ValueError(f"max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP]), got {self.max_seq_length}")
        if self.max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be >= 1, got {self.max_predictions_per_seq}")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1], got {self.masked_lm_prob}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
        if self.dupe_factor < 1:
            raise ValueError(f"dupe_factor must be >= 1, got {self.dupe_factor}")
        if self.random_seed < 0:
            raise ValueError(f"random_seed must be >= 0, got {self.random_seed}")


@dataclasses.dataclass
class ShardResult:
    """A processed shard: framed TFRecords per output file, and counts."""

    index: int
    outputs: list[bytearray]
    stats: collections.Counter


def _seed(options: InstanceOptions, shard_index: int, stream: int, dupe: int = 0) -> np.random.SeedSequence:
    return np.random.SeedSequence([options.random_seed, shard_index, stream, dupe])


def _python_rng(seed: np.random.SeedSequence) -> random.Random:
    return random.Random(int.from_bytes(seed.generate_state(4).tobytes(), "little"))


def _tokenize(tokenizer, documents: list[list[str]], stats: collections.Counter):
    """-> (flat ids int32, sentence token offsets, document sentence bounds).

    Sentences without tokens are dropped, and documents left without
    sentences, as G-BERT does.
    """
    lines = list(itertools.chain.from_iterable(documents))
    encoded = tokenizer.encode_batch(lines)
    lengths = [len(ids) for ids in encoded]
    ids = np.fromiter(itertools.chain.from_iterable(encoded), np.int32, sum(lengths))
    offsets = [0]
    bounds = []
    line = 0
    for document in documents:
        first = len(offsets) - 1
        for length in lengths[line : line + len(document)]:
            if length:
                offsets.append(offsets[-1] + length)
            else:
                stats["lines_without_tokens"] += 1
        line += len(document)
        if len(offsets) - 1 > first:
            bounds.append((first, len(offsets) - 1))
        else:
            stats["documents_without_tokens"] += 1
    stats["documents"] += len(bounds)
    stats["sentences"] += len(offsets) - 1
    return ids, offsets, bounds


def _instance_features(ids, spans, tokenizer, options: InstanceOptions, rng, continuation) -> dict:
    """Assembles (and masks) a batch of pairs into features.py's features."""
    pairs = pretraining_instances.assemble_pairs(
        ids, spans, options.max_seq_length, tokenizer.cls_id, tokenizer.sep_id, rng)
    input_mask = (np.arange(options.max_seq_length) < pairs.lengths[:, None]).astype(np.int32)
    labels = np.where(spans.is_random_next, features.IS_RANDOM_NEXT, features.IS_NEXT)[:, None]
    if options.unmasked:
        values = (pairs.input_ids, input_mask, pairs.segment_ids, labels)
        return dict(zip(features.UNMASKED_FEATURES, values))
    masked = pretraining_instances.mask_pairs(
        pairs, options.max_predictions_per_seq, options.masked_lm_prob, tokenizer.vocab_size,
        tokenizer.mask_id, rng, continuation)
    values = (masked.input_ids, input_mask, pairs.segment_ids, masked.positions, masked.label_ids,
              masked.weights, labels)
    return dict(zip(features.MASKED_FEATURES, values))


def process_shard(
    tokenizer, options: InstanceOptions, num_outputs: int, shard_index: int, documents: list[list[str]]
) -> ShardResult:
    """Tokenizes a shard's documents and writes its instances as framed TFRecords.

    Returns one bytes object per output file, ready to be appended to it.
    """
    stats = collections.Counter()
    ids, offsets, bounds = _tokenize(tokenizer, documents, stats)
    outputs = [bytearray() for _ in range(num_outputs)]
    if not bounds:
        return ShardResult(shard_index, outputs, stats)

    order = list(range(len(bounds)))
    _python_rng(_seed(options, shard_index, _DOCUMENT_ORDER)).shuffle(order)
    spans = pretraining_instances.PairSpans.concatenate([
        pretraining_instances.build_pair_spans(
            offsets, bounds, order, options.max_seq_length, options.short_seq_prob,
            _python_rng(_seed(options, shard_index, _PAIRS, dupe)))
        for dupe in range(options.dupe_factor)
    ])
    rng = np.random.default_rng(_seed(options, shard_index, _INSTANCES))
    spans = spans.take(rng.permutation(len(spans)))  # G-BERT shuffles all instances
    continuation = tokenizer.continuation_mask if options.do_whole_word_mask else None

    for begin in range(0, len(spans), _BATCH):
        batch = spans.take(np.arange(begin, min(begin + _BATCH, len(spans))))
        values = _instance_features(ids, batch, tokenizer, options, rng, continuation)
        stats["instances"] += len(batch)
        stats["tokens"] += int(values["input_mask"].sum())
        stats["random_next"] += int(batch.is_random_next.sum())
        stats["short_target"] += int(batch.short_target.sum())
        if not options.unmasked:
            stats["masked_positions"] += int(values["masked_lm_weights"].sum())
        # Deal the batch round-robin over the outputs, grouped by output so
        # each output's records are one contiguous slice of the buffer.
        target = (np.arange(begin, begin + len(batch)) + shard_index) % num_outputs
        if num_outputs > 1:
            by_output = np.argsort(target, kind="stable")
            values = {name: value[by_output] for name, value in values.items()}
        buffer, record_offsets = tfrecord_writer.encode_tfrecords(values)
        cuts = record_offsets[np.concatenate([[0], np.cumsum(np.bincount(target, minlength=num_outputs))])]
        for k in range(num_outputs):
            outputs[k] += buffer[cuts[k] : cuts[k + 1]].data
    return ShardResult(shard_index, outputs, stats)


# Worker processes: the tokenizer and options arrive once, via the pool's
# initializer (tokenizers pickle as "load this vocabulary again").
_worker_setup: tuple | None = None


def init_worker(tokenizer, options: InstanceOptions, num_outputs: int) -> None:
    """Pool initializer: keeps what every shard of this run needs."""
    global _worker_setup
    _worker_setup = (tokenizer, options, num_outputs)


def run_in_worker(shard_index: int, documents: list[list[str]]) -> ShardResult:
    """`process_shard` with the setup `init_worker` received."""
    tokenizer, options, num_outputs = _worker_setup
    return process_shard(tokenizer, options, num_outputs, shard_index, documents)
