"""pretraining_instances: G-BERT's pair building, truncation and masking statistics."""
import bisect
import random

import numpy as np
import pytest

from bert_jax import pretraining_instances as pi

CLS, SEP, MASK, VOCAB = 2, 3, 4, 1000


def _documents(num_docs=60, seed=0, max_sentences=30):
    """Synthetic documents: sentence token offsets and document bounds."""
    rng = random.Random(seed)
    offsets, bounds = [0], []
    for _ in range(num_docs):
        first = len(offsets) - 1
        for _ in range(rng.randint(1, max_sentences)):
            offsets.append(offsets[-1] + rng.randint(1, 60))
        bounds.append((first, len(offsets) - 1))
    return offsets, bounds


def _pairs(num_docs=200, max_seq_length=128, seed=0):
    offsets, bounds = _documents(num_docs, seed)
    spans = pi.build_pair_spans(offsets, bounds, list(range(len(bounds))), max_seq_length, 0.1, random.Random(seed))
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, VOCAB, offsets[-1]).astype(np.int32)  # no specials inside text
    return ids, spans, pi.assemble_pairs(ids, spans, max_seq_length, CLS, SEP, rng)


def _truncate_like_gbert(la, lb, max_tokens):
    while la + lb > max_tokens:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return la, lb


def test_trimmed_lengths_equal_gberts_token_by_token_loop():
    la, lb = np.meshgrid(np.arange(1, 70), np.arange(1, 70))
    fa, fb = pi._trimmed_lengths(la.ravel(), lb.ravel(), 61)
    expected = [_truncate_like_gbert(a, b, 61) for a, b in zip(la.ravel(), lb.ravel())]
    assert list(zip(fa.tolist(), fb.tolist())) == expected


def test_segments_a_and_real_b_tile_every_document_once():
    offsets, bounds = _documents()
    spans = pi.build_pair_spans(offsets, bounds, list(range(len(bounds))), 128, 0.1, random.Random(1))
    covered = np.zeros(offsets[-1], int)
    for a0, a1 in zip(spans.a_start, spans.a_end):
        covered[a0:a1] += 1
    real = ~spans.is_random_next
    for b0, b1 in zip(spans.b_start[real], spans.b_end[real]):
        covered[b0:b1] += 1
    assert (covered == 1).all()  # unused sentences were put back, none lost or repeated


def test_random_next_segments_come_from_another_document():
    offsets, bounds = _documents()
    spans = pi.build_pair_spans(offsets, bounds, list(range(len(bounds))), 128, 0.1, random.Random(2))
    starts = [offsets[first] for first, _ in bounds]
    doc_of = lambda token: bisect.bisect_right(starts, token) - 1  # noqa: E731
    rand = spans.is_random_next
    assert 0.45 < rand.mean() < 0.65
    for a0, b0, b1 in zip(spans.a_start[rand], spans.b_start[rand], spans.b_end[rand]):
        assert doc_of(b0) != doc_of(a0) and doc_of(b1 - 1) == doc_of(b0)


def test_assembled_pairs_have_gberts_layout():
    _, spans, pairs = _pairs()
    n, s = pairs.input_ids.shape
    assert s == 128 and (pairs.lengths <= 128).all() and (pairs.lengths >= 5).all()
    rows = np.arange(n)
    assert (pairs.input_ids[:, 0] == CLS).all()
    assert (pairs.input_ids[rows, pairs.first_sep] == SEP).all()
    assert (pairs.input_ids[rows, pairs.lengths - 1] == SEP).all()
    assert ((pairs.input_ids == SEP).sum(axis=1) == 2).all()
    pos = np.arange(s)
    assert (pairs.input_ids[pos >= pairs.lengths[:, None]] == 0).all()
    second = (pos > pairs.first_sep[:, None]) & (pos < pairs.lengths[:, None])
    np.testing.assert_array_equal(pairs.segment_ids, second.astype(np.int32))


def test_masking_statistics_match_gbert():
    _, _, pairs = _pairs(num_docs=600)
    masked = pi.mask_pairs(pairs, 20, 0.15, VOCAB, MASK, np.random.default_rng(0))
    real = masked.weights > 0
    expected = np.minimum(20, np.maximum(1, np.rint(pairs.lengths * 0.15)))
    np.testing.assert_array_equal(real.sum(axis=1), expected)
    n = len(pairs.lengths)
    rows = np.repeat(np.arange(n), real.sum(axis=1))
    positions = masked.positions[real]
    padded = np.where(real, masked.positions, 10**6 + np.arange(20))
    assert (np.diff(padded, axis=1) > 0).all()  # sorted and distinct
    np.testing.assert_array_equal(masked.label_ids[real], pairs.input_ids[rows, positions])
    now = masked.input_ids[rows, positions]
    assert abs((now == MASK).mean() - 0.8) < 0.01
    assert abs((now == masked.label_ids[real]).mean() - 0.1 - 0.1 / VOCAB) < 0.01
    assert not np.isin(pairs.input_ids[rows, positions], [CLS, SEP]).any()  # specials never chosen
    untouched = np.ones_like(pairs.input_ids, bool)
    untouched[rows, positions] = False
    np.testing.assert_array_equal(masked.input_ids[untouched], pairs.input_ids[untouched])
    assert (masked.positions[~real] == 0).all() and (masked.label_ids[~real] == 0).all()


def test_whole_word_masking_never_splits_a_word_and_decides_per_word():
    ids, _, pairs = _pairs(num_docs=300)
    continuation = np.zeros(VOCAB, bool)
    continuation[np.random.default_rng(3).choice(np.arange(10, VOCAB), VOCAB // 2, replace=False)] = True
    masked = pi.mask_pairs(pairs, 20, 0.15, VOCAB, MASK, np.random.default_rng(1), continuation)
    real = masked.weights > 0
    budget = np.minimum(20, np.maximum(1, np.rint(pairs.lengths * 0.15)))
    assert (real.sum(axis=1) <= budget).all() and real.sum() > 0.9 * budget.sum()
    n, s = pairs.input_ids.shape
    chosen = np.zeros((n, s), bool)
    chosen[np.repeat(np.arange(n), real.sum(axis=1)), masked.positions[real]] = True
    rows = np.arange(n)
    assert not (chosen[:, 0] | chosen[rows, pairs.first_sep] | chosen[rows, pairs.lengths - 1]).any()
    words = 0
    for i in range(n):
        row, length, sep = pairs.input_ids[i], pairs.lengths[i], pairs.first_sep[i]
        start = 1
        for p in range(2, length + 1):  # split the row into words
            ends_word = p == length or p in (sep, sep + 1) or p == length - 1 or not continuation[row[p]]
            if not ends_word:
                continue
            if start not in (sep, length - 1):
                word = chosen[i, start:p]
                assert word.all() or not word.any(), (i, start, p)  # whole words only
                if word.all():
                    words += 1
                    now = masked.input_ids[i, start:p]
                    kinds = {"mask" if t == MASK else "kept" if t == o else "random" for t, o in zip(now, row[start:p])}
                    assert len(kinds - {"kept"}) <= 1, kinds  # one 80/10/10 draw per word
            start = p
    assert words > 1000


@pytest.mark.parametrize("max_seq_length", [8, 512])
def test_extreme_lengths_still_fit(max_seq_length):
    _, _, pairs = _pairs(num_docs=50, max_seq_length=max_seq_length)
    masked = pi.mask_pairs(pairs, 20, 0.15, VOCAB, MASK, np.random.default_rng(0))
    assert (pairs.lengths <= max_seq_length).all()
    assert masked.positions.shape[1] == 20
