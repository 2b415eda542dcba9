"""Packing fine-tuning examples into full rows: the same batches, far less padding.

A batch of B examples (already chosen by the recipe) is laid out in R rows of
`row_length` tokens, first-fit by decreasing length. Each token knows its
example (`example_ids`, 1-based within the row, 0 for padding), positions
restart at every example, attention stays within an example (a
block-diagonal mask built in the step from `example_ids`), and `cls_index`
points at each example's [CLS] in the flattened rows, in the batch's order, so
per-example features (labels) keep their order. Every example's output equals
the unpacked one's up to float rounding; only the dropout draws differ.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def pack_rows(lengths: np.ndarray, row_length: int) -> list[list[int]]:
    """Example indices per row: first fit by decreasing length (deterministic)."""
    order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    rows: list[list[int]] = []
    room: list[int] = []
    for i in order:
        need = int(lengths[i])
        if need > row_length:
            raise ValueError(f"an example of {need} tokens does not fit a row of {row_length}")
        for r, free in enumerate(room):
            if free >= need:
                rows[r].append(i)
                room[r] -= need
                break
        else:
            rows.append([i])
            room.append(row_length - need)
    return rows


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def pack_batch(batch: dict, row_length: int, row_multiple: int) -> dict:
    """Packs a batch of examples (token features [B, T], example features [B]).

    Returns token features [R, row_length] plus `position_ids`, `example_ids`,
    and example features [B] plus `cls_index` [B]. R is the number of rows
    rounded up to `row_multiple` (few compiled shapes; it must also split over
    the data-parallel devices); extra rows are all padding.
    """
    lengths = np.asarray(batch["length"])
    rows = pack_rows(lengths, row_length)
    num_rows = round_up(len(rows), row_multiple)
    token_keys = [k for k, v in batch.items() if np.ndim(v) >= 2]
    packed = {k: np.zeros((num_rows, row_length), np.asarray(batch[k]).dtype) for k in token_keys}
    position_ids = np.zeros((num_rows, row_length), np.int32)
    example_ids = np.zeros((num_rows, row_length), np.int32)
    cls_index = np.zeros(len(lengths), np.int32)
    for r, members in enumerate(rows):
        offset = 0
        for slot, i in enumerate(members, 1):
            n = int(lengths[i])
            for k in token_keys:
                packed[k][r, offset:offset + n] = batch[k][i, :n]
            position_ids[r, offset:offset + n] = np.arange(n)
            example_ids[r, offset:offset + n] = slot
            cls_index[i] = r * row_length + offset
            offset += n
    out = {k: v for k, v in batch.items() if np.ndim(v) < 2}
    out.update(packed, position_ids=position_ids, example_ids=example_ids, cls_index=cls_index)
    return out


def packed_attention_mask(example_ids: jnp.ndarray) -> jnp.ndarray:
    """bool [R, T, T]: a token attends to the tokens of its own example only."""
    same = example_ids[:, :, None] == example_ids[:, None, :]
    return same & (example_ids[:, None, :] > 0)
