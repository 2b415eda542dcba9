"""What a run tells its user: progress lines on stdout, host copies of metrics."""
from __future__ import annotations

import jax
import numpy as np


def report(line: str) -> None:
    """Prints a progress line from the first process only.

    Progress goes to stdout, unfiltered; absl logging is kept for warnings
    (libraries such as Orbax log every save at INFO).
    """
    if jax.process_index() == 0:
        print(line, flush=True)


def host_values(tree):
    """numpy copies of replicated arrays (also when they span several processes)."""
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), tree)


def format_metrics(metrics: dict) -> str:
    """`name value` pairs, 4 decimals."""
    return " ".join(f"{k} {v:.4f}" for k, v in metrics.items())


def format_duration(seconds: float) -> str:
    """0h00m00s."""
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"
