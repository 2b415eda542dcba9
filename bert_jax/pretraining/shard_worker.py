"""One shard of create_pretraining_data: documents in, TFRecord bytes out.

A shard is a bounded group of whole documents, processed exactly as
google-research/bert (G-BERT) processes a whole corpus, on G-BERT's random
stream (pretraining_instances.py): shard 0 is seeded with random_seed itself,
so a corpus that fits in one shard gives G-BERT's instances, one for one;
shard i > 0 with a seed derived from (random_seed, i). The output depends
only on the shard layout, never on which worker process runs a shard or when.
Random next segments come from the shard's own documents.

The shard's instances are dealt round-robin over the output files, starting
at file `shard index % num_outputs` (G-BERT's dealing, for shard 0), so
every output file gets a share of every shard and the files stay within one
instance of each other per shard.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import random
import shutil

import numpy as np

from bert_jax.pretraining import record_spec, tfrecord_writer
from bert_jax.pretraining.instances import InstanceOptions, assemble, create_instances

_BATCH = 4096  # instances assembled and encoded together


@dataclasses.dataclass
class ShardResult:
    """A processed shard: framed TFRecords per output file, and counts.

    A worker process hands the records over as files (`spooled`, one per
    output file): piping hundreds of MB back through the pool's pickles cost
    the main process more CPU than reading the whole input.
    """

    index: int
    outputs: list[bytearray]
    stats: collections.Counter
    spooled: list[str] | None = None

    def append_to(self, files) -> None:
        """Appends the shard's records to the open output files (and removes its spool files)."""
        if self.spooled is None:
            for f, data in zip(files, self.outputs):
                f.write(data)
            return
        for f, path in zip(files, self.spooled):
            with open(path, "rb") as spool:
                shutil.copyfileobj(spool, f, 1 << 20)
            os.remove(path)


def shard_rng(random_seed: int, shard_index: int) -> random.Random:
    """G-BERT's generator for a shard: random.Random(random_seed) for shard 0."""
    if shard_index == 0:
        return random.Random(random_seed)
    state = np.random.SeedSequence([random_seed, shard_index]).generate_state(4)
    return random.Random(int.from_bytes(state.tobytes(), "little"))


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


def _instance_features(ids, instances, tokenizer, options: InstanceOptions) -> dict:
    """Assembles a batch of instances into features.py's features, in its order."""
    seq = assemble(ids, instances, options.max_seq_length, tokenizer.cls_id, tokenizer.sep_id)
    values = {
        "input_ids": seq.input_ids,
        "input_mask": (np.arange(options.max_seq_length) < seq.lengths[:, None]).astype(np.int32),
        "segment_ids": seq.segment_ids,
        "masked_lm_positions": seq.masked_lm_positions,
        "masked_lm_ids": seq.masked_lm_ids,
        "masked_lm_weights": seq.masked_lm_weights,
        "next_sentence_labels": np.where(
            instances.is_random_next, record_spec.IS_RANDOM_NEXT, record_spec.IS_NEXT
        )[:, None],
    }
    spec = record_spec.UNMASKED_FEATURES if options.unmasked else record_spec.MASKED_FEATURES
    return {name: values[name] for name in spec}


def process_shard(
    tokenizer,
    options: InstanceOptions,
    num_outputs: int,
    shard_index: int,
    documents: list[list[str]],
) -> ShardResult:
    """Tokenizes a shard's documents and writes its instances as framed TFRecords.

    Returns one bytes object per output file, ready to be appended to it.
    """
    stats = collections.Counter()
    ids, offsets, bounds = _tokenize(tokenizer, documents, stats)
    outputs = [bytearray() for _ in range(num_outputs)]
    if not bounds:
        return ShardResult(shard_index, outputs, stats)

    # G-BERT draws random replacements from its vocab dict's values.
    replacement_ids = np.fromiter(tokenizer.vocab.values(), np.int32, len(tokenizer.vocab))
    instances = create_instances(
        offsets,
        bounds,
        options,
        shard_rng(options.random_seed, shard_index),
        tokenizer.mask_id,
        replacement_ids,
        ids,
        tokenizer.continuation_mask if options.do_whole_word_mask else None,
    )

    for begin in range(0, len(instances), _BATCH):
        batch = instances.take(slice(begin, begin + _BATCH))
        values = _instance_features(ids, batch, tokenizer, options)
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
        cuts = record_offsets[
            np.concatenate([[0], np.cumsum(np.bincount(target, minlength=num_outputs))])
        ]
        for k in range(num_outputs):
            outputs[k] += buffer[cuts[k] : cuts[k + 1]].data
    return ShardResult(shard_index, outputs, stats)


# Worker processes: the tokenizer and options arrive once, via the pool's
# initializer (tokenizers pickle as "load this vocabulary again").
_worker_setup: tuple | None = None


def init_worker(tokenizer, options: InstanceOptions, num_outputs: int, spool_dir: str) -> None:
    """Pool initializer: keeps what every shard of this run needs."""
    global _worker_setup
    _worker_setup = (tokenizer, options, num_outputs, spool_dir)


def run_in_worker(shard_index: int, documents: list[list[str]]) -> ShardResult:
    """`process_shard` with the setup `init_worker` received; records spooled to files."""
    tokenizer, options, num_outputs, spool_dir = _worker_setup
    result = process_shard(tokenizer, options, num_outputs, shard_index, documents)
    result.spooled = []
    for k, data in enumerate(result.outputs):
        path = os.path.join(spool_dir, f"shard{shard_index:07d}-output{k:05d}")
        with open(path, "wb") as f:
            f.write(data)
        result.spooled.append(path)
    result.outputs = []
    return result
