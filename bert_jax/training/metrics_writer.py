"""Training metrics to `WORKDIR/metrics.jsonl` and TensorBoard event files.

metrics.jsonl has one JSON object per logged step (train metrics) and per
evaluation (keys prefixed `eval_`), each with its `step`. When a run resumes
from a checkpoint at step S, rows after S (written by the killed run past its
last checkpoint) are dropped, so the file describes one consistent run.
"""
from __future__ import annotations

import json
import math
import os

from bert_jax.fileio.atomic_output import atomic_file

METRICS_FILE = "metrics.jsonl"


def read_metrics(workdir: str) -> list[dict]:
    """All rows of WORKDIR/metrics.jsonl."""
    path = os.path.join(workdir, METRICS_FILE)
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                # A kill can cut the last line short; anything else is damage.
                if f.read().strip():
                    raise ValueError(f"{path}:{number}: not a JSON object") from None
    return rows


def _plain(value):
    value = float(value)
    return value if math.isfinite(value) else str(value)


class MetricsWriter:
    """Appends metrics rows and mirrors them to TensorBoard."""

    def __init__(self, workdir: str, resume_step: int = 0, tensorboard: bool = True,
                 enabled: bool = True):
        """enabled=False (every process but the first of a job) writes nothing."""
        self.enabled = enabled
        if not enabled:
            return
        os.makedirs(workdir, exist_ok=True)
        self.path = os.path.join(workdir, METRICS_FILE)
        kept = [row for row in read_metrics(workdir) if row.get("step", 0) <= resume_step]
        with atomic_file(self.path, overwrite=True) as f:
            for row in kept:
                f.write(json.dumps(row) + "\n")
        self._file = open(self.path, "a")
        self._summary = None
        if tensorboard:
            import tensorflow as tf  # only for the event files

            self._summary = tf.summary.create_file_writer(os.path.join(workdir, "tensorboard"))

    def write(self, step: int, metrics: dict) -> None:
        """One row: {"step": step, **metrics} (scalars)."""
        if not self.enabled:
            return
        row = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._summary is not None:
            import tensorflow as tf

            with self._summary.as_default(step=int(step)):
                for key, value in metrics.items():
                    tf.summary.scalar(key, float(value))
            self._summary.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        self._file.close()
        if self._summary is not None:
            self._summary.close()
