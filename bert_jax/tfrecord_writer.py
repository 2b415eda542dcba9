"""Fast, TensorFlow-free writing of `tf.train.Example` TFRecords.

Serializing instances one by one through the protobuf classes and
`tf.io.TFRecordWriter` costs more than building them, and importing TensorFlow
alone takes seconds per process. The wire formats are small, so this module
writes them with numpy, a whole batch of records at a time:

* `encode_examples`: N `tf.train.Example` messages whose features are all
  fixed-length int64 or float32 lists (the pretraining format of
  google-research/bert). `tf.io.parse_single_example` reads them back.
* `frame_records`: TFRecord framing, i.e. per record
  `uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)`,
  with CRC-32C (Castagnoli) computed by table lookups.

Protobuf layout written (field number, wire type):
  Example{1: Features{1: map entry{1: key, 2: Feature{
      2: FloatList{1: packed float} | 3: Int64List{1: packed varint}}}}}
"""
from __future__ import annotations

import functools

import numpy as np

_CRC32C_POLY = 0x82F63B78  # reflected Castagnoli polynomial
_MASK_DELTA = 0xA282EAD8  # TFRecord's CRC masking constant
_MAX_VARINT_BYTES = 5  # enough for values below 2**35 (ids, lengths)


def varint_length(values: np.ndarray) -> np.ndarray:
    """Bytes needed to varint-encode each non-negative value (1 to 5)."""
    v = values.astype(np.int64, copy=False)
    return (1 + (v >= 1 << 7) + (v >= 1 << 14) + (v >= 1 << 21) + (v >= 1 << 28)).astype(np.int64)


def _varint_planes(values: np.ndarray, width: int) -> np.ndarray:
    """[..., width] uint8: the varint bytes of each value, zero beyond its length."""
    v = values.astype(np.int64, copy=False)
    planes = np.empty(values.shape + (width,), np.uint8)
    for i in range(width):
        chunk = (v >> (7 * i)) & 0x7F
        more = v >= 1 << (7 * (i + 1))
        planes[..., i] = chunk | (more << 7)
    return planes


class _RecordLayout:
    """Accumulates byte columns of a batch of variable-length records.

    Each part is a [N, W] uint8 matrix plus a [N, W] validity mask; the record
    is the concatenation of the valid bytes of all parts, in order. Varints
    make every record a different length, and one boolean compaction at the
    end turns the padded matrices into back-to-back records.
    """

    def __init__(self, n: int):
        self.n = n
        self.bytes: list[np.ndarray] = []
        self.valid: list[np.ndarray] = []

    def add_varints(self, values: np.ndarray) -> None:
        """Appends varint-encoded columns; `values` is [N, L] or [N]."""
        values = values.reshape(self.n, -1).astype(np.int64, copy=False)
        if values.size and values.min() < 0:
            raise ValueError("negative values are not supported")
        width = int(varint_length(values.max(initial=0)))
        planes = _varint_planes(values, width)  # [N, L, width]
        lengths = varint_length(values)
        self.bytes.append(planes.reshape(self.n, -1))
        self.valid.append((np.arange(width) < lengths[..., None]).reshape(self.n, -1))

    def add_constant(self, data: bytes) -> None:
        """Appends the same raw bytes to every record."""
        row = np.frombuffer(data, np.uint8)
        self.bytes.append(np.broadcast_to(row, (self.n, row.size)))
        self.valid.append(np.ones((self.n, row.size), bool))

    def add_raw(self, raw: np.ndarray) -> None:
        """Appends raw bytes ([N, W] uint8) to every record."""
        self.bytes.append(raw)
        self.valid.append(np.ones(raw.shape, bool))

    def compact(self) -> tuple[np.ndarray, np.ndarray]:
        """Returns (data uint8 [total], offsets int64 [N + 1])."""
        data = np.concatenate(self.bytes, axis=1)
        valid = np.concatenate(self.valid, axis=1)
        offsets = np.zeros(self.n + 1, np.int64)
        np.cumsum(valid.sum(axis=1), out=offsets[1:])
        return data[valid], offsets


def _key_header(name: str) -> bytes:
    key = name.encode()
    assert len(key) < 128, name
    return bytes([0x0A, len(key)]) + key


def encode_examples(features: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Serializes N `tf.train.Example` protos with the given features.

    Args:
      features: name -> [N, L] array; integer arrays become int64 lists
        (values must be non-negative), float arrays become float32 lists.
        The map entries are written in dict order.

    Returns:
      (data, offsets): record i is `data[offsets[i]:offsets[i + 1]]`.
    """
    n = len(next(iter(features.values())))
    # Lengths are built inside out: payload -> list -> Feature -> map entry.
    entries = []
    for name, values in features.items():
        values = np.asarray(values).reshape(n, -1)
        if np.issubdtype(values.dtype, np.floating):
            payload = np.ascontiguousarray(values, dtype="<f4").view(np.uint8)  # [N, 4L]
            payload_len = np.full(n, payload.shape[1], np.int64)
            kind_tag = 0x12  # Feature.float_list
        else:
            payload = values
            payload_len = varint_length(values).sum(axis=1)
            kind_tag = 0x1A  # Feature.int64_list
        list_len = 1 + varint_length(payload_len) + payload_len
        feature_len = 1 + varint_length(list_len) + list_len
        key = _key_header(name)
        entry_len = len(key) + 1 + varint_length(feature_len) + feature_len
        entries.append((key, kind_tag, payload, payload_len, list_len, feature_len, entry_len))
    features_len = sum(1 + varint_length(e[-1]) + e[-1] for e in entries)

    layout = _RecordLayout(n)
    layout.add_constant(b"\x0a")  # Example.features
    layout.add_varints(features_len)
    for key, kind_tag, payload, payload_len, list_len, feature_len, entry_len in entries:
        layout.add_constant(b"\x0a")  # Features.feature map entry
        layout.add_varints(entry_len)
        layout.add_constant(key + b"\x12")  # entry key, then entry value tag
        layout.add_varints(feature_len)
        layout.add_constant(bytes([kind_tag]))
        layout.add_varints(list_len)
        layout.add_constant(b"\x0a")  # packed `value` field
        layout.add_varints(payload_len)
        if payload.dtype == np.uint8:
            layout.add_raw(payload)
        else:
            layout.add_varints(payload)
    return layout.compact()


@functools.lru_cache(maxsize=None)
def _crc_tables(max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """CRC-32C lookup tables for records of up to `max_length` bytes.

    CRC is linear over GF(2), so the raw CRC (zero initial register) of a
    record is the XOR of one term per byte, depending only on the byte value
    and its distance from the end: `by_distance[d, b]`. The standard initial
    register 0xFFFFFFFF contributes `init_term[length]`. One gather plus one
    XOR-reduction then checksums a whole batch without a per-byte loop.
    """
    byte_table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        byte_table = np.where(byte_table & 1, (byte_table >> 1) ^ _CRC32C_POLY, byte_table >> 1)
    byte_table = byte_table.astype(np.uint32)

    def advance(reg: np.ndarray) -> np.ndarray:  # feed one zero byte
        return byte_table[reg & 0xFF] ^ (reg >> 8)

    by_distance = np.empty((max_length, 256), np.uint32)
    by_distance[0] = byte_table
    init_term = np.empty(max_length + 1, np.uint32)
    init_term[0] = 0xFFFFFFFF
    for d in range(1, max_length + 1):
        init_term[d] = advance(init_term[d - 1 : d])[0]
        if d < max_length:
            by_distance[d] = advance(by_distance[d - 1])
    return by_distance.reshape(-1), init_term


def _table_size(length: int) -> int:
    return max(1024, 1 << int(length - 1).bit_length())


def crc32c(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """CRC-32C of each record `data[offsets[i]:offsets[i + 1]]` (uint32 [N])."""
    lengths = np.diff(offsets)
    n = len(lengths)
    if n == 0:
        return np.zeros(0, np.uint32)
    by_distance, init_term = _crc_tables(_table_size(int(lengths.max(initial=1))))
    record = np.repeat(np.arange(n), lengths)
    distance = offsets[1:][record] - 1 - np.arange(len(data))
    terms = by_distance[distance * 256 + data]
    raw = np.zeros(n, np.uint32)
    nonempty = lengths > 0
    raw[nonempty] = np.bitwise_xor.reduceat(terms, offsets[:-1][nonempty]) if terms.size else 0
    return raw ^ init_term[lengths] ^ np.uint32(0xFFFFFFFF)


def masked_crc32c(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC-32C of each record (uint32 [N])."""
    crc = crc32c(data, offsets).astype(np.uint64)
    return ((((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF).astype(np.uint32)


def frame_records(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wraps each record in TFRecord framing.

    Returns (framed, framed_offsets): framed record i, ready to be written
    to a .tfrecord file, is `framed[framed_offsets[i]:framed_offsets[i + 1]]`.
    """
    lengths = np.diff(offsets)
    n = len(lengths)
    header = np.empty((n, 12), np.uint8)
    header[:, :8] = lengths.astype("<u8").view(np.uint8).reshape(n, 8)
    header[:, 8:] = masked_crc32c(header[:, :8].reshape(-1), np.arange(n + 1) * 8).astype("<u4").view(np.uint8).reshape(n, 4)
    footer = masked_crc32c(data, offsets).astype("<u4").view(np.uint8).reshape(n, 4)

    framed_offsets = offsets + 16 * np.arange(n + 1)
    framed = np.empty(framed_offsets[-1], np.uint8)
    starts = framed_offsets[:-1]
    framed[starts[:, None] + np.arange(12)] = header
    framed[(starts + 12 + lengths)[:, None] + np.arange(4)] = footer
    record = np.repeat(np.arange(n), lengths)
    framed[np.arange(len(data)) + 12 + 16 * record] = data
    return framed, framed_offsets
