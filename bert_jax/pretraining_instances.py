"""Pretraining instances: google-research/bert's sentence pairs and static masking.

The algorithm is that of google-research/bert's create_pretraining_data.py
(G-BERT below); we reproduce its statistics, not its random stream.

Pairs (`build_pair_spans`, `assemble_pairs`), for each document:
* the target length is `max_seq_length - 3`; with probability
  `short_seq_prob` it is `randint(2, max)` instead. Like G-BERT, the draw is
  made once per document (and dupe), not per instance.
* sentences accumulate into a chunk until it holds `target` tokens or the
  document ends; segment A is the first `randint(1, n - 1)` sentences of the
  chunk (all of it if n == 1).
* with probability 0.5, or always if the chunk has one sentence, segment B
  is a random span of another document (starting at a random sentence and
  long enough to fill the target), and the chunk's unused sentences are put
  back; otherwise B is the rest of the chunk.
* the longer side is trimmed one token at a time, from the front or the back
  with probability 0.5 each, until A + B fits `max_seq_length - 3`. We
  compute the trimmed lengths in closed form and draw the number of front
  trims as Binomial(trims, 0.5), which is the same distribution.
* `[CLS] A [SEP] B [SEP]`; segment ids 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`;
  next_sentence_label 0 = B really follows A, 1 = B is random.

Masking (`mask_pairs`):
* num_to_predict = min(max_predictions_per_seq, max(1, round(len * prob)))
  over the real length including [CLS]/[SEP], which are never masked.
* each chosen position becomes [MASK] with probability 0.8, a token id drawn
  uniformly from the whole vocabulary with 0.1, and stays with 0.1.
  Positions are sorted; labels are the original ids; weights 1.0, padding 0.
* whole-word mode chooses whole words (a piece and its continuation pieces),
  in random order, skipping a word that would push past num_to_predict, as
  G-BERT does. DIFFERENCE FROM G-BERT: the 80/10/10 choice is drawn once
  per word and applied to all its pieces; G-BERT draws it per piece, so a
  word could come out half masked, half original (its issue #910). A word
  never spans [SEP].
"""
from __future__ import annotations

import bisect
import dataclasses
import random

import numpy as np

# G-BERT's 80/10/10: [MASK] below 0.8, a random id below 0.9, else unchanged.
_MASK_BELOW = 0.8
_RANDOM_BELOW = 0.9


@dataclasses.dataclass
class PairSpans:
    """Sentence pairs as token spans of a shard's flat id array ([N] each)."""

    a_start: np.ndarray
    a_end: np.ndarray
    b_start: np.ndarray
    b_end: np.ndarray
    is_random_next: np.ndarray  # bool
    short_target: np.ndarray  # bool: built under a shortened target length

    def __len__(self) -> int:
        return len(self.a_start)

    def take(self, index: np.ndarray) -> "PairSpans":
        """The pairs at `index`, in that order."""
        return PairSpans(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))

    @staticmethod
    def concatenate(parts: list["PairSpans"]) -> "PairSpans":
        """All pairs of `parts`, in order."""
        return PairSpans(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(PairSpans)))


def build_pair_spans(
    sentence_offsets: list[int],
    document_bounds: list[tuple[int, int]],
    order: list[int],
    max_seq_length: int,
    short_seq_prob: float,
    rng: random.Random,
) -> PairSpans:
    """Builds G-BERT's sentence pairs for the documents in `order`.

    Args:
      sentence_offsets: token offset of each sentence in the flat id array,
        plus the end; every sentence has at least one token.
      document_bounds: (first sentence, end sentence) of each document.
      order: document indices to build from, in this order; every document
        of `document_bounds` is a candidate for random next segments.
      max_seq_length: tokens per instance, with [CLS] and two [SEP].
      short_seq_prob: probability of a shortened target length per document.
      rng: Python's random.Random (its scalar draws are far cheaper than
        numpy's in this per-instance loop).
    """
    max_num_tokens = max_seq_length - 3
    offs = sentence_offsets
    num_docs = len(document_bounds)
    rand = rng.random

    def randint(low: int, high: int) -> int:
        # Uniform on [low, high] like rng.randint, at a tenth of its cost.
        return low + int(rand() * (high - low + 1))

    columns = [[] for _ in range(6)]
    a_start, a_end, b_start, b_end, is_random, short = columns
    for doc in order:
        first, end = document_bounds[doc]
        target = max_num_tokens
        is_short = rand() < short_seq_prob
        if is_short:
            target = randint(2, max_num_tokens)
        start = first  # first sentence of the current chunk
        while start < end:
            # The chunk ends at the first sentence that brings it to `target`
            # tokens, or at the document's end.
            stop = bisect.bisect_left(offs, offs[start] + target, start + 1, end)
            n = stop - start
            a_n = randint(1, n - 1) if n >= 2 else 1
            a0, a1 = offs[start], offs[start + a_n]
            if n == 1 or rand() < 0.5:
                target_b = target - (a1 - a0)
                for _ in range(10):  # G-BERT's bounded retry for another document
                    other = randint(0, num_docs - 1)
                    if other != doc:
                        break
                other_first, other_end = document_bounds[other]
                b_first = randint(other_first, other_end - 1)
                b0 = offs[b_first]
                b1 = offs[bisect.bisect_left(offs, b0 + target_b, b_first + 1, other_end)]
                random_next = True
                start += a_n  # the chunk's unused sentences go back
            else:
                b0, b1 = a1, offs[stop]
                random_next = False
                start = stop
            a_start.append(a0)
            a_end.append(a1)
            b_start.append(b0)
            b_end.append(b1)
            is_random.append(random_next)
            short.append(is_short)
    ints = [np.asarray(c, np.int64) for c in columns[:4]]
    return PairSpans(*ints, np.asarray(is_random, bool), np.asarray(short, bool))


@dataclasses.dataclass
class Pairs:
    """Assembled `[CLS] A [SEP] B [SEP]` sequences, zero padded."""

    input_ids: np.ndarray  # [N, S] int32
    segment_ids: np.ndarray  # [N, S] int32
    lengths: np.ndarray  # [N] real tokens, specials included
    first_sep: np.ndarray  # [N] position of the [SEP] after A


def _trimmed_lengths(la: np.ndarray, lb: np.ndarray, max_num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Lengths after G-BERT's truncate_seq_pair, in closed form.

    G-BERT removes one token at a time from the longer side (B on ties).
    The longer side first absorbs the excess down to the shorter one's
    length; past that the sides alternate, B first.
    """
    excess = np.maximum(la + lb - max_num_tokens, 0)
    gap = np.abs(la - lb)
    within_gap = excess <= gap
    a_longer = la > lb
    fa = np.where(within_gap & a_longer, la - excess, la)
    fb = np.where(within_gap & ~a_longer, lb - excess, lb)
    rest = excess - gap
    shorter = np.minimum(la, lb)
    fa = np.where(within_gap, fa, shorter - rest // 2)
    fb = np.where(within_gap, fb, shorter - (rest + 1) // 2)
    return fa, fb


def assemble_pairs(
    ids: np.ndarray,
    spans: PairSpans,
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    rng: np.random.Generator,
) -> Pairs:
    """Truncates each pair to fit and lays out `[CLS] A [SEP] B [SEP]`."""
    la = spans.a_end - spans.a_start
    lb = spans.b_end - spans.b_start
    fa, fb = _trimmed_lengths(la, lb, max_seq_length - 3)
    a0 = spans.a_start + rng.binomial(la - fa, 0.5)  # tokens trimmed off the front
    b0 = spans.b_start + rng.binomial(lb - fb, 0.5)

    n = len(spans)
    pos = np.arange(max_seq_length)[None, :]
    fa_, fb_ = fa[:, None], fb[:, None]
    lengths = fa + fb + 3
    in_a = (pos >= 1) & (pos <= fa_)
    in_b = (pos >= fa_ + 2) & (pos < fa_ + 2 + fb_)
    source = np.where(in_a, a0[:, None] + pos - 1, b0[:, None] + pos - fa_ - 2)
    source = np.where(in_a | in_b, source, 0)
    input_ids = np.where(in_a | in_b, ids.take(source), 0).astype(np.int32)
    rows = np.arange(n)
    input_ids[:, 0] = cls_id
    input_ids[rows, fa + 1] = sep_id
    input_ids[rows, lengths - 1] = sep_id
    segment_ids = ((pos >= fa_ + 2) & (pos < lengths[:, None])).astype(np.int32)
    return Pairs(input_ids, segment_ids, lengths, fa + 1)


@dataclasses.dataclass
class MaskedLm:
    """Masked-LM targets, padded to max_predictions_per_seq."""

    input_ids: np.ndarray  # [N, S] int32, with the replacements applied
    positions: np.ndarray  # [N, P] int32, sorted, zero padded
    label_ids: np.ndarray  # [N, P] int32, the original ids
    weights: np.ndarray  # [N, P] float32, 1.0 real, 0.0 padding


def _candidates(pairs: Pairs) -> np.ndarray:
    """[N, S] bool: positions that may be masked (real tokens but specials)."""
    pos = np.arange(pairs.input_ids.shape[1])[None, :]
    return (pos >= 1) & (pos < pairs.lengths[:, None] - 1) & (pos != pairs.first_sep[:, None])


def _choose_tokens(candidates: np.ndarray, num_to_predict: np.ndarray, width: int, rng: np.random.Generator) -> np.ndarray:
    """[N, width] sorted positions of num_to_predict random candidates; S pads."""
    n, s = candidates.shape
    keys = rng.random((n, s), dtype=np.float32)
    keys[~candidates] = 2.0
    width_ = min(width, s)
    best = np.argpartition(keys, width_ - 1, axis=1)[:, :width_]
    best = np.take_along_axis(best, np.argsort(np.take_along_axis(keys, best, 1), axis=1), 1)
    chosen = np.where(np.arange(width_) < num_to_predict[:, None], best, s)
    chosen.sort(axis=1)
    return np.pad(chosen, ((0, 0), (0, width - width_)), constant_values=s)


def _choose_words(
    candidates: np.ndarray, starts: np.ndarray, num_to_predict: np.ndarray, width: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Whole-word choice: ([N, width] sorted positions, [N, width] word start of each)."""
    n, s = candidates.shape
    pos = np.arange(s)
    # the word each candidate belongs to, by its start position (-1: none)
    owner = np.maximum.accumulate(np.where(starts, pos, -1), axis=1)
    owner = np.where(candidates, owner, -1)
    boundary = starts | ~candidates
    next_boundary = np.minimum.accumulate(np.where(boundary, pos, s)[:, ::-1], axis=1)[:, ::-1]
    after = np.concatenate([next_boundary[:, 1:], np.full((n, 1), s)], axis=1)
    word_len = np.where(starts, after - pos, 0)

    keys = np.where(starts, rng.random((n, s)), 2.0)
    order = np.argsort(keys, axis=1)
    lens = np.take_along_axis(word_len, order, 1)
    taken = np.zeros((n, s), bool)
    count = np.zeros(n, np.int64)
    for t in range(s):  # greedy in random word order, skipping words that overflow
        col = lens[:, t]
        if not col.any() or (count >= num_to_predict).all():
            break  # no words left, or every row is full
        take = (col > 0) & (count + col <= num_to_predict)
        taken[:, t] = take
        count += np.where(take, col, 0)
    chosen_start = np.zeros((n, s), bool)
    np.put_along_axis(chosen_start, order, taken, 1)
    covered = (owner >= 0) & np.take_along_axis(chosen_start, np.maximum(owner, 0), 1)
    positions = np.sort(np.where(covered, pos, s), axis=1)[:, :width]
    word = np.take_along_axis(owner, np.minimum(positions, s - 1), 1)
    return positions, word


def mask_pairs(
    pairs: Pairs,
    max_predictions_per_seq: int,
    masked_lm_prob: float,
    vocab_size: int,
    mask_id: int,
    rng: np.random.Generator,
    continuation: np.ndarray | None = None,
) -> MaskedLm:
    """G-BERT's static masking; whole-word mode when `continuation` is given.

    Args:
      continuation: [vocab] bool, True for pieces that continue the previous
        piece's word (WordPiece "##x"); None masks single pieces.
    """
    ids = pairs.input_ids.copy()
    n, s = ids.shape
    width = max_predictions_per_seq
    candidates = _candidates(pairs)
    # Python's round() and np.rint both round half to even.
    num_to_predict = np.minimum(width, np.maximum(1, np.rint(pairs.lengths * masked_lm_prob).astype(np.int64)))
    num_to_predict = np.minimum(num_to_predict, candidates.sum(axis=1))
    if continuation is None:
        positions = _choose_tokens(candidates, num_to_predict, width, rng)
        draw = rng.random((n, width))
    else:
        prev = np.concatenate([np.zeros((n, 1), bool), candidates[:, :-1]], axis=1)
        starts = candidates & ~(continuation[ids] & prev)
        positions, word = _choose_words(candidates, starts, num_to_predict, width, rng)
        draw = np.take_along_axis(rng.random((n, s)), np.maximum(word, 0), 1)  # one draw per word
    valid = positions < s
    positions = np.where(valid, positions, 0)
    labels = np.take_along_axis(ids, positions, 1)
    random_ids = rng.integers(0, vocab_size, (n, width), dtype=np.int32)
    replaced = np.where(draw < _MASK_BELOW, mask_id, np.where(draw < _RANDOM_BELOW, random_ids, labels))
    # Padding slots point at position 0 and write back its [CLS] unchanged.
    np.put_along_axis(ids, positions, np.where(valid, replaced, ids[:, :1]), 1)
    return MaskedLm(
        input_ids=ids,
        positions=positions.astype(np.int32),
        label_ids=np.where(valid, labels, 0).astype(np.int32),
        weights=valid.astype(np.float32),
    )
