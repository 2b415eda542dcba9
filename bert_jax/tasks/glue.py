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
import os

import jax
import jax.numpy as jnp
import ml_collections
import optax
from absl import logging

from bert_jax.checkpoints import read_checkpoint
from bert_jax.checkpoints.flat_params import TaskHead
from bert_jax.model import BertConfig, BertForSequenceClassification
from bert_jax.tasks import glue_data
from bert_jax.tokenization import FullTokenizer, load_vocab
from bert_jax.training import finetuning
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


def _tokenizer(config, checkpoint_vocab: str | None, checkpoint_do_lower_case: bool | None,
               model_config: BertConfig) -> FullTokenizer:
    vocab_file = config.vocab_file or checkpoint_vocab
    if not vocab_file:
        fail("vocab_file", f"{config.init_checkpoint} has no vocab.txt; set config.vocab_file")
    size = len(load_vocab(vocab_file))
    if size != model_config.vocab_size:
        fail("vocab_file", f"{vocab_file} has {size} tokens but the checkpoint's model has "
             f"vocab_size {model_config.vocab_size}")
    do_lower_case = config.do_lower_case
    if do_lower_case is None:  # not set: the checkpoint's own, else uncased as BERT's default
        do_lower_case = True if checkpoint_do_lower_case is None else checkpoint_do_lower_case
    elif checkpoint_do_lower_case not in (None, do_lower_case):
        logging.warning("config.do_lower_case=%s but %s was trained with do_lower_case=%s",
                        do_lower_case, config.init_checkpoint, checkpoint_do_lower_case)
    return FullTokenizer(vocab_file, do_lower_case=do_lower_case)


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


def _features(examples: glue_data.Examples, tokenizer, max_seq_length: int) -> dict:
    features = glue_data.encode(examples, tokenizer, max_seq_length)
    if examples.labels is not None:
        features["label"] = examples.labels
    return features


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Fine-tunes config.task in `workdir`; returns WORKDIR/eval_results.json's content."""
    preemption = Preemption()
    validate(config)
    task = task_of(config)
    checkpoint = read_checkpoint(config.init_checkpoint)
    model_config = checkpoint.config.replace(dtype=config.dtype)
    tokenizer = _tokenizer(config, checkpoint.vocab_file, checkpoint.do_lower_case, model_config)
    if config.data_source == "tfds":
        paths = glue_data.tfds_splits(task)

        def read_examples(source, with_labels, is_test=False):
            return glue_data.read_tfds_split(task, source, with_labels=with_labels,
                                             data_dir=config.tfds_data_dir)
    else:
        paths = glue_data.split_paths(task, config.data_dir)

        def read_examples(source, with_labels, is_test=False):
            if is_test and not os.path.exists(source):
                return None
            return glue_data.read_split(task, source, with_labels=with_labels,
                                        is_test=is_test)

    train = read_examples(paths["train"], True)
    train_features = _features(train, tokenizer, config.max_seq_length)
    eval_sets = {name: read_examples(source, True) for name, source in paths["eval"].items()}
    eval_features = {name: _features(ex, tokenizer, config.max_seq_length)
                     for name, ex in eval_sets.items()}
    report(f"{task.name}: {len(train)} training examples, "
           + ", ".join(f"{len(ex)} {name}" for name, ex in eval_sets.items()))

    def evaluate(predict) -> dict:
        metrics = {}
        for name, features in eval_features.items():
            logits = predict(features)
            predictions = glue_data.predictions_from_logits(task, logits)
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
        model_inputs=lambda b: dict(input_ids=b["input_ids"], token_type_ids=b["segment_ids"],
                                    attention_mask=b["input_mask"]),
        loss=make_loss(task),
        train_features=train_features,
        evaluate=evaluate,
        main_metric=main,
        vocab_file=config.vocab_file or checkpoint.vocab_file,
        do_lower_case=tokenizer.do_lower_case,
        head=TaskHead("BertForSequenceClassification", task.labels,
                      "regression" if task.is_regression else "single_label_classification"),
        task_name=task.name)
    result = finetuning.run(spec, config, workdir, preemption)

    for name, source in paths["test"].items():
        test = read_examples(source, False, is_test=True)
        if test is None:
            report(f"no test file {source}: {name}.tsv not written")
            continue
        logits = result.predict(_features(test, tokenizer, config.max_seq_length))
        if jax.process_index() == 0:
            out = os.path.join(workdir, PREDICTIONS_DIR, f"{name}.tsv")
            glue_data.write_leaderboard_file(task, out, test.ids,
                                             glue_data.predictions_from_logits(task, logits))
            report(f"wrote {out} ({len(test)} rows)")
    return finetuning.read_results(workdir)

