"""A default pretraining corpus from documentation already on this machine.

Written on its own by `python -m bert_jax.default_corpus`; the tiny preset of
`bert_jax.pretrain` builds it, and its TFRecords, on first use.
Nothing is downloaded and no text is stored in the repository: the corpus is
assembled from the docstrings of Python's standard library, numpy and
matplotlib, and from the language reference topics that ship with the
standard library for `help()` (`pydoc_data.topics`): text every machine that
runs this project has. One document per module (its docstring and those of
its functions), per class (its docstring and those of its methods) and per
help topic; one sentence per line (`sentence_split`), blank lines between
documents: create_pretraining_data's input format.

Only prose is kept: docstring paragraphs that are code (indented blocks,
doctests, `::` literal blocks), tables, and parameter/section lists are
dropped, then sentences that are short, unpunctuated or symbol-heavy, and
repeats. reStructuredText markup (``x``, :func:`x`, *x*) is unwrapped.
Modules are imported in sorted order (skipping those with side effects on
import: `this`, `antigravity`, IDLE, tkinter, test suites, `__main__`
modules), so the corpus is the same on every run with the same Python and
numpy versions.

`ensure_default_pretraining_data` goes from nothing to TFRecords: corpus,
train/eval split by document, a WordPiece vocabulary, and static-masked
pretraining files, each built only if missing.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import os
import pkgutil
import re
import sys
import warnings
from collections.abc import Iterator, Sequence

from bert_jax.fileio import atomic_output
from bert_jax.pretraining.sentence_split import split_sentences

# Top-level packages read besides the standard library: installed with the
# project (requirements.txt), quick to import, and documented in prose.
THIRD_PARTY = ("numpy", "matplotlib")
# Importing these has side effects (printing, opening a browser or a GUI,
# starting a REPL, running tests), or they are test suites.
_SKIP_PREFIXES = (
    "this",
    "antigravity",
    "idlelib",
    "tkinter",
    "turtle",
    "turtledemo",
    "test",
    "lib2to3",
    "ensurepip",
    "venv",
    "pydoc_data",
    "readline",
    "rlcompleter",
    "__hello__",
    "__phello__",
    "numpy.f2py",
    "numpy.distutils",
    "matplotlib.backends",
    "matplotlib.pyplot",
    "matplotlib.pylab",
)
_SKIP_PARTS = ("__main__", "tests", "testing", "_tests", "conftest", "setup")
_SECTION_HEADING = re.compile(
    r"^\s*(args|arguments|parameters|other parameters|keyword arguments|returns?|yields?|raises|"
    r"warns|attributes|methods|examples?|see also|references|usage|notes?|todo)\s*:?\s*$",
    re.IGNORECASE,
)
_UNDERLINE = re.compile(r"^\s*([-=~^*+#\"'])\1{2,}\s*$")
_TABLE_RULE = re.compile(r"^\s*[-=+|]{3,}[-=+| ]*$")
_PARAMETER_SPEC = re.compile(r"^\s*[\w*.,\[\] ]+ : ")  # numpydoc "name : type"
_RST_ROLE = re.compile(r":[\w:.-]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_RST_LITERAL = re.compile(r"``([^`]+)``|`([^`]+)`_?|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*")
_PROSE_CHARS = re.compile(r"[A-Za-z ,.;:'()\-!?]")

EVAL_EVERY = 25  # every 25th document is held out for evaluation (4%)


def _skipped(name: str) -> bool:
    parts = name.split(".")
    return any(name == p or name.startswith(p + ".") for p in _SKIP_PREFIXES) or any(
        part in _SKIP_PARTS or part.startswith("_") for part in parts
    )


def _submodules(package) -> Iterator[str]:
    """Names of the package's modules, recursively, not importing skipped ones."""
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        if _skipped(info.name):
            continue
        yield info.name
        if info.ispkg:
            subpackage = _import(info.name)
            if subpackage is not None and hasattr(subpackage, "__path__"):
                yield from _submodules(subpackage)


def module_names() -> list[str]:
    """Public standard-library and THIRD_PARTY modules to read, sorted, packages walked."""
    names = []
    for root in sorted(sys.stdlib_module_names) + list(THIRD_PARTY):
        module = None if _skipped(root) else _import(root)
        if module is not None:
            names.append(root)
            if hasattr(module, "__path__"):
                names.extend(_submodules(module))
    return sorted(set(names))


def _import(name: str):
    """Imports `name` quietly; None if it cannot be imported here."""
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except Exception:  # platform-specific or optional modules: just skip them
        return None


def _unwrap_markup(text: str) -> str:
    text = _RST_ROLE.sub(r"\1", text)
    return _RST_LITERAL.sub(lambda m: next(g for g in m.groups() if g is not None), text)


def _is_prose(sentence: str) -> bool:
    words = sentence.split()
    return (
        5 <= len(words) <= 80
        and sentence[0].isupper()
        and sentence[-1] in ".!?"
        and len(_PROSE_CHARS.findall(sentence)) >= 0.9 * len(sentence)
    )


def prose_sentences(docstring: str) -> list[str]:
    """The prose sentences of a docstring or help text.

    Paragraph by paragraph: doctests, literal blocks (after "::") and tables
    are dropped; so are headings (underlined, or "Args:"-style) and numpydoc
    "name : type" lines, keeping the descriptions below them. The rest is
    joined, unwrapped from reST markup, split into sentences, and only
    sentences that read as prose are kept (`_is_prose`).
    """
    sentences = []
    literal_next = False
    for paragraph in re.split(r"\n\s*\n", inspect.cleandoc(docstring)):
        lines = [line for line in paragraph.splitlines() if line.strip()]
        if not lines:
            continue
        literal, literal_next = literal_next, lines[-1].rstrip().endswith("::")
        if literal or any(
            line.lstrip().startswith(">>>")
            or _TABLE_RULE.match(line)
            and not _UNDERLINE.match(line)
            for line in lines
        ):
            continue
        kept = []
        for i, line in enumerate(lines):
            underlined = i + 1 < len(lines) and _UNDERLINE.match(lines[i + 1])
            if (
                underlined
                or _UNDERLINE.match(line)
                or _SECTION_HEADING.match(line)
                or _PARAMETER_SPEC.match(line)
            ):
                continue
            kept.append(line.strip())
        text = _unwrap_markup(" ".join(kept))
        if text.endswith("::"):
            text = text[:-1]
        sentences.extend(s for s in split_sentences(text) if _is_prose(s))
    return sentences


def _docstring(obj) -> str:
    doc = getattr(obj, "__doc__", None)  # not inspect.getdoc: no inherited docs
    return doc if isinstance(doc, str) else ""


def _documents_of(module) -> Iterator[list[str]]:
    """Module docstring + its functions' docstrings; then one document per class."""
    own = [
        (name, obj)
        for name, obj in sorted(vars(module).items())
        if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__
    ]
    yield prose_sentences(_docstring(module)) + [
        s for _, obj in own if inspect.isroutine(obj) for s in prose_sentences(_docstring(obj))
    ]
    for _, cls in own:
        if inspect.isclass(cls):
            methods = [
                obj
                for name, obj in sorted(vars(cls).items())
                if inspect.isroutine(obj) and (not name.startswith("_") or name == "__init__")
            ]
            yield prose_sentences(_docstring(cls)) + [
                s for m in methods for s in prose_sentences(_docstring(m))
            ]


def _help_topics() -> Iterator[list[str]]:
    """One document per `help()` topic of the language reference."""
    from pydoc_data.topics import topics  # pylint: disable=import-outside-toplevel

    for name in sorted(topics):
        yield prose_sentences(topics[name])


def _all_documents(names: Sequence[str]) -> Iterator[list[str]]:
    for name in names:
        if name.split(".")[0] in THIRD_PARTY:
            continue
        module = _import(name)
        if module is not None:
            yield from _documents_of(module)
    yield from _help_topics()
    for name in names:
        if name.split(".")[0] in THIRD_PARTY:
            module = _import(name)
            if module is not None:
                yield from _documents_of(module)


def iter_documents(names: Sequence[str]) -> Iterator[list[str]]:
    """Yields the corpus's documents (lists of sentences), deduplicated, in a fixed order.

    Standard-library modules `names` first, then the help topics, then the
    THIRD_PARTY modules among `names`.
    """
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated modules warn when read
        for sentences in _all_documents(names):
            fresh = [s for s in dict.fromkeys(sentences) if s not in seen]
            seen.update(fresh)
            if len(fresh) >= 2:  # a pair at least, for next-sentence prediction
                yield fresh


def build_default_corpus(
    output_path: str, max_bytes: int = 8_000_000, overwrite: bool = False
) -> dict:
    """Writes the corpus (at most `max_bytes` of UTF-8) to `output_path`.

    Returns {"path", "documents", "sentences", "bytes", "modules"}.
    """
    names = module_names()
    stats = {
        "path": os.path.abspath(output_path),
        "documents": 0,
        "sentences": 0,
        "bytes": 0,
        "modules": len(names),
    }
    with atomic_output.atomic_file(output_path, overwrite, "w") as f:
        for document in iter_documents(names):
            text = "\n".join(document) + "\n\n"
            size = len(text.encode("utf-8"))
            if stats["bytes"] + size > max_bytes:
                break
            f.write(text)
            stats["bytes"] += size
            stats["documents"] += 1
            stats["sentences"] += len(document)
    return stats


def split_documents(
    corpus_path: str, train_path: str, eval_path: str, eval_every: int = EVAL_EVERY
) -> None:
    """Writes every `eval_every`-th document of the corpus to eval_path, the rest to train_path."""
    with open(corpus_path, encoding="utf-8") as f:
        documents = [d for d in f.read().split("\n\n") if d.strip()]
    with (
        atomic_output.atomic_file(train_path, True, "w") as train,
        atomic_output.atomic_file(eval_path, True, "w") as held_out,
    ):
        for i, document in enumerate(documents):
            (held_out if i % eval_every == eval_every - 1 else train).write(
                document.strip("\n") + "\n\n"
            )


def ensure_default_pretraining_data(
    cache_dir: str,
    max_seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    vocab_size: int = 8000,
    dupe_factor: int = 5,
    max_bytes: int = 8_000_000,
    num_workers: int = 1,
    random_seed: int = 12345,
) -> dict:
    """Builds whatever is missing of: corpus, split, vocab, TFRecords; returns their paths.

    Layout under cache_dir: corpus.txt, corpus_train.txt, corpus_eval.txt
    (every EVAL_EVERY-th document held out), vocab_{vocab_size}.txt (WordPiece,
    uncased, trained on the train split), and
    pretrain_s{S}_p{P}_v{vocab}_d{dupe}/{train,eval}.tfrecord (eval with
    dupe_factor 1). Existing files are reused as they are.

    Returns {"train_files": [...], "eval_files": [...], "vocab_file": path}.
    """
    # Imported here: building the corpus alone needs no tokenizer or workers.
    from bert_jax.pretraining.data_creation import create_pretraining_data
    from bert_jax.tokenization import load_tokenizer, train_wordpiece_vocab

    os.makedirs(cache_dir, exist_ok=True)
    path = lambda name: os.path.join(cache_dir, name)  # noqa: E731
    if not os.path.exists(path("corpus.txt")):
        build_default_corpus(path("corpus.txt"), max_bytes)
    if not (os.path.exists(path("corpus_train.txt")) and os.path.exists(path("corpus_eval.txt"))):
        split_documents(path("corpus.txt"), path("corpus_train.txt"), path("corpus_eval.txt"))
    vocab_file = path(f"vocab_{vocab_size}.txt")
    if not os.path.exists(vocab_file):
        train_wordpiece_vocab(
            path("corpus_train.txt"), vocab_size, do_lower_case=True, output=vocab_file
        )
    data_dir = path(
        f"pretrain_s{max_seq_length}_p{max_predictions_per_seq}_v{vocab_size}_d{dupe_factor}"
    )
    outputs = {
        "train": os.path.join(data_dir, "train.tfrecord"),
        "eval": os.path.join(data_dir, "eval.tfrecord"),
    }
    tokenizer = None
    for split, output in outputs.items():
        if os.path.exists(output):
            continue
        tokenizer = tokenizer or load_tokenizer(vocab_file, do_lower_case=True)
        create_pretraining_data(
            path(f"corpus_{split}.txt"),
            output,
            tokenizer,
            num_workers=num_workers,
            max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq,
            dupe_factor=dupe_factor if split == "train" else 1,
            random_seed=random_seed,
        )
    return {
        "train_files": [outputs["train"]],
        "eval_files": [outputs["eval"]],
        "vocab_file": vocab_file,
    }
