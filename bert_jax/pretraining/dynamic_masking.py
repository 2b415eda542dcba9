"""Masked-LM masking inside tf.data, with google-research/bert's rules.

`mask_batch` masks a parsed batch the way `create_pretraining_data.py`'s
`create_masked_lm_predictions` masks one instance, vectorized over the batch:

- num_to_predict = min(max_predictions_per_seq,
  max(1, round(num_tokens * masked_lm_prob))), counting [CLS]/[SEP] in
  num_tokens as G-BERT does (round half to even, as Python 3's `round`);
- [CLS], [SEP] and padding are never picked;
- words are visited in a random order and taken whole while they fit:
  a word longer than what is left is skipped, later shorter ones may still be
  taken (G-BERT's `continue`); without whole-word masking every token is a word;
- each picked word becomes [MASK] with probability 0.8, stays itself with 0.1,
  and becomes uniformly random ids in [0, vocab_size) with 0.1. G-BERT draws
  this per *piece* even in whole-word mode (its issue #910); we draw it per
  word, so a word is either all [MASK], all kept or all random;
- positions come out sorted, padded to max_predictions_per_seq with weight 0.

Randomness is stateless: everything is a function of the `seed` pair, so the
input pipeline can key it by (seed, batch counter) and stay reproducible across
restarts and iterator checkpoints.
"""
from typing import NamedTuple, Sequence

import numpy as np
import tensorflow as tf


class SpecialIds(NamedTuple):
    """Token ids masking must know about."""

    cls: int
    sep: int
    mask: int
    pad: int

    @classmethod
    def from_vocab(cls, tokens: Sequence[str]) -> "SpecialIds":
        """Looks up [CLS], [SEP], [MASK], [PAD] in a WordPiece vocabulary list."""
        index = {token: i for i, token in enumerate(tokens)}
        return cls(index["[CLS]"], index["[SEP]"], index["[MASK]"], index["[PAD]"])


def continuation_mask(tokens: Sequence[str]) -> np.ndarray:
    """[vocab] bool: True for WordPiece continuation pieces ("##..."), for whole-word masking."""
    return np.array([token.startswith("##") for token in tokens], dtype=bool)


def original_input_ids(features: dict) -> tf.Tensor:
    """Undoes a masked file's masking: input_ids with masked_lm_ids written back.

    Used to re-mask statically masked files dynamically. [B, S] int32.
    """
    real = tf.where(features["masked_lm_weights"] > 0)  # [N, 2]: (row, prediction slot)
    positions = tf.gather_nd(features["masked_lm_positions"], real)  # [N]
    indices = tf.stack([tf.cast(real[:, 0], tf.int32), positions], axis=1)  # [N, 2]: (row, pos)
    return tf.tensor_scatter_nd_update(
        features["input_ids"], indices, tf.gather_nd(features["masked_lm_ids"], real)
    )


def _word_index(candidate: tf.Tensor, is_continuation: tf.Tensor, seq_len: int) -> tf.Tensor:
    """[B, S] index of the word each candidate token belongs to; `seq_len` elsewhere."""
    # A "##" piece continues the word of the token before it, unless that
    # token is not a candidate ([CLS], [SEP]): a word never spans [SEP]. As in
    # static masking (pretraining_instances.py); G-BERT would join a "##"
    # piece that follows [SEP] to the word before the [SEP].
    previous_is_candidate = tf.pad(candidate[:, :-1], [[0, 0], [1, 0]], constant_values=False)
    starts = candidate & (~is_continuation | ~previous_is_candidate)
    word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1
    return tf.where(candidate, word, seq_len)


def _take_words_greedily(sorted_lengths: tf.Tensor, num_to_predict: tf.Tensor) -> tf.Tensor:
    """[B, W] bool: G-BERT's loop over shuffled words, taking each word that still fits."""

    def step(count, length):  # count, length: [B]
        fits = (length > 0) & (count + length <= num_to_predict)
        return count + tf.where(fits, length, 0)

    counts = tf.scan(step, tf.transpose(sorted_lengths), initializer=tf.zeros_like(num_to_predict))
    previous = tf.concat([tf.zeros_like(counts[:1]), counts[:-1]], axis=0)
    return tf.transpose(counts > previous)  # [B, W]: the count grew, so the word was taken


def mask_batch(
    features: dict,
    seed: tf.Tensor,
    *,
    max_predictions_per_seq: int,
    masked_lm_prob: float,
    vocab_size: int,
    special_ids: SpecialIds,
    continuation: tf.Tensor | None = None,
) -> dict:
    """Masks a batch; returns the 7 features of a masked file.

    Args:
      features: int32 `input_ids`, `input_mask` [B, S] (unmasked), plus any
        other features, passed through.
      seed: int64 [2], the stateless RNG seed for this batch.
      max_predictions_per_seq, masked_lm_prob, vocab_size: as in
        create_pretraining_data.py.
      special_ids: ids of [CLS], [SEP], [MASK], [PAD].
      continuation: [vocab] bool, True for "##" pieces: whole-word masking.
        None masks single tokens.
    """
    ids, input_mask = features["input_ids"], features["input_mask"]
    batch_size, seq_len = tf.shape(ids)[0], ids.shape[1]
    candidate = (
        (input_mask > 0) & (ids != special_ids.cls) & (ids != special_ids.sep)
        & (ids != special_ids.pad)
    )
    num_tokens = tf.reduce_sum(input_mask, axis=1)
    num_to_predict = tf.cast(tf.round(tf.cast(num_tokens, tf.float64) * masked_lm_prob), tf.int32)
    num_to_predict = tf.minimum(max_predictions_per_seq, tf.maximum(1, num_to_predict))  # [B]

    if continuation is None:
        is_continuation = tf.zeros_like(candidate)
    else:
        is_continuation = tf.gather(continuation, ids) & candidate
    word = _word_index(candidate, is_continuation, seq_len)  # [B, S]; seq_len = no word
    # [B, S + 1] pieces per word slot; the last slot collects non-candidates.
    rows = tf.range(batch_size)[:, None] * (seq_len + 1)
    word_length = tf.reshape(
        tf.math.unsorted_segment_sum(
            tf.ones_like(word), rows + word, batch_size * (seq_len + 1)
        ),
        [batch_size, seq_len + 1],
    )[:, :seq_len]  # [B, W=S]

    order_seed, action_seed, random_id_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 3)
    )
    shape = [batch_size, seq_len]
    score = tf.random.stateless_uniform(shape, order_seed)
    score = tf.where(word_length > 0, score, -1.0)  # empty word slots go last
    order = tf.argsort(score, axis=1, direction="DESCENDING")  # [B, W] shuffled words
    taken_sorted = _take_words_greedily(tf.gather(word_length, order, batch_dims=1), num_to_predict)
    taken = tf.gather(taken_sorted, tf.argsort(order, axis=1), batch_dims=1)  # [B, W]
    taken = tf.pad(taken, [[0, 0], [0, 1]])  # slot seq_len: "no word", never taken
    selected = tf.gather(taken, word, batch_dims=1)  # [B, S]

    # One 80/10/10 draw per word, shared by its pieces.
    action = tf.gather(
        tf.pad(tf.random.stateless_uniform(shape, action_seed), [[0, 0], [0, 1]]),
        word, batch_dims=1,
    )
    random_ids = tf.random.stateless_uniform(
        shape, random_id_seed, minval=0, maxval=vocab_size, dtype=tf.int32
    )
    masked_ids = tf.where(selected & (action < 0.8), special_ids.mask, ids)
    masked_ids = tf.where(selected & (action >= 0.9), random_ids, masked_ids)

    # Sorted positions: selected ones sort before all others, in position order.
    position = tf.range(seq_len)[None, :]
    slots = tf.sort(tf.where(selected, position, seq_len + position), axis=1)
    slots = slots[:, :max_predictions_per_seq]  # [B, P]
    real = slots < seq_len
    positions = tf.where(real, slots, 0)
    return {
        **features,
        "input_ids": masked_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": tf.where(real, tf.gather(ids, positions, batch_dims=1), 0),
        "masked_lm_weights": tf.cast(real, tf.float32),
    }
