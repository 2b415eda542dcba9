"""Pretraining TFRecords from text, as google-research/bert's create_pretraining_data.

The library behind `python -m bert_jax.create_pretraining_data`: the same
flags and file format as google-research/bert's script (G-BERT below), plus
--spm_model, --num_workers, --num_output_shards, --overwrite, --unmasked,
--megabytes_per_shard and --tfds_* (read a text dataset prepared locally with
tensorflow-datasets; nothing is downloaded).

Input: text files, one sentence per line, blank lines between documents
(text_sources.py). Output: tf.train.Example records with exactly G-BERT's
features (record_spec.py); --unmasked writes only input_ids, input_mask,
segment_ids and next_sentence_labels, for dynamic masking at training time.

The instance building and masking are G-BERT's, on G-BERT's random stream
(instances.py): a corpus of up to --megabytes_per_shard of text
(default 4) is one shard, and its output file is byte-identical to G-BERT's
for the same flags and seed. The deliberate differences:
  * Larger corpora are processed in shards of whole documents (about
    --megabytes_per_shard of text each), streamed from the inputs, so memory
    stays bounded whatever the corpus size. Each shard is G-BERT's algorithm
    on its own documents: G-BERT shuffles all documents and all instances of
    the corpus and takes random next segments from any document; here that
    happens within a shard. Shard 0 uses random_seed itself, shard i a seed
    derived from (random_seed, i). Shards run in parallel over --num_workers
    processes.
  * --do_whole_word_mask draws the 80% [MASK] / 10% random / 10% kept choice
    once per word, for all its pieces; G-BERT draws it per piece (its issue
    #910), which can leave a word half masked. A word never spans [SEP].
  * Each input file starts a new document.
  * Non-UTF-8 bytes become U+FFFD (dropped by the tokenizer) and are
    reported with file and line; G-BERT drops them silently.
Output is deterministic for a given seed and shard layout (inputs and
--megabytes_per_shard); --num_workers does not change a byte.

Outputs are written under temporary names and renamed on success; an
existing output is an error unless --overwrite. The run ends with a summary
(documents, instances, tokens, masked positions, next-sentence balance,
short-target fraction, skipped input), printed and returned by the API.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import multiprocessing
import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool

import tqdm

from bert_jax.fileio import atomic_output
from bert_jax.pretraining import shard_worker, text_sources
from bert_jax.pretraining.instances import InstanceOptions

# Text per shard. A corpus up to this size is one shard and comes out
# identical to G-BERT's; larger ones split into shards that run in parallel.
DEFAULT_MEGABYTES_PER_SHARD = 4.0


def _shards(
    documents: Iterable[list[str]], max_chars: int
) -> Iterator[tuple[int, list[list[str]]]]:
    """Groups documents into (index, documents) shards of about max_chars of text."""
    shard, chars, index = [], 0, 0
    for document in documents:
        shard.append(document)
        chars += sum(map(len, document))
        if chars >= max_chars:
            yield index, shard
            shard, chars, index = [], 0, index + 1
    if shard:
        yield index, shard


def _run_shards(
    shards, tokenizer, options: InstanceOptions, num_outputs: int, num_workers: int, spool_dir: str
):
    """Yields ShardResults in shard order, made by this process and num_workers - 1 spawned ones.

    Shards are dealt round-robin: shard i goes to this process when
    i % num_workers == num_workers - 1, else to the pool (which spools its
    records to spool_dir). This process starts on its first shard while the
    workers are still starting up, and no core waits on an idle parent.
    """
    if num_workers == 1:
        for index, documents in shards:
            yield shard_worker.process_shard(tokenizer, options, num_outputs, index, documents)
        return
    # spawn: workers start clean (no inherited TensorFlow or locks) and import
    # only numpy, the tokenizer and our shard code. A worker that dies (killed,
    # out of memory, or unable to load the vocabulary) breaks the executor,
    # which raises instead of waiting forever as multiprocessing.Pool would.
    pool = concurrent.futures.ProcessPoolExecutor(
        num_workers - 1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=shard_worker.init_worker,
        initargs=(tokenizer, options, num_outputs, spool_dir),
    )
    pending = collections.deque()  # futures, in shard order
    try:
        for index, documents in shards:
            if index % num_workers == num_workers - 1:  # this process's share, made now
                pending.append(concurrent.futures.Future())
                pending[-1].set_result(
                    shard_worker.process_shard(tokenizer, options, num_outputs, index, documents)
                )
            else:
                pending.append(pool.submit(shard_worker.run_in_worker, index, documents))
            # At most two shards per process in flight: the reader never
            # runs far ahead of the writers, so memory stays bounded.
            while pending and (len(pending) >= 2 * num_workers or pending[0].done()):
                yield _result(pending.popleft())
        while pending:
            yield _result(pending.popleft())
    finally:
        pool.shutdown(cancel_futures=True)


def _result(future: concurrent.futures.Future) -> shard_worker.ShardResult:
    try:
        return future.result()
    except BrokenProcessPool as error:
        raise RuntimeError(
            f"a create_pretraining_data worker process died ({error}); see its error above, "
            "or the system log if it was killed"
        ) from error


def _summary(
    stats: collections.Counter,
    report: text_sources.ReadReport,
    options: InstanceOptions,
    outputs: Sequence[str],
    shards: int,
    seconds: float,
) -> dict:
    instances = stats["instances"]

    def per_instance(key: str) -> float:
        return round(stats[key] / max(instances, 1), 4)

    return {
        "inputs": report.sources,
        "documents": stats["documents"],
        "sentences": stats["sentences"],
        "instances": instances,
        "tokens": stats["tokens"],
        "masked_positions": None if options.unmasked else stats["masked_positions"],
        "mean_tokens_per_instance": per_instance("tokens"),
        "mean_masked_per_instance": None if options.unmasked else per_instance("masked_positions"),
        "random_next_fraction": per_instance("random_next"),
        "short_target_fraction": per_instance("short_target"),
        "skipped": {
            "empty_inputs": report.empty_sources,
            "invalid_utf8_lines": report.invalid_utf8_lines,
            "invalid_utf8_examples": report.invalid_utf8_examples,
            "lines_without_tokens": stats["lines_without_tokens"],
            "documents_without_tokens": stats["documents_without_tokens"],
        },
        "shards": shards,
        "outputs": list(outputs),
        "seconds": round(seconds, 3),
        "instances_per_second": round(instances / max(seconds, 1e-9), 1),
    }


def write_pretraining_data(
    documents: Iterable[list[str]],
    report: text_sources.ReadReport,
    output_files: Sequence[str],
    tokenizer,
    options: InstanceOptions,
    num_workers: int = 1,
    megabytes_per_shard: float = DEFAULT_MEGABYTES_PER_SHARD,
    overwrite: bool = False,
    progress: bool = False,
) -> dict:
    """Writes instances from a stream of documents (lists of sentences).

    `report` is the reader's ReadReport, filled in as `documents` is consumed.
    Returns the summary; raises ValueError (and writes nothing) if no
    instance could be made.
    """
    options.validate()
    if not output_files or len(set(output_files)) != len(output_files):
        raise ValueError(f"need one or more distinct output files, got {list(output_files)}")
    if num_workers < 1 or megabytes_per_shard <= 0:
        raise ValueError(
            f"need num_workers >= 1 and megabytes_per_shard > 0, got {num_workers}, "
            f"{megabytes_per_shard}"
        )
    output_files = [os.path.abspath(path) for path in output_files]
    for path in output_files:  # before any work
        atomic_output.check_writable(path, overwrite)
    start = time.perf_counter()
    stats = collections.Counter()
    shards = 0
    shard_iter = _shards(documents, int(megabytes_per_shard * 1e6))
    with contextlib.ExitStack() as stack:
        files = [
            stack.enter_context(atomic_output.atomic_file(path, overwrite, "wb"))
            for path in output_files
        ]
        bar = stack.enter_context(
            tqdm.tqdm(unit=" instances", disable=not progress, dynamic_ncols=True)
        )
        # Workers hand their shards over as files here, beside the outputs.
        spool_dir = stack.enter_context(
            tempfile.TemporaryDirectory(
                prefix=".create_pretraining_data-", dir=os.path.dirname(output_files[0])
            )
        )
        results = stack.enter_context(
            contextlib.closing(
                _run_shards(shard_iter, tokenizer, options, len(files), num_workers, spool_dir)
            )
        )
        for result in results:
            result.append_to(files)
            stats.update(result.stats)
            shards += 1
            bar.update(result.stats["instances"])
            bar.set_postfix(documents=stats["documents"], shards=shards, refresh=False)
        if stats["instances"] == 0:
            raise ValueError(
                f"no text to make instances from: {report.sources} input(s), "
                f"empty: {report.empty_sources}"
            )
    return _summary(stats, report, options, output_files, shards, time.perf_counter() - start)


def create_pretraining_data(
    input_files: str | Sequence[str],
    output_files: str | Sequence[str],
    tokenizer,
    num_workers: int = 1,
    megabytes_per_shard: float = DEFAULT_MEGABYTES_PER_SHARD,
    overwrite: bool = False,
    progress: bool = False,
    **options,
) -> dict:
    """Creates pretraining TFRecords from text files; returns the summary dict.

    Args:
      input_files: comma-separated paths/globs, or a list of them.
      output_files: one path or a list; instances are dealt over them.
      tokenizer: from `bert_jax.tokenization.load_tokenizer`.
      num_workers: processes making shards, this one included (1: no others).
      megabytes_per_shard: text per shard (memory bound, random-next pool).
      overwrite: replace existing outputs.
      progress: show a progress bar.
      **options: InstanceOptions fields (max_seq_length, dupe_factor, ...).
    """
    paths = text_sources.resolve_input_files(input_files)
    report = text_sources.ReadReport()
    outputs = [output_files] if isinstance(output_files, (str, os.PathLike)) else list(output_files)
    return write_pretraining_data(
        text_sources.read_text_files(paths, report),
        report,
        outputs,
        tokenizer,
        InstanceOptions(**options),
        num_workers,
        megabytes_per_shard,
        overwrite,
        progress,
    )


def create_pretraining_data_from_tfds(
    name: str,
    split: str,
    output_files: str | Sequence[str],
    tokenizer,
    text_key: str = "text",
    data_dir: str | None = None,
    num_workers: int = 1,
    megabytes_per_shard: float = DEFAULT_MEGABYTES_PER_SHARD,
    overwrite: bool = False,
    progress: bool = False,
    **options,
) -> dict:
    """Like `create_pretraining_data`, reading a locally prepared TFDS split.

    Each example's `text_key` field is a document, split into sentences by
    `sentence_split.split_sentences`.
    """
    dataset = text_sources.open_tfds_split(name, split, text_key, data_dir)
    report = text_sources.ReadReport()
    outputs = [output_files] if isinstance(output_files, (str, os.PathLike)) else list(output_files)
    documents = text_sources.read_tfds(dataset, f"tfds:{name}/{split}", text_key, report)
    return write_pretraining_data(
        documents,
        report,
        outputs,
        tokenizer,
        InstanceOptions(**options),
        num_workers,
        megabytes_per_shard,
        overwrite,
        progress,
    )


def output_paths(output_file: str, num_output_shards: int | None) -> list[str]:
    """--output_file (comma list) and --num_output_shards -> output paths.

    With --num_output_shards N and one --output_file such as
    `data/train.tfrecord`, the outputs are `data/train-00000-of-0000N.tfrecord`...
    """
    paths = [p.strip() for p in output_file.split(",") if p.strip()]
    if num_output_shards is None or num_output_shards == len(paths):
        return paths
    if len(paths) != 1:
        raise ValueError(
            f"--num_output_shards={num_output_shards} needs one --output_file, got {len(paths)}"
        )
    if num_output_shards < 1:
        raise ValueError(f"--num_output_shards must be >= 1, got {num_output_shards}")
    stem, ext = os.path.splitext(paths[0])
    return [f"{stem}-{i:05d}-of-{num_output_shards:05d}{ext}" for i in range(num_output_shards)]


def format_summary(summary: dict) -> str:
    """The summary as aligned `key: value` lines."""
    lines = []
    for key, value in summary.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines.extend(f"  {k}: {v}" for k, v in value.items())
        else:
            lines.append(f"{key}: {value}")
    return "\n".join(lines)
