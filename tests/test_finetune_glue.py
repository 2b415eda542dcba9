"""GLUE fine-tuning end to end on a tiny model and tiny data made here."""
import csv
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics
from flax import nnx
from glue_runs import (
    tiny_config,
    write_checkpoints,
    write_glue_folder,
    write_mnli_folder,
    write_vocab,
)

from bert_jax.checkpoints import flat_params, load_model, read_checkpoint, write_checkpoint
from bert_jax.checkpoints.flat_params import TaskHead
from bert_jax.model import BertForSequenceClassification
from bert_jax.tasks import glue, glue_data
from configs import glue as glue_configs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    return {"checkpoints": write_checkpoints(root / "ckpt"),
            "data": write_glue_folder(root / "data")}


def config_for(arg, tiny, fmt="bert_jax", **overrides):
    config = glue_configs.get_config(arg)
    config.data_dir = tiny["data"]
    config.init_checkpoint = tiny["checkpoints"][fmt]
    config.train_batch_size = 16
    config.eval_batch_size = 16
    config.max_seq_length = 32
    config.length_buckets = [16]
    config.learning_rate = 1e-3
    config.num_train_epochs = 2.0
    config.log_every = 4
    for key, value in overrides.items():
        config[key] = value
    return config


def test_pair_task_end_to_end(tmp_path, tiny):
    results = glue.train_and_evaluate(config_for("mrpc", tiny), str(tmp_path))
    assert results["task"] == "mrpc" and results["main_metric"] == "f1"
    assert 0 <= results["eval_f1"] <= 100 and 0 <= results["eval_accuracy"] <= 100
    assert results["num_train_steps"] == 12  # int(96 / 16 * 2), run_classifier's count
    assert results["train_examples_per_second"] > 0
    # The best checkpoint is a bert_jax folder with its head and task record.
    assert json.loads((tmp_path / "best" / "task.json").read_text())["labels"] == ["0", "1"]
    assert os.path.isdir(tmp_path / "best" / "params")
    # Leaderboard file: header, one row per test example, label strings.
    with open(tmp_path / "predictions" / "MRPC.tsv") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == ["index", "prediction"] and len(rows) == 25
    assert [r[0] for r in rows[1:]] == [str(i) for i in range(24)]
    assert {r[1] for r in rows[1:]} <= {"0", "1"}
    # One evaluation per epoch and a final one, in metrics.jsonl.
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in rows if "eval_f1" in r] == [6, 12]


def test_the_single_sentence_task_learns(tmp_path, tiny):
    """The label is the word good/bad: a tiny model gets it within a few epochs."""
    config = config_for("sst2", tiny, num_train_epochs=15.0)
    results = glue.train_and_evaluate(config, str(tmp_path))
    assert results["eval_accuracy"] >= 80.0, results
    with open(tmp_path / "predictions" / "SST-2.tsv") as f:
        assert len(f.readlines()) == 25


def test_regression_from_a_hf_checkpoint(tmp_path, tiny):
    results = glue.train_and_evaluate(config_for("stsb", tiny, fmt="hf"), str(tmp_path))
    assert results["main_metric"] == "spearman"
    assert {"eval_spearman", "eval_pearson"} <= set(results)
    values = [float(line.split("\t")[1]) for line in
              open(tmp_path / "predictions" / "STS-B.tsv").readlines()[1:]]
    assert len(values) == 24 and np.isfinite(values).all()


def test_cola_without_header_from_a_google_bert_checkpoint(tmp_path, tiny):
    results = glue.train_and_evaluate(config_for("cola", tiny, fmt="tf_v1",
                                                 num_train_epochs=1.0), str(tmp_path))
    assert results["main_metric"] == "mcc" and -100 <= results["eval_mcc"] <= 100


def test_custom_csv_task_with_class_weights(tmp_path, tiny):
    rng = np.random.default_rng(3)
    for split, n in (("train", 64), ("dev", 32)):
        with open(tmp_path / f"{split}.csv", "w") as f:
            f.write("text,category\n")
            for _ in range(n):
                spam = rng.random() < 0.2  # unbalanced
                f.write(f"{'good good movie' if spam else 'bad plot it was'},"
                        f"{'spam' if spam else 'ham'}\n")
    config = config_for("custom,labels=ham|spam", tiny, class_weights=[1.0, 4.0])
    config.custom.update(train_file=str(tmp_path / "train.csv"),
                         eval_file=str(tmp_path / "dev.csv"), text_a="text",
                         label="category", delimiter=",")
    results = glue.train_and_evaluate(config, str(tmp_path / "run"))
    assert results["main_metric"] == "f1"
    weighted = glue.make_loss(glue.task_of(config))
    logits = np.array([[2.0, 0.0], [0.0, 1.0]], np.float32)
    loss, _ = weighted(logits, {"label": np.array([1, 0])})
    ce = -np.log(np.exp(logits) / np.exp(logits).sum(1, keepdims=True))[[0, 1], [1, 0]]
    np.testing.assert_allclose(loss, (4.0 * ce[0] + 1.0 * ce[1]) / 5.0, rtol=1e-5)


def test_killed_run_resumes_and_sigterm_exits_zero(tmp_path, tiny):
    """The CLI: SIGTERM saves and exits 0; the same command finishes the run."""
    args = cli_args(tmp_path, tiny)
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("step 3/"):
            proc.terminate()
            break
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert "preempted: checkpoint at step" in out
    assert not (tmp_path / "eval_results.json").exists()
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resumed from the checkpoint at step" in done.stdout
    assert json.loads((tmp_path / "eval_results.json").read_text())["num_train_steps"] == 12


def test_metrics_equal_scikit_learn_and_scipy():
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    cola = glue_data.compute_metrics(glue_data.get_task("cola"), p, y)
    assert cola["mcc"] == sklearn.metrics.matthews_corrcoef(y, p)
    mrpc = glue_data.compute_metrics(glue_data.get_task("mrpc"), p, y)
    assert mrpc == {"f1": sklearn.metrics.f1_score(y, p),
                    "accuracy": sklearn.metrics.accuracy_score(y, p)}
    s, t = rng.normal(size=200), rng.normal(size=200)
    stsb = glue_data.compute_metrics(glue_data.get_task("stsb"), s, t)
    assert stsb["spearman"] == pytest.approx(scipy.stats.spearmanr(s, t)[0], abs=1e-12)
    assert stsb["pearson"] == pytest.approx(scipy.stats.pearsonr(s, t)[0], abs=1e-12)


@pytest.mark.parametrize("name", sorted(glue_data.TASKS))
def test_leaderboard_files_use_label_strings(tmp_path, name):
    task = glue_data.get_task(name)
    predictions = (np.linspace(0, 5, 7) if task.is_regression
                   else np.arange(7) % len(task.labels))
    path = tmp_path / f"{task.leaderboard_name}.tsv"
    glue_data.write_leaderboard_file(task, str(path), [str(i) for i in range(7)], predictions)
    rows = [line.rstrip("\n").split("\t") for line in open(path)]
    assert rows[0] == ["index", "prediction"] and len(rows) == 8
    if task.is_regression:
        assert [float(r[1]) for r in rows[1:]] == pytest.approx(predictions, abs=1e-3)
    else:
        assert [r[1] for r in rows[1:]] == [task.labels[int(v)] for v in predictions]
    expected = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP",
                "mnli": "MNLI-m", "ax": "MNLI-m", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}
    assert task.leaderboard_name == expected[name]
    tests = glue_data.split_paths(task, str(tmp_path))["test"]
    if name in ("mnli", "ax"):
        assert list(tests) == ["MNLI-m", "MNLI-mm", "AX"]
        assert tests["AX"] == str(tmp_path / "diagnostic" / "diagnostic.tsv")
    else:
        assert tests == {task.leaderboard_name: str(tmp_path / task.folder / "test.tsv")}


def test_bad_rows_name_the_file_and_line(tmp_path):
    task = glue_data.get_task("mrpc")
    path = tmp_path / "train.tsv"
    path.write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta\tb\n0\t3\t4\tonly a\n")
    with pytest.raises(ValueError, match=r"train.tsv:3: 4 columns"):
        glue_data.read_split(task, str(path), with_labels=True)
    path.write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta\tb\nyes\t3\t4\ta\tb\n")
    with pytest.raises(ValueError, match=r"train.tsv:3: unknown label 'yes'"):
        glue_data.read_split(task, str(path), with_labels=True)
    path.write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
    with pytest.raises(ValueError, match="the split is empty"):
        glue_data.read_split(task, str(path), with_labels=True)
    path.write_text("label\ttext\n1\tx\n")
    custom = glue_data.custom_task("mine", "text", None, "category", ("0", "1"),
                                   train_file="train.tsv", eval_file="dev.tsv")
    with pytest.raises(ValueError, match="no column 'category' for the label"):
        glue_data.read_split(custom, str(path), with_labels=True)


def test_bad_configs_name_the_field(tmp_path, tiny):
    with pytest.raises(ValueError, match="unknown GLUE task 'mrcp'.*cola, sst2, mrpc"):
        glue_configs.get_config("mrcp")
    config = config_for("mrpc", tiny)
    config.vocab_file = str(tmp_path / "vocab.txt")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    size = tiny_config().vocab_size
    with pytest.raises(ValueError, match=r"config.vocab_file: .* has 6 tokens but the "
                                         rf"checkpoint's model has vocab_size {size}"):
        glue.train_and_evaluate(config, str(tmp_path / "run"))


@pytest.mark.parametrize("labels", [("entailment", "neutral", "contradiction"), ()])
def test_exported_classifier_gives_the_same_logits_in_transformers(tmp_path, labels):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = tiny_config()
    num = len(labels) or 1
    ours = BertForSequenceClassification(config, num, rngs=nnx.Rngs(3))
    task = TaskHead("BertForSequenceClassification", labels,
                    "single_label_classification" if labels else "regression")
    vocab = write_vocab(tmp_path / "vocab.txt")
    write_checkpoint(str(tmp_path / "best"), "bert_jax", config, flat_params(ours),
                     vocab_file=vocab, do_lower_case=False, task=task)
    subprocess.run([sys.executable, "-m", "bert_jax.convert", "--input", str(tmp_path / "best"),
                    "--input_format", "bert_jax", "--output", str(tmp_path / "hf"),
                    "--output_format", "hf"], cwd=REPO, check=True)
    hf, info = transformers.BertForSequenceClassification.from_pretrained(
        tmp_path / "hf", output_loading_info=True, local_files_only=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    if labels:
        assert [hf.config.id2label[i] for i in range(num)] == list(labels)
    else:
        assert hf.config.problem_type == "regression" and hf.config.num_labels == 1

    rng = np.random.default_rng(0)
    ids = rng.integers(5, config.vocab_size, (3, 12))
    types = (np.arange(12) >= 6).astype(np.int64)[None].repeat(3, 0)
    mask = np.ones((3, 12), np.int64)
    mask[1, 8:] = 0
    expected = np.asarray(ours(ids, types, mask))
    with torch.no_grad():
        got = hf(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                 attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)

    # And back: the Hugging Face folder loads into our classifier with its head.
    again = load_model(str(tmp_path / "hf"), BertForSequenceClassification, num_labels=num)
    np.testing.assert_allclose(np.asarray(again(ids, types, mask)), expected, atol=1e-5)

    # The tokenizer travels: transformers tokenizes the export as we do, cased.
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tokenizer.do_lower_case is False
    assert tokenizer.tokenize("Good movie") == ["[UNK]", "movie"]


def test_tensorflow_datasets_source(tmp_path, tiny):
    """glue/* through tensorflow-datasets (here its mock of a prepared dataset)."""
    tfds = pytest.importorskip("tensorflow_datasets")
    config = config_for("mrpc", tiny, data_source="tfds", data_dir="", num_train_epochs=1.0)
    with tfds.testing.mock_data(num_examples=32, policy=tfds.testing.MockPolicy.USE_CODE):
        results = glue.train_and_evaluate(config, str(tmp_path))
    assert results["num_train_examples"] == 32 and "eval_f1" in results
    rows = open(tmp_path / "predictions" / "MRPC.tsv").read().splitlines()
    assert rows[0] == "index\tprediction" and len(rows) == 33


def test_sweep_runs_the_grid_once_and_reports_the_best_median(tmp_path, tiny):
    config = config_for("sst2,sweep=paper,seeds=0|1", tiny)
    config.sweep.learning_rates = [1e-3, 1e-4]
    config.sweep.batch_sizes = [16]
    config.sweep.epochs = [1.0]
    summary = glue.train_and_evaluate(config, str(tmp_path))
    rows = [json.loads(line) for line in open(tmp_path / "sweep.jsonl")]
    assert sorted(r["trial"] for r in rows) == sorted(
        f"lr{lr:g}_bs16_ep1_seed{s}" for lr in (1e-3, 1e-4) for s in (0, 1))
    by_setting = {}
    for r in rows:
        by_setting.setdefault(r["learning_rate"], []).append(r["eval_accuracy"])
    best_lr = max(by_setting, key=lambda lr: np.median(by_setting[lr]))
    assert summary["best_setting"]["learning_rate"] == best_lr
    assert summary["best_setting_median_eval_accuracy"] == np.median(by_setting[best_lr])
    assert len(open(tmp_path / "predictions" / "SST-2.tsv").readlines()) == 25
    # A restarted sweep runs nothing again.
    again = glue.train_and_evaluate(config, str(tmp_path))
    assert len(open(tmp_path / "sweep.jsonl").readlines()) == 4 and again == summary


def test_mnli_matched_and_mismatched_and_the_diagnostic_set(tmp_path, tiny):
    data = write_mnli_folder(tmp_path / "glue")
    results = glue.train_and_evaluate(config_for("ax", tiny, data_dir=data,
                                                 num_train_epochs=1.0), str(tmp_path / "run"))
    assert results["main_metric"] == "matched_accuracy"
    assert {"eval_matched_accuracy", "eval_mismatched_accuracy"} <= set(results)
    predictions = tmp_path / "run" / "predictions"
    lengths = {name: len(open(predictions / f"{name}.tsv").readlines())
               for name in ("MNLI-m", "MNLI-mm", "AX")}
    assert lengths == {"MNLI-m": 13, "MNLI-mm": 14, "AX": 15}
    labels = {line.split("\t")[1].strip() for line in open(predictions / "AX.tsv").readlines()[1:]}
    assert labels <= {"entailment", "neutral", "contradiction"}


def test_frozen_encoder_trains_the_head_alone(tmp_path, tiny):
    config = config_for("sst2", tiny, freeze_encoder=True, num_train_epochs=1.0)
    glue.train_and_evaluate(config, str(tmp_path))
    before = read_checkpoint(tiny["checkpoints"]["bert_jax"]).params
    after = read_checkpoint(str(tmp_path / "best")).params
    for name, value in after.items():
        if name.startswith("bert/"):
            np.testing.assert_array_equal(value, before[name], err_msg=name)
    assert {k for k in after if not k.startswith("bert/")} == {"classifier/kernel",
                                                                 "classifier/bias"}


def cli_args(workdir, tiny, *extra):
    return [sys.executable, "-m", "bert_jax.finetune_glue", "--config", "configs/glue.py:mrpc",
            "--workdir", str(workdir), f"--config.data_dir={tiny['data']}",
            f"--config.init_checkpoint={tiny['checkpoints']['bert_jax']}",
            "--config.train_batch_size=16", "--config.eval_batch_size=16",
            "--config.max_seq_length=32", "--config.num_train_epochs=2", "--config.log_every=1",
            "--config.checkpoint_every=2", "--config.progress_bar=False", *extra]


def test_kill_9_and_resume_equals_an_uninterrupted_run(tmp_path, tiny):
    subprocess.run(cli_args(tmp_path / "whole", tiny), cwd=REPO, check=True,
                   capture_output=True, timeout=600)
    proc = subprocess.Popen(cli_args(tmp_path / "killed", tiny), cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("step 5/"):
            proc.kill()  # SIGKILL: no chance to save
            break
    proc.wait(timeout=60)
    assert proc.returncode == -9
    done = subprocess.run(cli_args(tmp_path / "killed", tiny), cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    # Checkpoints are every 2 steps and written asynchronously: the kill after step 5
    # leaves step 4, or step 2 if step 4's files were still being written.
    assert re.search(r"resumed from the checkpoint at step [24] ", done.stdout), done.stdout
    whole = json.loads((tmp_path / "whole" / "eval_results.json").read_text())
    resumed = json.loads((tmp_path / "killed" / "eval_results.json").read_text())
    keep = ("eval_f1", "eval_accuracy", "best_step", "final")
    assert {k: resumed[k] for k in keep} == {k: whole[k] for k in keep}
    a = read_checkpoint(str(tmp_path / "whole" / "best")).params
    b = read_checkpoint(str(tmp_path / "killed" / "best")).params
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_two_processes_fine_tune_as_one_job(tmp_path, tiny):
    """Two JAX processes on 127.0.0.1 with two fake devices each: one data-parallel job."""
    from test_multiprocess import free_port

    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    procs = [subprocess.Popen(
        cli_args(tmp_path / "job", tiny, "--coordinator_address", f"127.0.0.1:{port}",
                 "--num_processes", "2", "--process_id", str(i)),
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    assert "step 12/12" in outputs[0] and "step 12/12" not in outputs[1]
    results = json.loads((tmp_path / "job" / "eval_results.json").read_text())
    assert results["num_train_steps"] == 12 and 0 <= results["eval_f1"] <= 100
    assert len(open(tmp_path / "job" / "predictions" / "MRPC.tsv").readlines()) == 25
