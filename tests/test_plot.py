"""plot: training curves from metrics.jsonl to a PNG."""
import json
import math
import subprocess
import sys

import pytest
from matplotlib import image

from bert_jax.plot import plot_workdir, series

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_metrics(workdir, rows):
    workdir.mkdir(exist_ok=True)
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def training_rows(num_steps=50, eval_every=20):
    rows = []
    for step in range(1, num_steps + 1):
        rows.append({"step": step, "loss": 10.0 / step, "mlm_loss": 9.0 / step,
                     "mlm_accuracy": step / (2 * num_steps), "nsp_accuracy": 0.5 + step / 200,
                     "learning_rate": 1e-4 * min(step / 10, 1), "grad_norm": 1.0,
                     "sequences_per_second": 100.0})
        if step % eval_every == 0:
            rows.append({"step": step, "eval_loss": 11.0 / step, "eval_mlm_loss": 10.0 / step,
                         "eval_mlm_accuracy": step / (3 * num_steps), "eval_nsp_loss": 0.6,
                         "eval_nsp_accuracy": 0.5 + step / 300})
    return rows


def test_cli_writes_a_png_into_the_workdir(tmp_path):
    write_metrics(tmp_path / "run", training_rows())
    subprocess.run([sys.executable, "-m", "bert_jax.plot", str(tmp_path / "run")], check=True)
    png = tmp_path / "run" / "curves.png"
    assert png.read_bytes()[:8] == PNG_MAGIC
    height, width, _ = image.imread(png).shape
    assert (width, height) == (1100, 750)  # figsize (11, 7.5) at 100 dpi
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["curves.png", "metrics.jsonl"]


def test_output_flag_and_train_only_runs(tmp_path):
    rows = [row for row in training_rows() if "loss" in row]  # no evaluation yet
    write_metrics(tmp_path / "run", rows)
    out = tmp_path / "plots" / "run.png"
    subprocess.run([sys.executable, "-m", "bert_jax.plot", str(tmp_path / "run"),
                    "--output", str(out)], check=True)
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert not (tmp_path / "run" / "curves.png").exists()


def test_replotting_replaces_the_png(tmp_path):
    write_metrics(tmp_path, training_rows(num_steps=10))
    first = plot_workdir(str(tmp_path))
    before = (tmp_path / "curves.png").read_bytes()
    write_metrics(tmp_path, training_rows(num_steps=40))
    assert plot_workdir(str(tmp_path)) == first
    assert (tmp_path / "curves.png").read_bytes() != before


def test_non_finite_values_become_gaps():
    rows = [{"step": 2, "loss": "nan"}, {"step": 1, "loss": 3.0}, {"step": 3, "eval_loss": 1.0}]
    steps, values = series(rows, "loss")
    assert steps == [1, 2] and values[0] == 3.0 and math.isnan(values[1])


def test_missing_or_empty_metrics_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl not found"):
        plot_workdir(str(tmp_path))
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="metrics.jsonl holds no metrics rows"):
        plot_workdir(str(tmp_path))
    assert not (tmp_path / "curves.png").exists()


def test_cli_error_names_the_missing_file(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bert_jax.plot", str(tmp_path / "nowhere")],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert f"{tmp_path / 'nowhere' / 'metrics.jsonl'} not found" in result.stderr
