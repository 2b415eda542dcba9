"""Documents for create_pretraining_data: text files, or a local TFDS dataset.

Text files have google-research/bert's format: UTF-8, one sentence per line,
blank (or whitespace-only) lines between documents. Each file also starts a
new document (G-BERT runs a document on into the next file when a file does
not end with a blank line). Bytes that are not UTF-8 become U+FFFD, which
the tokenizer drops; every such line is counted and the first few are named
(file:line) in the report. A file without text is a warning, not an error.

TFDS: each example's text field is one document, split into sentences by
`sentence_split.split_sentences`. Only datasets already prepared under
`data_dir` are read; nothing is downloaded.

Both readers stream: they yield one document (a list of sentences) at a time.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence

from absl import logging

from bert_jax.fileio.file_patterns import expand_file_patterns
from bert_jax.pretraining.sentence_split import split_sentences

_EXAMPLES_KEPT = 10  # invalid-UTF-8 locations named in the report
_BLOCK_BYTES = 1 << 22  # text files are read and decoded 4 MB at a time


@dataclasses.dataclass
class ReadReport:
    """What the readers saw: counts, and the lines and files they had to skip."""

    sources: int = 0
    lines: int = 0  # text lines, or TFDS examples
    documents: int = 0
    invalid_utf8_lines: int = 0
    invalid_utf8_examples: list[str] = dataclasses.field(default_factory=list)
    empty_sources: list[str] = dataclasses.field(default_factory=list)

    def invalid_utf8(self, where: str) -> None:
        """Counts a line with bytes that are not UTF-8, at `where` (file:line)."""
        self.invalid_utf8_lines += 1
        if len(self.invalid_utf8_examples) < _EXAMPLES_KEPT:
            self.invalid_utf8_examples.append(where)
            logging.warning("%s: invalid UTF-8 replaced with U+FFFD", where)


def resolve_input_files(spec: str | Sequence[str]) -> list[str]:
    """Comma-separated paths and/or globs (or a list of them) -> readable files.

    Raises FileNotFoundError or PermissionError naming the first bad path,
    so a typo fails before any work is done.
    """
    files = expand_file_patterns(spec)
    for path in files:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"input {path!r} is not a file")
        if not os.access(path, os.R_OK):
            raise PermissionError(f"input {path!r} is not readable")
    return files


def _decode(raw: bytes, where: str, report: ReadReport) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        report.invalid_utf8(where)
        return raw.decode("utf-8", "replace")


def _lines(path: str, report: ReadReport) -> Iterator[str]:
    """The lines of a file, split at "\\n" only, as G-BERT's readline does.

    Reads and decodes a block of whole lines at a time (one C call instead of
    one per line); only a block with invalid UTF-8 is decoded line by line,
    to name the lines. "\\n" never occurs inside a UTF-8 sequence, so both
    ways split alike.
    """
    number = 0
    rest = b""
    with open(path, "rb") as f:
        while True:
            block = f.read(_BLOCK_BYTES)
            data = rest + block
            cut = data.rfind(b"\n") + 1 if block else len(data)
            data, rest = data[:cut], data[cut:]
            if data:
                try:
                    lines = data.decode("utf-8").split("\n")
                except UnicodeDecodeError:
                    lines = [
                        _decode(raw, f"{path}:{number + i + 1}", report)
                        for i, raw in enumerate(data.split(b"\n"))
                    ]
                if data.endswith(b"\n"):
                    lines.pop()  # the newline ending the block starts no line
                number += len(lines)
                yield from lines
            if not block:
                return


def read_text_files(paths: Sequence[str], report: ReadReport) -> Iterator[list[str]]:
    """Yields the documents of `paths`, in order, as lists of sentences."""
    for path in paths:
        report.sources += 1
        found_text = False
        document: list[str] = []
        for line in _lines(path, report):
            report.lines += 1
            line = line.strip()
            if line:
                found_text = True
                document.append(line)
            elif document:
                report.documents += 1
                yield document
                document = []
        if document:
            report.documents += 1
            yield document
        if not found_text:
            report.empty_sources.append(path)
            logging.warning("%s holds no text; skipped", path)


def open_tfds_split(name: str, split: str, text_key: str, data_dir: str | None):
    """Opens a prepared TFDS split, failing early with a clear message.

    Returns the tf.data.Dataset. Imports TensorFlow (only this input needs it).
    """
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    try:
        builder = tfds.builder(name, data_dir=data_dir)
        dataset = builder.as_dataset(split=split, shuffle_files=False)
    except Exception as e:  # tfds raises several types for "not prepared"
        raise FileNotFoundError(
            f"TFDS dataset {name!r} split {split!r} is not prepared under "
            f"{data_dir or 'the default data dir'} (we never download; prepare it "
            f"with `tfds build {name}` first): {e}"
        ) from e
    if text_key not in dataset.element_spec:
        raise KeyError(
            f"TFDS dataset {name!r} has no feature {text_key!r}; "
            f"it has {sorted(dataset.element_spec)}"
        )
    return dataset


def read_tfds(dataset, source: str, text_key: str, report: ReadReport) -> Iterator[list[str]]:
    """Yields one document per example of a dataset from `open_tfds_split`."""
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    report.sources += 1
    for index, example in enumerate(tfds.as_numpy(dataset)):
        report.lines += 1
        text = _decode(example[text_key], f"{source}[{index}]", report)
        sentences = split_sentences(text)
        if sentences:
            report.documents += 1
            yield sentences
    if report.documents == 0:
        report.empty_sources.append(source)
        logging.warning("%s holds no text", source)
