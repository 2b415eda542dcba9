"""pretraining_instances: G-BERT's instances on G-BERT's random stream, and masking statistics."""

import random

import numpy as np
import pytest

from bert_jax.pretraining import instances as pi

PAD, UNK, CLS, SEP, MASK, VOCAB = 0, 1, 2, 3, 4, 1000


def _documents(num_docs=60, seed=0, max_sentences=30, max_sentence_tokens=60):
    """Synthetic documents: lists of sentences of token ids (no specials)."""
    rng = random.Random(seed)
    return [
        [
            [rng.randrange(10, VOCAB) for _ in range(rng.randint(1, max_sentence_tokens))]
            for _ in range(rng.randint(1, max_sentences))
        ]
        for _ in range(num_docs)
    ]


def _flatten(documents):
    """-> (flat ids, sentence offsets, document bounds), as pretraining_shard makes them."""
    ids, offsets, bounds = [], [0], []
    for document in documents:
        first = len(offsets) - 1
        for sentence in document:
            ids.extend(sentence)
            offsets.append(len(ids))
        bounds.append((first, len(offsets) - 1))
    return np.asarray(ids, np.int32), offsets, bounds


def _ours(documents, options, seed, continuation=None):
    ids, offsets, bounds = _flatten(documents)
    instances = pi.create_instances(
        offsets,
        bounds,
        options,
        random.Random(seed),
        MASK,
        np.arange(VOCAB, dtype=np.int32),
        ids,
        continuation,
    )
    return instances, pi.assemble(ids, instances, options.max_seq_length, CLS, SEP)


def _gbert(documents, options, seed):
    """google-research/bert's create_training_instances, written plainly over token ids.

    Returns (tokens, segment_ids, is_random_next, [(position, label)]) per
    instance, in G-BERT's final order.
    """
    rng = random.Random(seed)
    documents = list(documents)
    rng.shuffle(documents)
    max_num_tokens = options.max_seq_length - 3
    instances = []
    for _ in range(options.dupe_factor):
        for index, document in enumerate(documents):
            target = max_num_tokens
            if rng.random() < options.short_seq_prob:
                target = rng.randint(2, max_num_tokens)
            chunk, length, i = [], 0, 0
            while i < len(document):
                chunk.append(document[i])
                length += len(document[i])
                if i == len(document) - 1 or length >= target:
                    a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                    tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
                    tokens_b = []
                    if len(chunk) == 1 or rng.random() < 0.5:
                        is_random = True
                        for _ in range(10):
                            other = rng.randint(0, len(documents) - 1)
                            if other != index:
                                break
                        other_doc = documents[other]
                        for sentence in other_doc[rng.randint(0, len(other_doc) - 1) :]:
                            tokens_b.extend(sentence)
                            if len(tokens_b) >= target - len(tokens_a):
                                break
                        i -= len(chunk) - a_end
                    else:
                        is_random = False
                        tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
                    while len(tokens_a) + len(tokens_b) > max_num_tokens:
                        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
                        if rng.random() < 0.5:
                            del longer[0]
                        else:
                            longer.pop()
                    tokens = [CLS, *tokens_a, SEP, *tokens_b, SEP]
                    segments = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                    candidates = [p for p, t in enumerate(tokens) if t not in (CLS, SEP)]
                    rng.shuffle(candidates)
                    num_to_predict = min(
                        options.max_predictions_per_seq,
                        max(1, int(round(len(tokens) * options.masked_lm_prob))),
                    )
                    output, masked = list(tokens), []
                    for p in candidates[:num_to_predict]:
                        if rng.random() < 0.8:
                            output[p] = MASK
                        elif rng.random() >= 0.5:
                            output[p] = rng.randint(0, VOCAB - 1)
                        masked.append((p, tokens[p]))
                    instances.append((output, segments, is_random, sorted(masked)))
                    chunk, length = [], 0
                i += 1
    rng.shuffle(instances)
    return instances


@pytest.mark.parametrize(
    "options",
    [
        pi.InstanceOptions(dupe_factor=2),
        # short sequences, heavy truncation, more masking, a small cap
        pi.InstanceOptions(
            max_seq_length=24,
            max_predictions_per_seq=7,
            masked_lm_prob=0.3,
            short_seq_prob=0.5,
            dupe_factor=3,
        ),
    ],
)
def test_instances_are_google_berts_one_for_one(options):
    documents = _documents(num_docs=40, seed=1)
    documents.append([[11, 12, 13]])  # a one-sentence document: always a random B
    instances, seq = _ours(documents, options, seed=12345)
    expected = _gbert(documents, options, seed=12345)
    assert len(instances) == len(expected) > 100
    s = options.max_seq_length
    for row, (tokens, segments, is_random, masked) in enumerate(expected):
        n = len(tokens)
        assert seq.input_ids[row].tolist() == tokens + [PAD] * (s - n), row
        assert seq.segment_ids[row].tolist() == segments + [0] * (s - n), row
        assert bool(instances.is_random_next[row]) == is_random
        k = len(masked)
        assert seq.masked_lm_positions[row, :k].tolist() == [p for p, _ in masked]
        assert seq.masked_lm_ids[row, :k].tolist() == [label for _, label in masked]
        assert seq.masked_lm_weights[row].tolist() == [1.0] * k + [0.0] * (
            options.max_predictions_per_seq - k
        )
        assert not seq.masked_lm_positions[row, k:].any() and not seq.masked_lm_ids[row, k:].any()


@pytest.mark.parametrize("length", [0, 1, 2, 3, 64, 65, 127, 1024, 1025, 3000])
def test_shuffle_is_pythons_permutation_and_stream(length):
    ours, theirs = random.Random(length), random.Random(length)
    x, y = list(range(length)), list(range(length))
    pi.shuffle(x, ours.getrandbits)
    theirs.shuffle(y)
    assert x == y
    assert ours.random() == theirs.random()  # the same words consumed


def _masking_sample(num_docs=600, continuation=None):
    documents = _documents(num_docs, seed=3)
    options = pi.InstanceOptions(dupe_factor=1, do_whole_word_mask=continuation is not None)
    return _ours(documents, options, seed=0, continuation=continuation)


def test_masking_statistics():
    instances, seq = _masking_sample()
    real = seq.masked_lm_weights > 0
    expected = np.minimum(20, np.maximum(1, np.rint(seq.lengths * 0.15)))
    np.testing.assert_array_equal(real.sum(axis=1), expected)  # 15% of the length, capped
    rows = np.repeat(np.arange(len(instances)), real.sum(axis=1))
    positions = seq.masked_lm_positions[real]
    padded = np.where(real, seq.masked_lm_positions, 10**6 + np.arange(20))
    assert (np.diff(padded, axis=1) > 0).all()  # sorted and distinct
    assert not np.isin(seq.masked_lm_ids[real], [CLS, SEP]).any()  # specials never chosen
    now = seq.input_ids[rows, positions]
    assert abs((now == MASK).mean() - 0.8) < 0.01
    assert abs((now == seq.masked_lm_ids[real]).mean() - 0.1 - 0.1 / VOCAB) < 0.01
    assert len(now) > 50_000


def test_whole_word_masking_never_splits_a_word_and_decides_per_word():
    continuation = np.zeros(VOCAB, bool)
    continuation[
        np.random.default_rng(3).choice(np.arange(10, VOCAB), VOCAB // 2, replace=False)
    ] = True
    instances, seq = _masking_sample(num_docs=300, continuation=continuation)
    real = seq.masked_lm_weights > 0
    budget = np.minimum(20, np.maximum(1, np.rint(seq.lengths * 0.15)))
    assert (real.sum(axis=1) <= budget).all() and real.sum() > 0.9 * budget.sum()
    n, s = seq.input_ids.shape
    chosen = np.zeros((n, s), bool)
    chosen[np.repeat(np.arange(n), real.sum(axis=1)), seq.masked_lm_positions[real]] = True
    original = seq.input_ids.copy()
    original[np.repeat(np.arange(n), real.sum(axis=1)), seq.masked_lm_positions[real]] = (
        seq.masked_lm_ids[real]
    )
    first_sep = instances.a_length + 1
    words = mixed = 0
    for i in range(n):
        row, length, sep = original[i], seq.lengths[i], first_sep[i]
        start = 1
        for p in range(2, length + 1):  # split the row into words; none spans [SEP]
            if p < length - 1 and p not in (sep, sep + 1) and continuation[row[p]]:
                continue
            if start not in (sep, length - 1):
                word = chosen[i, start:p]
                assert word.all() or not word.any(), (i, start, p)  # whole words only
                if word.all() and p - start > 1:
                    words += 1
                    now = seq.input_ids[i, start:p]
                    kinds = {
                        "mask" if t == MASK else "kept" if t == o else "random"
                        for t, o in zip(now, row[start:p])
                    }
                    mixed += len(kinds) > 1
            start = p
    # One 80/10/10 draw per word: its pieces differ in kind only when a random
    # id happens to be [MASK] or the original (2 in 1000); with a draw per
    # piece (G-BERT) over a third of multi-piece words would come out mixed.
    assert words > 1000 and mixed / words < 0.01, (mixed, words)


@pytest.mark.parametrize("max_seq_length", [8, 512])
def test_extreme_lengths_still_fit(max_seq_length):
    options = pi.InstanceOptions(max_seq_length=max_seq_length, dupe_factor=1)
    instances, seq = _ours(_documents(num_docs=50), options, seed=0)
    assert (seq.lengths <= max_seq_length).all() and (instances.a_length >= 1).all()
    assert (instances.b_length >= 1).all() and seq.masked_lm_positions.shape[1] == 20
