"""GLUE fine-tuning: a task row, a checkpoint and a config in; scores and leaderboard files out.

    from bert_jax.tasks import glue
    glue.train_and_evaluate(config, workdir)   # configs/glue.py:TASK

The task's files are read and encoded (glue_data), the classifier (or STS-B
regressor) on the pooled output is trained by the shared fine-tuning trainer
(training.finetuning), evaluated on dev after every epoch, and the best
checkpoint's predictions on the test files are written in the GLUE
leaderboard's format under WORKDIR/predictions/.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
from typing import Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from bert_jax.checkpoints import read_checkpoint
from bert_jax.checkpoints.flat_params import TaskHead
from bert_jax.fileio.atomic_output import atomic_file
from bert_jax.model import BertForSequenceClassification
from bert_jax.tasks import glue_data
from bert_jax.tokenization import FullTokenizer
from bert_jax.training import finetuning
from bert_jax.training.packing import packed_attention_mask
from bert_jax.training.preemption import Preemption
from bert_jax.training.reporting import report
from bert_jax.training.run_config import check_batch_split, check_positive, fail

PREDICTIONS_DIR = "predictions"


def task_of(config: ml_collections.ConfigDict) -> glue_data.GlueTask:
    """The config's task: a GLUE row, or the user's own (`task = "custom"`)."""
    if config.task != "custom":
        try:
            task = glue_data.get_task(config.task)
        except ValueError as e:
            fail("task", str(e))
        if config.class_weights:
            task = dataclasses.replace(task, class_weights=tuple(config.class_weights))
        return task
    c = config.custom
    for field in ("text_a", "label", "train_file", "eval_file"):
        if not c[field]:
            fail(f"custom.{field}", "is empty; a custom task names its columns and files")
    try:
        return glue_data.custom_task(
            c.name, c.text_a, c.text_b or None, c.label, tuple(c.labels),
            train_file=c.train_file, eval_file=c.eval_file, test_file=c.test_file,
            test_index=c.test_index, delimiter=c.delimiter,
            class_weights=tuple(config.class_weights))
    except ValueError as e:
        fail("class_weights", str(e))


def validate(config: ml_collections.ConfigDict) -> None:
    """Field checks before anything is read (each error names its field)."""
    check_positive(config, "config", ("max_seq_length", "train_batch_size", "eval_batch_size",
                                       "learning_rate", "num_train_epochs", "log_every"))
    check_batch_split("train_batch_size", config.train_batch_size, 1, config.mesh.tensor)
    check_batch_split("eval_batch_size", config.eval_batch_size, 1, config.mesh.tensor)
    if not 0 <= config.warmup_proportion < 1:
        fail("warmup_proportion", f"must be in [0, 1), got {config.warmup_proportion}")
    if not config.init_checkpoint:
        fail("init_checkpoint", "is empty: fine-tuning starts from a pretrained checkpoint")
    if not os.path.exists(config.init_checkpoint):
        fail("init_checkpoint", f"{config.init_checkpoint} does not exist")
    if config.data_source not in ("files", "tfds"):
        fail("data_source", f"{config.data_source!r} is not 'files' or 'tfds'")
    if config.task != "custom" and config.data_source == "files" and not config.data_dir:
        fail("data_dir", "is empty: the folder holding the GLUE task folders (MRPC/, ...)")


def make_loss(task: glue_data.GlueTask):
    """Mean cross-entropy (class-weighted if the task says so), or MSE for regression."""
    weights = jnp.asarray(task.class_weights, jnp.float32) if task.class_weights else None

    def loss(logits, batch):
        logits = logits.astype(jnp.float32)
        if task.is_regression:
            error = logits[:, 0] - batch["label"]
            return jnp.mean(error ** 2), {}
        labels = batch["label"]
        per_example = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
        if weights is None:
            return jnp.mean(per_example), {"accuracy": accuracy}
        w = weights[labels]
        return jnp.sum(w * per_example) / jnp.sum(w), {"accuracy": accuracy}

    return loss


def model_inputs(batch: dict) -> dict:
    """The classifier's arguments from a batch, packed (training) or not."""
    if "example_ids" not in batch:
        return dict(input_ids=batch["input_ids"], token_type_ids=batch["segment_ids"],
                    attention_mask=batch["input_mask"])
    return dict(input_ids=batch["input_ids"], token_type_ids=batch["segment_ids"],
                attention_mask=packed_attention_mask(batch["example_ids"]),
                position_ids=batch["position_ids"], cls_positions=batch["cls_index"])


def _features(examples: glue_data.Examples, tokenizer, max_seq_length: int) -> dict:
    features = glue_data.encode(examples, tokenizer, max_seq_length)
    if examples.labels is not None:
        features["label"] = examples.labels
    return features


@dataclasses.dataclass
class GlueRun:
    """A task's data read and encoded once, ready for one run or a sweep of runs."""

    task: glue_data.GlueTask
    spec: finetuning.FineTuneSpec
    tokenizer: FullTokenizer
    test_sources: dict  # leaderboard name -> file (or tensorflow-datasets split)
    read_examples: Callable  # (source, with_labels, is_test) -> Examples or None


def prepare(config: ml_collections.ConfigDict) -> GlueRun:
    """Checks the config, reads the checkpoint's config and the data, builds the task spec."""
    validate(config)
    task = task_of(config)
    checkpoint = read_checkpoint(config.init_checkpoint)
    model_config = checkpoint.config.replace(dtype=config.dtype)
    tokenizer = finetuning.checkpoint_tokenizer(config, checkpoint)
    if config.data_source == "tfds":
        sources = glue_data.tfds_splits(task)

        def read_examples(source, with_labels, is_test=False):
            return glue_data.read_tfds_split(task, source, with_labels=with_labels,
                                             data_dir=config.tfds_data_dir)
    else:
        sources = glue_data.split_paths(task, config.data_dir)

        def read_examples(source, with_labels, is_test=False):
            if is_test and not os.path.exists(source):
                return None
            return glue_data.read_split(task, source, with_labels=with_labels,
                                        is_test=is_test)

    train = read_examples(sources["train"], True)
    eval_sets = {name: read_examples(source, True) for name, source in sources["eval"].items()}
    eval_features = {name: _features(ex, tokenizer, config.max_seq_length)
                     for name, ex in eval_sets.items()}
    report(f"{task.name}: {len(train)} training examples, "
           + ", ".join(f"{len(ex)} {name}" for name, ex in eval_sets.items()))

    def evaluate(predict) -> dict:
        metrics = {}
        for name, features in eval_features.items():
            predictions = glue_data.predictions_from_logits(task, predict(features))
            scores = glue_data.compute_metrics(task, predictions, features["label"])
            prefix = "" if len(eval_features) == 1 else f"{name}_"
            metrics.update({f"{prefix}{k}": 100.0 * v for k, v in scores.items()})
        return metrics

    main = task.main_metric if len(eval_features) == 1 else (
        f"{next(iter(eval_features))}_{task.main_metric}")
    spec = finetuning.FineTuneSpec(
        model_config=model_config,
        make_model=lambda cfg, rngs: BertForSequenceClassification(cfg, task.num_outputs,
                                                                   rngs=rngs),
        head_prefixes=("classifier/",),
        model_inputs=model_inputs,
        loss=make_loss(task),
        train_features=_features(train, tokenizer, config.max_seq_length),
        evaluate=evaluate,
        main_metric=main,
        init_params=checkpoint.params, vocab_file=config.vocab_file or checkpoint.vocab_file,
        do_lower_case=tokenizer.do_lower_case,
        head=TaskHead("BertForSequenceClassification", task.labels,
                      "regression" if task.is_regression else "single_label_classification"),
        task_name=task.name,
        packable=True)
    return GlueRun(task, spec, tokenizer, sources["test"], read_examples)


def write_test_predictions(run: GlueRun, predict, max_seq_length: int, workdir: str) -> None:
    """WORKDIR/predictions/<Task>.tsv for every test file there is (GLUE's leaderboard format)."""
    for name, source in run.test_sources.items():
        test = run.read_examples(source, False, is_test=True)
        if test is None:
            report(f"no test file {source}: {name}.tsv not written")
            continue
        logits = predict(_features(test, run.tokenizer, max_seq_length))
        if jax.process_index() == 0:
            out = os.path.join(workdir, PREDICTIONS_DIR, f"{name}.tsv")
            glue_data.write_leaderboard_file(run.task, out, test.ids,
                                             glue_data.predictions_from_logits(run.task, logits))
            report(f"wrote {out} ({len(test)} rows)")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Fine-tunes config.task in `workdir` (or sweeps, with config.sweep.enabled).

    Returns WORKDIR/eval_results.json's content ({} when SIGTERM stopped it).
    """
    preemption = Preemption()
    if config.sweep.enabled:
        return sweep(config, workdir, preemption)
    run = prepare(config)
    result = finetuning.run(run.spec, config, workdir, preemption)
    if result.preempted:
        return {}
    write_test_predictions(run, result.predict, config.max_seq_length, workdir)
    return finetuning.read_results(workdir)


SWEEP_ROWS = "sweep.jsonl"
SWEEP_RESULTS = "sweep_results.json"


def sweep_grid(config: ml_collections.ConfigDict) -> list[dict]:
    """The trials of config.sweep: every learning rate x batch size x epochs x seed."""
    s = config.sweep
    return [{"learning_rate": float(lr), "train_batch_size": int(bs),
             "num_train_epochs": float(ep), "seed": int(seed)}
            for lr, bs, ep, seed in itertools.product(s.learning_rates, s.batch_sizes, s.epochs,
                                                      s.seeds)]


def trial_name(trial: dict) -> str:
    return (f"lr{trial['learning_rate']:g}_bs{trial['train_batch_size']}"
            f"_ep{trial['num_train_epochs']:g}_seed{trial['seed']}")


def sweep(config: ml_collections.ConfigDict, workdir: str, preemption: Preemption) -> dict:
    """The BERT paper's grid in one process: one run per trial under WORKDIR/trials/.

    The data are read and encoded once, and trials share compiled steps where
    shapes agree (the learning rate is a step input). Each finished trial is
    a row of WORKDIR/sweep.jsonl; a restarted sweep skips those and resumes
    the interrupted one. The result: the best setting by the median over
    seeds of the main metric (the paper's rule for small tasks), its best run,
    and test predictions from that run's best checkpoint.
    """
    run = prepare(config)
    rows_path = os.path.join(workdir, SWEEP_ROWS)
    rows = _read_rows(rows_path)
    done = {row["trial"] for row in rows}
    compiled = None
    key = f"eval_{run.spec.main_metric}"
    for trial in sweep_grid(config):
        name = trial_name(trial)
        if name in done:
            continue
        trial_config = config.copy_and_resolve_references()
        with trial_config.unlocked():
            trial_config.update(trial)
            trial_config.sweep.enabled = False
        report(f"sweep trial {name}")
        result = finetuning.run(run.spec, trial_config, os.path.join(workdir, "trials", name),
                                preemption, compiled)
        if result.preempted:
            return {}
        compiled = result.compiled
        row = {"trial": name, **trial, **{k: v for k, v in result.best_metrics.items()
                                           if k.startswith("eval_")},
               "best_step": result.best_metrics.get("step")}
        rows.append(row)
        if jax.process_index() == 0:
            with open(rows_path, "a") as f:
                f.write(json.dumps(row) + "\n")
    settings = {}
    for row in rows:
        setting = (row["learning_rate"], row["train_batch_size"], row["num_train_epochs"])
        settings.setdefault(setting, []).append(row)
    best_setting, best_rows = max(settings.items(),
                                  key=lambda item: np.median([r[key] for r in item[1]]))
    best_row = max(best_rows, key=lambda r: r[key])
    summary = {"task": run.task.name, "main_metric": run.spec.main_metric, "trials": len(rows),
               "best_setting": dict(zip(("learning_rate", "train_batch_size",
                                         "num_train_epochs"), best_setting)),
               f"best_setting_median_{key}": float(np.median([r[key] for r in best_rows])),
               "best_trial": best_row}
    best_dir = os.path.join(workdir, "trials", best_row["trial"], finetuning.BEST_DIR)
    predict = finetuning.load_predictor(run.spec, config, best_dir, compiled)
    write_test_predictions(run, predict, config.max_seq_length, workdir)
    if jax.process_index() == 0:
        with atomic_file(os.path.join(workdir, SWEEP_RESULTS), overwrite=True) as f:
            json.dump(summary, f, indent=2, sort_keys=True)
    report(f"sweep: best setting {summary['best_setting']} median {key} "
           f"{summary[f'best_setting_median_{key}']:.2f}; best trial {best_row['trial']} "
           f"{best_row[key]:.2f}")
    return summary


def _read_rows(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
