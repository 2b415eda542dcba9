"""Pretraining instances: google-research/bert's sentence pairs and static masking.

The algorithm is that of google-research/bert's create_pretraining_data.py
(G-BERT below), and so is the random stream: given the same documents (as
token ids) and a `random.Random` seeded like G-BERT's, `create_instances`
makes the same random calls in the same order, so a corpus processed as one
shard comes out instance for instance identical to G-BERT's output. (The
statistics of one run swing by several percent from seed to seed on a small
corpus, since the short target is drawn once per document; matching G-BERT's
stream is the only way to match its files rather than its averages.)

Pairs, for each document (in G-BERT's shuffled order, `dupe_factor` times):
* the target length is `max_seq_length - 3`; with probability
  `short_seq_prob` it is `randint(2, max)` instead, drawn once per document.
* sentences accumulate into a chunk until it holds `target` tokens or the
  document ends; segment A is the first `randint(1, n - 1)` sentences of the
  chunk (all of it if n == 1).
* with probability 0.5, or always if the chunk has one sentence, segment B
  is a span of another document (starting at a random sentence and long
  enough to fill the target), and the chunk's unused sentences are put
  back; otherwise B is the rest of the chunk.
* the longer side (B on ties) loses one token at a time, from the front or
  the back with probability 0.5 each, until A + B fits `max_seq_length - 3`.
* `[CLS] A [SEP] B [SEP]`; segment ids 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`;
  next_sentence_label 0 = B really follows A, 1 = B is random.
Finally all instances of the shard are shuffled.

Masking, per instance:
* num_to_predict = min(max_predictions_per_seq, max(1, round(len * prob)))
  over the real length including [CLS]/[SEP], which are never masked.
* candidates are shuffled and the first num_to_predict taken; each becomes
  [MASK] with probability 0.8, stays with 0.1, and becomes a token drawn
  uniformly from the vocabulary with 0.1. Positions are sorted; labels are
  the original ids; weights 1.0, padding 0.
* whole-word mode shuffles whole words (a piece and its continuation
  pieces) and takes each that still fits, as G-BERT does. DIFFERENCES FROM
  G-BERT, so this mode does not follow its stream: the 80/10/10 choice is
  drawn once per word and applied to all its pieces (G-BERT draws it per
  piece, so a word could come out half masked: its issue #910), and a word
  never spans [SEP] (G-BERT joins a "##" piece after [SEP] to the word
  before it).

--unmasked skips the masking draws, so after the first instance its pairs
differ from a masked run's (they are G-BERT's pairs on a different stream).

The per-instance work is a Python loop (G-BERT's random calls are sequential
and data dependent); assembling and encoding the sequences is vectorised.
"""

from __future__ import annotations

import array
import bisect
import dataclasses
import random

import numpy as np

KEEP = -1  # replacement code: the masked position keeps its token


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
            raise ValueError(
                f"max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP]), got {self.max_seq_length}"
            )
        if self.max_predictions_per_seq < 1:
            raise ValueError(
                f"max_predictions_per_seq must be >= 1, got {self.max_predictions_per_seq}"
            )
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1], got {self.masked_lm_prob}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
        if self.dupe_factor < 1:
            raise ValueError(f"dupe_factor must be >= 1, got {self.dupe_factor}")
        if self.random_seed < 0:
            raise ValueError(f"random_seed must be >= 0, got {self.random_seed}")


@dataclasses.dataclass
class Instances:
    """A shard's instances as token spans of its flat id array, plus masks.

    a_start/b_start are the first tokens left after truncation, a_length/
    b_length the tokens kept. Masked positions are in the assembled
    sequence, sorted, `num_masked` per row; replacement is the id written
    there, or KEEP.
    """

    a_start: np.ndarray  # [N] int64
    a_length: np.ndarray
    b_start: np.ndarray
    b_length: np.ndarray
    is_random_next: np.ndarray  # [N] bool
    short_target: np.ndarray  # [N] bool: built under a shortened target length
    num_masked: np.ndarray  # [N] int64
    masked_positions: np.ndarray  # [N, max_predictions_per_seq] int32, zero padded
    replacement: np.ndarray  # [N, max_predictions_per_seq] int32

    def __len__(self) -> int:
        return len(self.a_start)

    def take(self, index: np.ndarray | slice) -> "Instances":
        """The instances at `index` (an index array, or a slice: views, no copy)."""
        return Instances(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))


# (i, i + 1, bit length of i + 1) for Fisher-Yates steps i = 1023 .. 1: the
# inner loop of `shuffle` reads them instead of computing them.
_SHUFFLE_STEPS = [(n - 1, n, n.bit_length()) for n in range(1024, 1, -1)]


def shuffle(x: list, getrandbits) -> None:
    """Python's random.shuffle (G-BERT's): same permutation, same stream, ~2x faster.

    Python's version calls `_randbelow(i + 1)` per step, which draws
    `getrandbits(k)` (one 32-bit word each) until the value is below i + 1;
    shuffling masking candidates is most of the time this module takes.
    """
    if len(x) > len(_SHUFFLE_STEPS) + 1:
        steps = ((n - 1, n, n.bit_length()) for n in range(len(x), 1, -1))
    else:
        steps = _SHUFFLE_STEPS[len(_SHUFFLE_STEPS) + 1 - len(x) :] if len(x) > 1 else ()
    for i, n, k in steps:
        j = getrandbits(k)
        while j >= n:
            j = getrandbits(k)
        x[i], x[j] = x[j], x[i]


def _randint(getrandbits, low: int, high: int) -> int:
    """Python's random.randint(low, high): same result, same stream."""
    n = high - low + 1
    k = n.bit_length()
    r = getrandbits(k)
    while r >= n:
        r = getrandbits(k)
    return low + r


class _MaskedLmColumns:
    """Masked positions and replacements of every instance, appended flat."""

    def __init__(self):
        self.counts = array.array("q")
        self.positions = array.array("i")
        self.replacements = array.array("i")

    def to_arrays(self, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """-> counts [N], positions [N, width] sorted, replacements [N, width]."""
        counts = np.frombuffer(self.counts, np.int64)
        rows = np.repeat(np.arange(len(counts)), counts)
        cols = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        positions = np.full((len(counts), width), np.iinfo(np.int32).max, np.int32)
        replacement = np.zeros((len(counts), width), np.int32)
        positions[rows, cols] = np.frombuffer(self.positions, np.int32)
        replacement[rows, cols] = np.frombuffer(self.replacements, np.int32)
        by_position = np.argsort(positions, axis=1, kind="stable")  # G-BERT sorts by position
        positions = np.take_along_axis(positions, by_position, 1)
        replacement = np.take_along_axis(replacement, by_position, 1)
        positions[np.arange(width)[None, :] >= counts[:, None]] = 0
        return counts.copy(), positions, replacement


def create_instances(
    sentence_offsets: list[int],
    document_bounds: list[tuple[int, int]],
    options: InstanceOptions,
    rng: random.Random,
    mask_id: int,
    replacement_ids: np.ndarray,
    ids: np.ndarray | None = None,
    continuation: np.ndarray | None = None,
) -> Instances:
    """G-BERT's create_training_instances over a shard, on G-BERT's random stream.

    Args:
      sentence_offsets: token offset of each sentence in the shard's flat id
        array, plus the end; every sentence has at least one token.
      document_bounds: (first sentence, end sentence) of each document, in
        corpus order.
      options: the instance options; `random_seed` is not read (see `rng`).
      rng: random.Random(seed), G-BERT's generator.
      mask_id: id of [MASK].
      replacement_ids: the ids a random replacement draws from, in G-BERT's
        order (its vocab dict's values).
      ids, continuation: the shard's flat token ids and the [vocab] bool mask
        of continuation pieces; needed only for whole-word masking.
    """
    offs = sentence_offsets
    max_num_tokens = options.max_seq_length - 3
    short_seq_prob = options.short_seq_prob
    max_predictions, masked_lm_prob = options.max_predictions_per_seq, options.masked_lm_prob
    whole_words = options.do_whole_word_mask
    if whole_words and (ids is None or continuation is None):
        raise ValueError("whole-word masking needs the shard's ids and the continuation mask")
    mask = not options.unmasked
    rand, bits = rng.random, rng.getrandbits
    replacement_ids = replacement_ids.tolist()

    documents = list(document_bounds)
    shuffle(documents, bits)  # G-BERT shuffles its documents once
    num_docs = len(documents)

    spans = [array.array("q") for _ in range(4)]
    a_starts, a_lengths, b_starts, b_lengths = spans
    random_next, short = array.array("b"), array.array("b")
    masked = _MaskedLmColumns()

    add_count, add_positions = masked.counts.append, masked.positions.extend
    add_replacement, add_replacements = masked.replacements.append, masked.replacements.extend
    last_replacement = len(replacement_ids) - 1

    def mask_instance(la: int, lb: int, a0: int, b0: int) -> None:
        """G-BERT's create_masked_lm_predictions, appended to `masked`.

        Each chosen position (or word) becomes [MASK] if rand() < 0.8, else
        stays if rand() < 0.5, else takes a random vocabulary entry; the
        positions are sorted later, vectorised.
        """
        num_to_predict = min(max_predictions, max(1, round((la + lb + 3) * masked_lm_prob)))
        if whole_words:
            count = 0
            for word in _choose_words(la, lb, a0, b0, num_to_predict, ids, continuation, bits):
                count += len(word)
                add_positions(word)
                if rand() < 0.8:
                    add_replacements([mask_id] * len(word))
                elif rand() < 0.5:
                    add_replacements([KEEP] * len(word))
                else:
                    add_replacements(
                        [replacement_ids[_randint(bits, 0, last_replacement)] for _ in word]
                    )
            add_count(count)
            return
        candidates = list(range(1, la + 1))
        candidates.extend(range(la + 2, la + lb + 2))
        shuffle(candidates, bits)
        chosen = candidates[:num_to_predict]
        add_count(len(chosen))
        add_positions(chosen)
        for _ in chosen:  # the same draws as above, one position at a time
            if rand() < 0.8:
                add_replacement(mask_id)
            elif rand() < 0.5:
                add_replacement(KEEP)
            else:
                add_replacement(replacement_ids[_randint(bits, 0, last_replacement)])

    for _ in range(options.dupe_factor):
        for doc_index in range(num_docs):
            first, end = documents[doc_index]
            target = max_num_tokens
            is_short = rand() < short_seq_prob
            if is_short:
                target = _randint(bits, 2, max_num_tokens)
            start = first  # first sentence of the current chunk
            while start < end:
                # The chunk ends at the first sentence that brings it to
                # `target` tokens, or at the document's end.
                stop = bisect.bisect_left(offs, offs[start] + target, start + 1, end)
                n = stop - start
                a_n = _randint(bits, 1, n - 1) if n >= 2 else 1
                a0, a1 = offs[start], offs[start + a_n]
                if n == 1 or rand() < 0.5:
                    target_b = target - (a1 - a0)
                    for _ in range(10):  # G-BERT's bounded retry for another document
                        other = _randint(bits, 0, num_docs - 1)
                        if other != doc_index:
                            break
                    other_first, other_end = documents[other]
                    b_first = _randint(bits, other_first, other_end - 1)
                    b0 = offs[b_first]
                    b1 = offs[bisect.bisect_left(offs, b0 + target_b, b_first + 1, other_end)]
                    is_random = True
                    start += a_n  # the chunk's unused sentences go back
                else:
                    b0, b1 = a1, offs[stop]
                    is_random = False
                    start = stop
                la, lb = a1 - a0, b1 - b0
                while la + lb > max_num_tokens:  # G-BERT's truncate_seq_pair
                    if la > lb:
                        la -= 1
                        if rand() < 0.5:
                            a0 += 1
                    else:
                        lb -= 1
                        if rand() < 0.5:
                            b0 += 1
                a_starts.append(a0)
                a_lengths.append(la)
                b_starts.append(b0)
                b_lengths.append(lb)
                random_next.append(is_random)
                short.append(is_short)
                if mask:
                    mask_instance(la, lb, a0, b0)

    order = list(range(len(a_starts)))
    shuffle(order, bits)  # G-BERT shuffles all instances
    width = max_predictions
    if mask:
        counts, positions, replacement = masked.to_arrays(width)
    else:
        counts = np.zeros(len(order), np.int64)
        positions = replacement = np.zeros((len(order), width), np.int32)
    columns = [np.frombuffer(c, np.int64) for c in spans]
    flags = [np.frombuffer(c, np.int8).astype(bool) for c in (random_next, short)]
    return Instances(*columns, *flags, counts, positions, replacement).take(
        np.asarray(order, np.int64)
    )


def _choose_words(la, lb, a0, b0, num_to_predict, ids, continuation, bits) -> list[list[int]]:
    """Whole-word choice: G-BERT's greedy pass over shuffled words that fit."""
    words = []
    for first, length, source in ((1, la, a0), (la + 2, lb, b0)):
        pieces = continuation[ids[source : source + length]]
        for offset, continues in enumerate(pieces.tolist()):
            if continues and offset:  # a word never spans [SEP]
                words[-1].append(first + offset)
            else:
                words.append([first + offset])
    shuffle(words, bits)
    chosen, count = [], 0
    for word in words:
        if count >= num_to_predict:
            break
        if count + len(word) > num_to_predict:
            continue
        chosen.append(word)
        count += len(word)
    return chosen


@dataclasses.dataclass
class Sequences:
    """Assembled `[CLS] A [SEP] B [SEP]` sequences, zero padded, masks applied."""

    input_ids: np.ndarray  # [N, S] int32, with the replacements applied
    segment_ids: np.ndarray  # [N, S] int32
    lengths: np.ndarray  # [N] real tokens, specials included
    masked_lm_positions: np.ndarray  # [N, P] int32
    masked_lm_ids: np.ndarray  # [N, P] int32, the original ids
    masked_lm_weights: np.ndarray  # [N, P] float32, 1.0 real, 0.0 padding


def assemble(
    ids: np.ndarray, instances: Instances, max_seq_length: int, cls_id: int, sep_id: int
) -> Sequences:
    """Lays out each instance's tokens and applies its masks."""
    fa, fb = instances.a_length, instances.b_length
    n = len(instances)
    pos = np.arange(max_seq_length)[None, :]
    fa_, fb_ = fa[:, None], fb[:, None]
    lengths = fa + fb + 3
    in_a = (pos >= 1) & (pos <= fa_)
    in_b = (pos >= fa_ + 2) & (pos < fa_ + 2 + fb_)
    source = np.where(
        in_a, instances.a_start[:, None] + pos - 1, instances.b_start[:, None] + pos - fa_ - 2
    )
    source = np.where(in_a | in_b, source, 0)
    input_ids = np.where(in_a | in_b, ids.take(source), 0).astype(np.int32)
    rows = np.arange(n)
    input_ids[:, 0] = cls_id
    input_ids[rows, fa + 1] = sep_id
    input_ids[rows, lengths - 1] = sep_id
    segment_ids = ((pos >= fa_ + 2) & (pos < lengths[:, None])).astype(np.int32)

    valid = np.arange(instances.masked_positions.shape[1])[None, :] < instances.num_masked[:, None]
    positions = instances.masked_positions
    labels = np.where(valid, np.take_along_axis(input_ids, positions, 1), 0)
    written = np.where(instances.replacement == KEEP, labels, instances.replacement)
    # Padding slots point at position 0 and write back its [CLS] unchanged.
    np.put_along_axis(input_ids, positions, np.where(valid, written, input_ids[:, :1]), 1)
    return Sequences(
        input_ids,
        segment_ids,
        lengths,
        positions,
        labels.astype(np.int32),
        valid.astype(np.float32),
    )
