"""Two JAX processes on 127.0.0.1, two fake CPU devices each, form one pretraining job."""
import os
import socket
import subprocess

import numpy as np
from pretrain_runs import REPO, cli, small_overrides

from bert_jax.checkpoints import bert_jax_folder
from bert_jax.training.metrics_writer import read_metrics


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(workdir, overrides, num_processes=2):
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    procs = [subprocess.Popen(
        cli(workdir, overrides) + ["--coordinator_address", f"127.0.0.1:{port}",
                                   "--num_processes", str(num_processes), "--process_id", str(i)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(num_processes)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    return outputs


def test_two_processes_train_checkpoint_resume_and_export(tmp_path, random_data):
    overrides = small_overrides(random_data, num_steps=6, checkpoint_every=3)
    outputs = run_job(tmp_path, overrides)
    assert "step 6/6" in outputs[0] and "step 6/6" not in outputs[1]  # one process reports
    rows = [r for r in read_metrics(tmp_path) if "loss" in r]
    assert [r["step"] for r in rows] == list(range(1, 7))  # written once, by process 0
    steps = sorted(int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit())
    assert steps == [3, 6]
    # Each process saved its own input position.
    saved = {f.split(".")[0] for f in os.listdir(tmp_path / "checkpoints" / "6" / "data")}
    assert {"process_0-of-2", "process_1-of-2"} <= saved
    first = bert_jax_folder.load(str(tmp_path / "export")).params

    # The same job, two steps longer, resumes from step 6 on both processes.
    overrides["train.num_steps"] = 8
    outputs = run_job(tmp_path, overrides)
    assert "resumed from the checkpoint at step 6" in outputs[0]
    second = bert_jax_folder.load(str(tmp_path / "export")).params
    key = "bert/embeddings/word_embeddings/embedding"
    assert not np.array_equal(first[key], second[key])
    assert all(np.isfinite(v).all() for v in second.values())
