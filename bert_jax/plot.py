"""Training curves of a pretraining run, from WORKDIR/metrics.jsonl to a PNG.

    python -m bert_jax.plot WORKDIR [--output PNG]

Four panels over the step: loss, MLM accuracy and NSP accuracy (train and
eval), and the learning rate. The output (default WORKDIR/curves.png) is
replaced on each run, so it can be re-rendered while training goes on; it
appears only complete (temporary file, then rename).
"""
from __future__ import annotations

import os
import sys
from typing import Sequence

from absl import app, flags
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bert_jax.fileio.atomic_output import atomic_file
from bert_jax.training.metrics_writer import METRICS_FILE, read_metrics

DEFAULT_OUTPUT = "curves.png"
# (panel title, ((metrics.jsonl key, legend label), ...)): MetricsWriter's keys,
# eval rows prefixed `eval_`.
PANELS = (
    ("Loss (MLM + NSP)", (("loss", "train"), ("eval_loss", "eval"))),
    ("MLM accuracy", (("mlm_accuracy", "train"), ("eval_mlm_accuracy", "eval"))),
    ("NSP accuracy", (("nsp_accuracy", "train"), ("eval_nsp_accuracy", "eval"))),
    ("Learning rate", (("learning_rate", "train"),)),
)


def series(rows: Sequence[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows that have `key`, in step order.

    MetricsWriter stores non-finite values as strings ("nan", "inf"); they
    become float NaN/inf, which matplotlib leaves out of the line.
    """
    points = sorted((row["step"], float(row[key])) for row in rows if key in row)
    return [step for step, _ in points], [value for _, value in points]


def plot_metrics(rows: Sequence[dict], output: str, title: str = "") -> None:
    """Renders the PANELS of metrics `rows` to the PNG `output` (replaced if present)."""
    figure = Figure(figsize=(11, 7.5), layout="constrained")
    FigureCanvasAgg(figure)  # headless: no display, no global pyplot state
    figure.suptitle(title)
    for ax, (panel, keys) in zip(figure.subplots(2, 2).flat, PANELS):
        ax.set_title(panel)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        for key, label in keys:
            steps, values = series(rows, key)
            if not steps:
                continue
            # Eval rows are few: markers keep a single evaluation visible.
            is_eval = key.startswith("eval_")
            ax.plot(steps, values, color="C1" if is_eval else "C0", marker="o" if is_eval else None,
                    markersize=4, label=f"{label} (last {values[-1]:.4g})")
        if ax.lines:
            ax.legend(loc="best", fontsize="small")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes,
                    color="gray")
    with atomic_file(output, overwrite=True, mode="wb") as f:
        figure.savefig(f, format="png", dpi=100)


def plot_workdir(workdir: str, output: str | None = None) -> str:
    """Plots WORKDIR/metrics.jsonl to `output` (default WORKDIR/curves.png); returns the path.

    Raises FileNotFoundError if metrics.jsonl is missing and ValueError if it
    holds no rows.
    """
    path = os.path.join(workdir, METRICS_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: WORKDIR must be a pretraining run's workdir")
    rows = read_metrics(workdir)
    if not any(key in row for row in rows for _, keys in PANELS for key, _ in keys):
        raise ValueError(f"{path} holds no metrics rows to plot")
    output = output or os.path.join(workdir, DEFAULT_OUTPUT)
    last_step = max(row["step"] for row in rows)
    plot_metrics(rows, output, title=f"{os.path.abspath(workdir)} (step {last_step})")
    return output


FLAGS = flags.FLAGS


def _define_flags() -> None:
    flags.DEFINE_string("output", None, f"PNG to write (default: WORKDIR/{DEFAULT_OUTPUT}).")


def main(argv: Sequence[str]) -> None:
    """CLI entry point."""
    if len(argv) != 2:
        raise app.UsageError("usage: python -m bert_jax.plot WORKDIR [--output PNG]")
    print(f"wrote {plot_workdir(argv[1], FLAGS.output)}", file=sys.stderr)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
