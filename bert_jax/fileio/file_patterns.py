"""Comma-separated lists and globs of input files, as every tool here takes them."""
from __future__ import annotations

import glob
from typing import Sequence


def expand_file_patterns(patterns: str | Sequence[str]) -> list[str]:
    """'a.txt,dir/*.txt' (or a list of such strings) -> files, each glob sorted, order kept.

    Empty items (a trailing comma) are ignored. Paths with a scheme (gs://...)
    go through tf.io.gfile; local ones do not import TensorFlow. Raises
    FileNotFoundError naming the first pattern that matches no file.
    """
    groups = [patterns] if isinstance(patterns, str) else [str(p) for p in patterns]
    items = [p.strip() for group in groups for p in group.split(",") if p.strip()]
    if not items:
        raise FileNotFoundError(f"no input file given: {patterns!r}")
    files = []
    for pattern in items:
        if "://" in pattern:
            import tensorflow as tf

            matches = sorted(tf.io.gfile.glob(pattern))
        else:
            matches = sorted(glob.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"input file pattern {pattern!r} matches no file")
        files.extend(matches)
    return files
