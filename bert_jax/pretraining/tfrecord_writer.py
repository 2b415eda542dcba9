"""Fast, TensorFlow-free encoding of `tf.train.Example` TFRecords.

Serializing instances one at a time through the protobuf classes and
`tf.io.TFRecordWriter` costs more than building them, and importing
TensorFlow alone takes seconds and hundreds of MB per process. Both wire
formats are simple, so `encode_tfrecords` writes a whole batch of records with
a handful of numpy operations; the only per-record work is the two CRC-32C
checksums, one google-crc32c (C) call each.

Records hold `tf.train.Example` messages whose features are fixed-length
int64 or float32 lists (the pretraining format of google-research/bert);
`tf.data.TFRecordDataset` + `tf.io.parse_single_example` read them. The
framing is byte-identical to `tf.io.TFRecordWriter`'s; the Example bytes differ
from protobuf's only in the order of the feature map entries, which protobuf
itself leaves unspecified.

Protobuf layout (field number: type):
  Example{1: Features{1: map entry{1: key, 2: Feature{
      2: FloatList{1: packed float32} | 3: Int64List{1: packed varint}}}}}
TFRecord framing per record:
  uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
"""

from __future__ import annotations

import functools

import google_crc32c
import numpy as np

_MASK_DELTA = 0xA282EAD8  # TFRecord's CRC masking constant
_HEADER = 12  # uint64 length + uint32 crc
_FOOTER = 4  # uint32 crc
_TABLE_LIMIT = 1 << 22  # ints below this are varint-encoded by table lookup


def _packed_varints(values: np.ndarray) -> np.ndarray:
    """The varint bytes of each value in [0, 2**28), packed little-endian into a uint32."""
    v = values.astype(np.uint32)
    packed = (v & 0x7F) | ((v & 0x3F80) << 1) | ((v & 0x1FC000) << 2) | ((v & 0xFE00000) << 3)
    for bits, continuation in ((7, 0x80), (14, 0x8000), (21, 0x800000)):
        packed |= (v >= (1 << bits)).astype(np.uint32) * np.uint32(continuation)
    return packed


def varint_length(values: np.ndarray) -> np.ndarray:
    """Bytes needed to varint-encode each value in [0, 2**28) (int32)."""
    v = np.asarray(values)
    out = np.ones(v.shape, np.int32)
    for bits in (7, 14, 21):
        out += v >= (1 << bits)
    return out


# Byte i of entry n is 1 if a varint of n bytes has a byte i: a bool mask of
# 4 bytes viewed as one uint32.
_VALID_BYTES = np.array([0, 0x1, 0x101, 0x10101, 0x1010101], "<u4")


@functools.lru_cache(maxsize=4)
def _varint_table(size: int) -> tuple[np.ndarray, np.ndarray]:
    """(packed varint, valid-byte mask) of every int below `size`, as uint32."""
    values = np.arange(size, dtype=np.uint32)
    return _packed_varints(values), _VALID_BYTES[varint_length(values)]


def _encode_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(packed bytes, valid-byte mask), uint32 each, of ints in [0, 2**28)."""
    top = int(values.max(initial=0))
    if top < _TABLE_LIMIT:  # a gather is much cheaper than the bit arithmetic
        packed, valid = _varint_table(max(1 << 16, 1 << top.bit_length()))
        return packed.take(values), valid.take(values)
    return _packed_varints(values), _VALID_BYTES[varint_length(values)]


def _block_width(values: np.ndarray) -> int:
    """Bytes per value in a column block: 1 if all fit one byte, else a 4-byte slot."""
    return 1 if np.max(values, initial=0) < 128 else 4


class _Rows:
    """A [N, W] byte matrix plus validity mask that becomes N records.

    Varints make every record a different length: each value gets a slot as
    wide as the block's widest value allows (1 or 4 bytes), and one boolean
    compaction at the end turns the padded rows into back-to-back records.
    """

    def __init__(self, n: int, width: int):
        self.bytes = np.empty((n, width), np.uint8)
        self.valid = np.empty((n, width), bool)
        self.col = 0

    def raw(self, data: np.ndarray | bytes) -> None:
        """Appends raw bytes: a bytes constant, or [N, w] uint8."""
        data = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data
        w = data.shape[-1]
        self.bytes[:, self.col : self.col + w] = data
        self.valid[:, self.col : self.col + w] = True
        self.col += w

    def varints(self, values: np.ndarray) -> None:
        """Appends varint-encoded non-negative ints ([N] or [N, L])."""
        n = self.bytes.shape[0]
        values = values.reshape(n, -1)
        if _block_width(values) == 1:  # the byte is the value
            self.raw(values.astype(np.uint8))
            return
        packed, valid = _encode_varints(values)
        cols = slice(self.col, self.col + 4 * values.shape[1])
        # 4-byte slots written as uint32: whole values at a time.
        self.bytes[:, cols].view("<u4")[...] = packed
        self.valid[:, cols].view("<u4")[...] = valid
        self.col += 4 * values.shape[1]


def _masked_crcs(data: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC-32C of each span data[starts[i]:ends[i]], as [N, 4] bytes."""
    crc = np.fromiter(
        map(google_crc32c.value, map(data.__getitem__, map(slice, starts.tolist(), ends.tolist()))),
        np.uint64,
        len(starts),
    )
    masked = (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
    return masked.astype("<u4").view(np.uint8).reshape(-1, 4)


def encode_tfrecords(features: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Serializes N `tf.train.Example` records with TFRecord framing.

    Args:
      features: name -> [N, L] array (N > 0); integer arrays become int64
        lists (values must be in [0, 2**28)), floating arrays float32 lists.
        Map entries are written in dict order.

    Returns:
      (buffer, offsets): framed record i is `buffer[offsets[i]:offsets[i+1]]`;
      `buffer.tobytes()` is a valid .tfrecord file.
    """
    n = len(next(iter(features.values())))
    # Lengths are built inside out: payload -> list -> Feature -> map entry.
    entries = []
    for name, values in features.items():
        values = np.asarray(values).reshape(n, -1)
        if np.issubdtype(values.dtype, np.floating):
            payload = np.ascontiguousarray(values, dtype="<f4").view(np.uint8)  # [N, 4L]
            payload_len = np.full(n, payload.shape[1], np.int32)
            payload_width = payload.shape[1]
            kind_tag = b"\x12"  # Feature.float_list
        else:
            if values.size and (values.min() < 0 or values.max() >= 1 << 28):
                raise ValueError(f"feature {name!r}: int values must be in [0, 2**28)")
            payload = values
            payload_len = varint_length(values).sum(axis=1, dtype=np.int32)
            payload_width = values.shape[1] * _block_width(values)
            kind_tag = b"\x1a"  # Feature.int64_list
        list_len = 1 + varint_length(payload_len) + payload_len
        feature_len = 1 + varint_length(list_len) + list_len
        key = name.encode()
        assert len(key) < 128, name
        # map entry: key tag, key length, key, value tag, value length, value
        entry_len = 2 + len(key) + 1 + varint_length(feature_len) + feature_len
        lengths = (entry_len, feature_len, list_len, payload_len)
        entries.append((key, kind_tag, payload, payload_width, lengths))
    features_len = sum(1 + varint_length(e[-1][0]) + e[-1][0] for e in entries)
    example_len = 1 + varint_length(features_len) + features_len

    # Column widths first, so the byte matrix is allocated once.
    width = _HEADER + 1 + _block_width(features_len) + _FOOTER
    for key, _, _, payload_width, lengths in entries:
        width += 1 + (2 + len(key) + 1) + 1 + 1 + payload_width
        width += sum(_block_width(v) for v in lengths)

    rows = _Rows(n, width)
    rows.raw(bytes(_HEADER))  # filled in below, once the CRCs are known
    rows.raw(b"\x0a")  # Example.features
    rows.varints(features_len)
    for key, kind_tag, payload, _, (entry_len, feature_len, list_len, payload_len) in entries:
        rows.raw(b"\x0a")  # Features.feature map entry
        rows.varints(entry_len)
        rows.raw(bytes([0x0A, len(key)]) + key + b"\x12")  # key, then value tag
        rows.varints(feature_len)
        rows.raw(kind_tag)
        rows.varints(list_len)
        rows.raw(b"\x0a")  # packed `value` field
        rows.varints(payload_len)
        if payload.dtype == np.uint8:
            rows.raw(payload)
        else:
            rows.varints(payload)
    rows.raw(bytes(_FOOTER))
    assert rows.col == width

    buffer = rows.bytes[rows.valid]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(example_len + _HEADER + _FOOTER, out=offsets[1:])
    starts = offsets[:-1]
    data_ends = offsets[1:] - _FOOTER

    # CRCs: one google-crc32c call per record, and one per distinct length.
    header = np.empty((n, _HEADER), np.uint8)
    header[:, :8] = example_len.astype("<u8").view(np.uint8).reshape(n, 8)
    distinct, which = np.unique(example_len, return_inverse=True)
    distinct_bytes = distinct.astype("<u8").tobytes()
    eights = np.arange(len(distinct)) * 8
    header[:, 8:] = _masked_crcs(distinct_bytes, eights, eights + 8)[which]
    buffer[starts[:, None] + np.arange(_HEADER)] = header
    buffer[data_ends[:, None] + np.arange(_FOOTER)] = _masked_crcs(
        buffer.tobytes(), starts + _HEADER, data_ends
    )
    return buffer, offsets
