"""SQuAD files to model features, as google-research/bert's run_squad converts them.

Reading (read_squad_examples): the context is split on whitespace into
original words (`doc_tokens`, with a char -> word map); a training answer
becomes a word span; an answer whose text is not found at its answer_start is
skipped with a warning and counted (as run_squad skips it).

Conversion (convert_examples_to_features): WordPiece over each original word
(`tok_to_orig_index`), the answer's word span moved to word pieces and
tightened by `_improve_answer_span`; the question cut to max_query_length;
windows of max_seq_length - len(question) - 3 pieces that start
min(remaining, doc_stride) apart; `[CLS] question [SEP] window [SEP]` with
segment ids 0/1; each window piece's max-context flag (its span where
min(left, right) + 0.01 * span length is largest). A training window that
does not hold the whole answer (or any window of an impossible question)
points at [CLS] (start = end = 0).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os

import numpy as np


def is_whitespace(c: str) -> bool:
    """run_squad's whitespace: space, tab, CR, LF and U+202F (narrow no-break space)."""
    return c in " \t\r\n" or ord(c) == 0x202F


@dataclasses.dataclass
class SquadExample:
    """One question over its context's original (whitespace-split) words."""

    qas_id: str
    question_text: str
    doc_tokens: list[str]
    orig_answer_text: str = ""  # training: the answer text; "" when impossible
    start_position: int = -1  # training: first and last original word of the answer
    end_position: int = -1
    is_impossible: bool = False


@dataclasses.dataclass
class ReadReport:
    """What reading skipped: answers whose text is not where answer_start points."""

    skipped: list[str] = dataclasses.field(default_factory=list)  # question ids


def _words(text: str) -> tuple[list[str], list[int]]:
    doc_tokens, char_to_word = [], []
    previous_is_whitespace = True
    for c in text:
        if is_whitespace(c):
            previous_is_whitespace = True
        else:
            if previous_is_whitespace:
                doc_tokens.append(c)
            else:
                doc_tokens[-1] += c
            previous_is_whitespace = False
        char_to_word.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word


def load_squad_json(path: str) -> dict:
    """The JSON of a SQuAD file; errors name the path and the key at fault."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"SQuAD file {path} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, dict) or not isinstance(value.get("data"), list):
        raise ValueError(f"{path}: no 'data' list (not a SQuAD file)")
    return value


def read_examples(data: list, *, is_training: bool, version_2_with_negative: bool,
                  source: str = "data", report: ReadReport | None = None,
                  first_answer_only: bool = False) -> list[SquadExample]:
    """SquadExamples of a file's "data" list (run_squad's read_squad_examples).

    With is_training, each answerable question needs exactly one answer (as
    in the train files), unless `first_answer_only` (labels from a dev file).
    """
    report = report if report is not None else ReadReport()
    examples = []
    for a, article in enumerate(data):
        for p, paragraph in enumerate(_get(article, "paragraphs", f"{source}[{a}]")):
            where = f"{source}[{a}].paragraphs[{p}]"
            doc_tokens, char_to_word = _words(_get(paragraph, "context", where))
            for q, qa in enumerate(_get(paragraph, "qas", where)):
                at = f"{where}.qas[{q}]"
                example = SquadExample(_get(qa, "id", at), _get(qa, "question", at), doc_tokens)
                if is_training:
                    example.is_impossible = bool(version_2_with_negative
                                                 and qa.get("is_impossible", False))
                    answers = _get(qa, "answers", at)
                    if not example.is_impossible:
                        if len(answers) != 1 and not (first_answer_only and answers):
                            raise ValueError(f"{at}: a training question needs exactly one "
                                             f"answer, it has {len(answers)}")
                        text = _get(answers[0], "text", f"{at}.answers[0]")
                        offset = _get(answers[0], "answer_start", f"{at}.answers[0]")
                        if not 0 <= offset < len(char_to_word) or not text:
                            report.skipped.append(example.qas_id)
                            continue
                        start = char_to_word[offset]
                        end = char_to_word[min(offset + len(text), len(char_to_word)) - 1]
                        actual = " ".join(doc_tokens[start:end + 1])
                        if actual.find(" ".join(text.split())) == -1:
                            logging.warning("%s: answer %r not found at answer_start (%r); "
                                            "skipped", at, text, actual)
                            report.skipped.append(example.qas_id)
                            continue
                        example.orig_answer_text = text
                        example.start_position, example.end_position = start, end
                examples.append(example)
    return examples


def _get(node: dict, key: str, where: str):
    if not isinstance(node, dict) or key not in node:
        raise ValueError(f"{where}: no '{key}' key")
    return node[key]


@dataclasses.dataclass
class SquadFeatures:
    """Windows of all examples, as arrays, plus what decoding needs per window."""

    input_ids: np.ndarray  # int32 [N, S]
    segment_ids: np.ndarray  # int32 [N, S]
    input_mask: np.ndarray  # int32 [N, S]
    length: np.ndarray  # int32 [N], real tokens
    start_positions: np.ndarray  # int32 [N]; 0 ([CLS]) when the answer is not inside
    end_positions: np.ndarray
    example_index: np.ndarray  # int32 [N]
    tokens: list[list[str]]  # per window, for get_final_text
    token_to_orig_map: list[dict[int, int]]  # window position -> original word
    token_is_max_context: list[dict[int, bool]]


def improve_answer_span(doc_tokens: list[str], start: int, end: int, tokenizer,
                        orig_answer_text: str) -> tuple[int, int]:
    """run_squad's _improve_answer_span: the tightest piece span whose text is the answer's."""
    answer = " ".join(tokenizer.tokenize(orig_answer_text))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start:new_end + 1]) == answer:
                return new_start, new_end
    return start, end


def doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of each window: they advance by min(length, doc_stride)."""
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def is_max_context(spans: list[tuple[int, int]], span_index: int, position: int) -> bool:
    """Whether `position` has its most context in span `span_index` (run_squad's rule)."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return best_index == span_index


def convert_examples(examples: list[SquadExample], tokenizer, *, max_seq_length: int,
                     doc_stride: int, max_query_length: int, is_training: bool) -> SquadFeatures:
    """run_squad's convert_examples_to_features, every window of every example."""
    words = sorted({w for example in examples for w in example.doc_tokens})
    pieces_of = dict(zip(words, tokenizer.tokenize_batch(words)))  # each word once
    questions = tokenizer.tokenize_batch([e.question_text for e in examples])
    rows: dict[str, list] = {k: [] for k in ("input_ids", "segment_ids", "start", "end",
                                             "example", "tokens", "to_orig", "max_context")}
    for example_index, example in enumerate(examples):
        query = questions[example_index][:max_query_length]
        tok_to_orig, orig_to_tok, doc_pieces = [], [], []
        for i, word in enumerate(example.doc_tokens):
            orig_to_tok.append(len(doc_pieces))
            for piece in pieces_of[word]:
                tok_to_orig.append(i)
                doc_pieces.append(piece)
        tok_start = tok_end = -1
        if is_training and not example.is_impossible:
            tok_start = orig_to_tok[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end = orig_to_tok[example.end_position + 1] - 1
            else:
                tok_end = len(doc_pieces) - 1
            tok_start, tok_end = improve_answer_span(doc_pieces, tok_start, tok_end, tokenizer,
                                                     example.orig_answer_text)
        spans = doc_spans(len(doc_pieces), max_seq_length - len(query) - 3, doc_stride)
        for span_index, (span_start, span_length) in enumerate(spans):
            tokens = ["[CLS]", *query, "[SEP]"]
            to_orig, max_context = {}, {}
            for i in range(span_length):
                to_orig[len(tokens)] = tok_to_orig[span_start + i]
                max_context[len(tokens)] = is_max_context(spans, span_index, span_start + i)
                tokens.append(doc_pieces[span_start + i])
            tokens.append("[SEP]")
            start = end = 0
            if is_training and not example.is_impossible:
                inside = span_start <= tok_start and tok_end <= span_start + span_length - 1
                if inside:
                    start = tok_start - span_start + len(query) + 2
                    end = tok_end - span_start + len(query) + 2
            rows["tokens"].append(tokens)
            rows["input_ids"].append(tokenizer.convert_tokens_to_ids(tokens))
            rows["segment_ids"].append([0] * (len(query) + 2) + [1] * (span_length + 1))
            rows["start"].append(start)
            rows["end"].append(end)
            rows["example"].append(example_index)
            rows["to_orig"].append(to_orig)
            rows["max_context"].append(max_context)
    n = len(rows["tokens"])
    input_ids = np.zeros((n, max_seq_length), np.int32)
    segment_ids = np.zeros((n, max_seq_length), np.int32)
    lengths = np.array([len(t) for t in rows["tokens"]], np.int32)
    for i in range(n):
        input_ids[i, :lengths[i]] = rows["input_ids"][i]
        segment_ids[i, :lengths[i]] = rows["segment_ids"][i]
    input_mask = (np.arange(max_seq_length)[None] < lengths[:, None]).astype(np.int32)
    return SquadFeatures(input_ids, segment_ids, input_mask, lengths,
                         np.array(rows["start"], np.int32), np.array(rows["end"], np.int32),
                         np.array(rows["example"], np.int32), rows["tokens"], rows["to_orig"],
                         rows["max_context"])
