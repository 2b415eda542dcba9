"""GLUE (and a user's own sentence or sentence-pair task): files, features, metrics, outputs.

One table row per task (`TASKS`): where its files are, which columns hold the
text and the label, the label strings, the metrics and the leaderboard file.
A user's own TSV/CSV task is one more row built from the config
(`custom_task`). Files follow the original GLUE layout (`CoLA/train.tsv` with
no header, `MNLI/dev_matched.tsv`, ...), read as google-research/bert's
run_classifier reads them: tab-separated, no quoting.

Features follow run_classifier: `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`,
the pair truncated longest-first (from the end) to max_seq_length - 3, segment
ids 0/1. Metrics come from scikit-learn and scipy.
"""
from __future__ import annotations

import csv
import dataclasses
import os
import sys

import numpy as np
import scipy.stats
import sklearn.metrics

from bert_jax.fileio.atomic_output import atomic_file

csv.field_size_limit(sys.maxsize)  # some GLUE rows hold long texts

NLI_LABELS = ("entailment", "neutral", "contradiction")
BINARY_NLI_LABELS = ("entailment", "not_entailment")


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """Where a task's data is and how it is scored. Columns are header names or 0-based indexes."""

    name: str  # as on the command line: configs/glue.py:NAME
    folder: str  # under data_dir, as GLUE's download names it
    text_a: str | int
    text_b: str | int | None  # None: single-sentence task
    label: str | int | None  # None for the test split
    labels: tuple[str, ...]  # label strings; () for regression
    metrics: tuple[str, ...]  # computed on every eval split; the first is the main one
    leaderboard_name: str  # predictions/<leaderboard_name>.tsv
    train_file: str = "train.tsv"
    eval_files: tuple[tuple[str, str], ...] = (("dev", "dev.tsv"),)  # (split name, file)
    # (leaderboard name, file); None: (leaderboard_name, "test.tsv").
    test_files: tuple[tuple[str, str], ...] | None = None
    header: bool = True  # train/dev files start with a header row
    test_text_a: str | int | None = None  # when the test file's columns differ
    test_text_b: str | int | None = None
    test_index: str | int = "index"  # the id column of the test file
    delimiter: str = "\t"
    class_weights: tuple[float, ...] = ()  # per label; () = unweighted

    @property
    def is_regression(self) -> bool:
        return not self.labels

    @property
    def num_outputs(self) -> int:
        return len(self.labels) or 1

    @property
    def main_metric(self) -> str:
        return self.metrics[0]


TASKS = {
    t.name: t for t in (
        GlueTask("cola", "CoLA", text_a=3, text_b=None, label=1, labels=("0", "1"),
                 metrics=("mcc", "accuracy"), leaderboard_name="CoLA", header=False,
                 test_text_a="sentence"),
        GlueTask("sst2", "SST-2", text_a="sentence", text_b=None, label="label",
                 labels=("0", "1"), metrics=("accuracy",), leaderboard_name="SST-2"),
        GlueTask("mrpc", "MRPC", text_a="#1 String", text_b="#2 String", label="Quality",
                 labels=("0", "1"), metrics=("f1", "accuracy"), leaderboard_name="MRPC"),
        GlueTask("stsb", "STS-B", text_a="sentence1", text_b="sentence2", label="score",
                 labels=(), metrics=("spearman", "pearson"), leaderboard_name="STS-B"),
        GlueTask("qqp", "QQP", text_a="question1", text_b="question2", label="is_duplicate",
                 labels=("0", "1"), metrics=("f1", "accuracy"), leaderboard_name="QQP",
                 test_index="id"),
        GlueTask("mnli", "MNLI", text_a="sentence1", text_b="sentence2", label="gold_label",
                 labels=NLI_LABELS, metrics=("accuracy",), leaderboard_name="MNLI-m",
                 eval_files=(("matched", "dev_matched.tsv"),
                             ("mismatched", "dev_mismatched.tsv")),
                 test_files=(("MNLI-m", "test_matched.tsv"), ("MNLI-mm", "test_mismatched.tsv"),
                             ("AX", "../diagnostic/diagnostic.tsv"))),
        GlueTask("qnli", "QNLI", text_a="question", text_b="sentence", label="label",
                 labels=BINARY_NLI_LABELS, metrics=("accuracy",), leaderboard_name="QNLI"),
        GlueTask("rte", "RTE", text_a="sentence1", text_b="sentence2", label="label",
                 labels=BINARY_NLI_LABELS, metrics=("accuracy",), leaderboard_name="RTE"),
        GlueTask("wnli", "WNLI", text_a="sentence1", text_b="sentence2", label="label",
                 labels=("0", "1"), metrics=("accuracy",), leaderboard_name="WNLI"),
    )
}
# The diagnostic set is predicted by the MNLI model: `ax` trains MNLI and writes AX.tsv.
TASKS["ax"] = dataclasses.replace(TASKS["mnli"], name="ax")


def get_task(name: str) -> GlueTask:
    """The task called `name`; the error lists every task."""
    if name not in TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; tasks: {', '.join(TASKS)} "
                         "(or 'custom' for your own TSV/CSV)")
    return TASKS[name]


def custom_task(name: str, text_a: str, text_b: str | None, label: str, labels: tuple[str, ...],
                *, train_file: str, eval_file: str, test_file: str = "", test_index: str = "",
                delimiter: str = "\t", class_weights: tuple[float, ...] = ()) -> GlueTask:
    """A user's own task: files with a header row, columns named in the config.

    `labels` empty means regression (a float label column).
    """
    if class_weights and len(class_weights) != len(labels):
        raise ValueError(f"config.class_weights has {len(class_weights)} values for "
                         f"{len(labels)} labels {list(labels)}")
    metrics = ("pearson", "spearman") if not labels else (
        ("f1", "accuracy") if len(labels) == 2 else ("accuracy",))
    return GlueTask(name, "", text_a=text_a, text_b=text_b or None, label=label,
                    labels=tuple(labels), metrics=metrics, leaderboard_name=name,
                    train_file=train_file, eval_files=(("dev", eval_file),),
                    test_files=(((name, test_file),) if test_file else ()),
                    test_index=test_index or "index", delimiter=delimiter,
                    class_weights=tuple(class_weights))


@dataclasses.dataclass
class Examples:
    """The rows of one split: texts, labels (ids, or floats for regression) and ids."""

    path: str
    text_a: list[str]
    text_b: list[str] | None
    labels: np.ndarray | None  # int32 label ids or float32 scores; None for test splits
    ids: list[str]  # the test file's index column (row numbers elsewhere)

    def __len__(self) -> int:
        return len(self.text_a)


def read_split(task: GlueTask, path: str, *, with_labels: bool, is_test: bool = False
               ) -> Examples:
    """Reads one TSV/CSV file of `task`; bad rows raise naming the file and line."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{task.name}: {path} does not exist")
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter=task.delimiter, quotechar=None))
    has_header = task.header or is_test
    header = [c.strip() for c in rows[0]] if has_header and rows else []
    body = rows[1:] if has_header else rows
    first_line = 2 if has_header else 1
    if not body:
        raise ValueError(f"{path}: no examples (the split is empty)")

    def column(spec, role):
        if spec is None:
            return None
        if isinstance(spec, int):
            return spec
        if spec not in header:
            raise ValueError(f"{path}: no column {spec!r} for the {role} (columns: {header})")
        return header.index(spec)

    a = column(task.test_text_a if is_test and task.test_text_a is not None else task.text_a,
               "first text")
    b = column(task.test_text_b if is_test and task.test_text_b is not None else task.text_b,
               "second text")
    y = column(task.label, "label") if with_labels else None
    index = column(task.test_index, "index") if is_test else None
    needed = max(c for c in (a, b, y, index) if c is not None)
    text_a, text_b, labels, ids = [], [] if b is not None else None, [], []
    label_ids = {label: i for i, label in enumerate(task.labels)}
    for number, row in enumerate(body, first_line):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) <= needed:
            raise ValueError(f"{path}:{number}: {len(row)} columns, expected at least "
                             f"{needed + 1}")
        text_a.append(row[a])
        if b is not None:
            text_b.append(row[b])
        ids.append(row[index] if index is not None else str(number - first_line))
        if y is None:
            continue
        value = row[y].strip()
        if task.is_regression:
            try:
                labels.append(float(value))
            except ValueError:
                raise ValueError(f"{path}:{number}: label {value!r} is not a number") from None
        elif value not in label_ids:
            raise ValueError(f"{path}:{number}: unknown label {value!r}; labels: "
                             f"{list(task.labels)}")
        else:
            labels.append(label_ids[value])
    dtype = np.float32 if task.is_regression else np.int32
    return Examples(path, text_a, text_b, np.asarray(labels, dtype) if y is not None else None,
                    ids)


# tensorflow-datasets' names: dataset, text features, and split per role. Its
# ClassLabel orders equal the label orders above, so label ids carry over.
TFDS = {
    "cola": ("glue/cola", "sentence", None), "sst2": ("glue/sst2", "sentence", None),
    "mrpc": ("glue/mrpc", "sentence1", "sentence2"),
    "stsb": ("glue/stsb", "sentence1", "sentence2"),
    "qqp": ("glue/qqp", "question1", "question2"), "mnli": ("glue/mnli", "premise", "hypothesis"),
    "ax": ("glue/mnli", "premise", "hypothesis"), "qnli": ("glue/qnli", "question", "sentence"),
    "rte": ("glue/rte", "sentence1", "sentence2"), "wnli": ("glue/wnli", "sentence1", "sentence2"),
}
_TFDS_SPLITS = {"train": "train", "dev": "validation", "matched": "validation_matched",
                "mismatched": "validation_mismatched", "MNLI-m": "test_matched",
                "MNLI-mm": "test_mismatched"}


def tfds_splits(task: GlueTask) -> dict:
    """Like split_paths, with (dataset name, split) pairs of tensorflow-datasets."""
    if task.name not in TFDS:
        raise ValueError(f"task {task.name!r} has no tensorflow-datasets version; "
                         f"those that do: {sorted(TFDS)}")
    name = TFDS[task.name][0]
    test_names = [n for n, _ in task.test_files] if task.test_files else [task.leaderboard_name]
    return {"train": (name, "train"),
            "eval": {n: (name, _TFDS_SPLITS[n]) for n, _ in task.eval_files},
            "test": {n: ("glue/ax", "test") if n == "AX" else (name, _TFDS_SPLITS.get(n, "test"))
                     for n in test_names}}


def read_tfds_split(task: GlueTask, source: tuple[str, str], *, with_labels: bool,
                    data_dir: str | None = None) -> Examples:
    """A split of a locally prepared tensorflow-datasets GLUE dataset (nothing is downloaded)."""
    import tensorflow_datasets as tfds

    name, split = source
    _, key_a, key_b = TFDS[task.name]
    if name == "glue/ax":
        key_a, key_b = "premise", "hypothesis"
    try:
        dataset = tfds.load(name, split=split, data_dir=data_dir or None, download=False)
    except Exception as e:  # tfds raises several types for a dataset that is not prepared
        raise FileNotFoundError(f"tensorflow-datasets {name} split {split} is not prepared in "
                                f"{data_dir or 'the default data dir'}: {e}") from e
    text_a, text_b, labels, ids = [], [] if key_b else None, [], []
    for example in tfds.as_numpy(dataset):
        text_a.append(example[key_a].decode("utf-8"))
        if key_b:
            text_b.append(example[key_b].decode("utf-8"))
        labels.append(example["label"])
        ids.append(str(int(example["idx"])))
    if not text_a:
        raise ValueError(f"tensorflow-datasets {name} split {split}: no examples")
    dtype = np.float32 if task.is_regression else np.int32
    source_name = f"tfds:{name}/{split}"
    return Examples(source_name, text_a, text_b,
                    np.asarray(labels, dtype) if with_labels else None, ids)


def split_paths(task: GlueTask, data_dir: str) -> dict:
    """{"train": path, "eval": {name: path}, "test": {leaderboard name: path}}."""
    folder = os.path.join(data_dir, task.folder) if task.folder else data_dir

    def path(name):
        return os.path.normpath(os.path.join(folder, name))

    test_files = task.test_files
    if test_files is None:
        test_files = ((task.leaderboard_name, "test.tsv"),)
    return {"train": path(task.train_file),
            "eval": {name: path(f) for name, f in task.eval_files},
            "test": {name: path(f) for name, f in test_files}}


def truncate_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """run_classifier's _truncate_seq_pair: pop from the end of the longer, in place."""
    while len(tokens_a) + len(tokens_b) > max_length:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def encode(examples: Examples, tokenizer, max_seq_length: int) -> dict[str, np.ndarray]:
    """Token ids, segment ids, mask [N, max_seq_length] and real lengths [N]."""
    ids_a = tokenizer.encode_batch(examples.text_a)
    ids_b = tokenizer.encode_batch(examples.text_b) if examples.text_b is not None else None
    n = len(examples)
    input_ids = np.zeros((n, max_seq_length), np.int32)
    segment_ids = np.zeros((n, max_seq_length), np.int32)
    lengths = np.zeros((n,), np.int32)
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    for i in range(n):
        a = list(ids_a[i])
        if ids_b is None:
            a = a[:max_seq_length - 2]
            row, segments = [cls, *a, sep], [0] * (len(a) + 2)
        else:
            b = list(ids_b[i])
            truncate_pair(a, b, max_seq_length - 3)
            row = [cls, *a, sep, *b, sep]
            segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        input_ids[i, :len(row)] = row
        segment_ids[i, :len(row)] = segments
        lengths[i] = len(row)
    input_mask = (np.arange(max_seq_length)[None, :] < lengths[:, None]).astype(np.int32)
    return {"input_ids": input_ids, "segment_ids": segment_ids, "input_mask": input_mask,
            "length": lengths}


def compute_metrics(task: GlueTask, predictions: np.ndarray, labels: np.ndarray) -> dict:
    """The task's metrics (fractions) from predicted label ids (or scores) and the gold ones."""
    out = {}
    for metric in task.metrics:
        if metric == "accuracy":
            out[metric] = float(sklearn.metrics.accuracy_score(labels, predictions))
        elif metric == "f1":
            out[metric] = float(sklearn.metrics.f1_score(labels, predictions))
        elif metric == "mcc":
            out[metric] = float(sklearn.metrics.matthews_corrcoef(labels, predictions))
        elif metric == "pearson":
            out[metric] = float(scipy.stats.pearsonr(predictions, labels)[0])
        elif metric == "spearman":
            out[metric] = float(scipy.stats.spearmanr(predictions, labels)[0])
        else:
            raise ValueError(f"unknown metric {metric!r}")
    return out


def predictions_from_logits(task: GlueTask, logits: np.ndarray) -> np.ndarray:
    """Label ids (argmax), or the regression score."""
    return logits[:, 0] if task.is_regression else np.argmax(logits, axis=-1)


def write_leaderboard_file(task: GlueTask, path: str, ids: list[str],
                           predictions: np.ndarray) -> None:
    """GLUE's submission format: `index<TAB>prediction`, label strings (scores for STS-B)."""
    with atomic_file(path, overwrite=True) as f:
        f.write("index\tprediction\n")
        for index, value in zip(ids, predictions):
            label = f"{float(value):.3f}" if task.is_regression else task.labels[int(value)]
            f.write(f"{index}\t{label}\n")
