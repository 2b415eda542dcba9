"""Start/end logits to answer texts, as google-research/bert's run_squad writes predictions.

Per question, over all its windows: the n_best_size best start and end
positions of each window; a candidate span must lie in the document part of
the window, start at a position whose window has its most context
(max-context rule), end at or after its start, and be at most
max_answer_length pieces. Candidates are ranked by start + end logit; their
word pieces are joined and mapped back to the original text (get_final_text).
SQuAD 2.0: score_null is the smallest start[0] + end[0] over the windows;
"" is predicted when score_null - best non-null score > the threshold, and
that difference is the question's null odds.
"""
from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from bert_jax.tasks.squad_data import SquadExample, SquadFeatures
from bert_jax.tokenization import BasicTokenizer


@dataclasses.dataclass
class Predictions:
    """What write_predictions writes, keyed by question id in input order."""

    answers: dict[str, str]  # predictions.json
    nbest: dict[str, list[dict]]  # nbest_predictions.json
    null_odds: dict[str, float]  # null_odds.json (SQuAD 2.0; empty otherwise)


def best_indexes(logits: np.ndarray, n_best_size: int) -> list[int]:
    """Indexes of the n_best_size largest logits (ties: the earlier index first)."""
    order = sorted(range(len(logits)), key=lambda i: logits[i], reverse=True)
    return order[:n_best_size]


def softmax(scores: list[float]) -> list[float]:
    """run_squad's _compute_softmax, in Python floats."""
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def _strip_spaces(text: str) -> tuple[str, dict[int, int]]:
    chars, to_spaced = [], {}
    for i, c in enumerate(text):
        if c == " ":
            continue
        to_spaced[len(chars)] = i
        chars.append(c)
    return "".join(chars), to_spaced


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool) -> str:
    """The part of `orig_text` (original words) that the word-piece answer `pred_text` covers.

    As run_squad: tokenize orig_text with the basic tokenizer, find pred_text
    in it, and map its character span back through the texts with spaces
    removed; when that is not possible, the whole orig_text.
    """
    tok_text = " ".join(BasicTokenizer(do_lower_case).tokenize(orig_text))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_to_spaced = _strip_spaces(orig_text)
    tok_ns, tok_to_spaced = _strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    tok_spaced_to_ns = {spaced: ns for ns, spaced in tok_to_spaced.items()}
    if start not in tok_spaced_to_ns or tok_spaced_to_ns[start] not in orig_to_spaced:
        return orig_text
    if end not in tok_spaced_to_ns or tok_spaced_to_ns[end] not in orig_to_spaced:
        return orig_text
    return orig_text[orig_to_spaced[tok_spaced_to_ns[start]]:
                     orig_to_spaced[tok_spaced_to_ns[end]] + 1]


def write_predictions(examples: list[SquadExample], features: SquadFeatures,
                      start_logits: np.ndarray, end_logits: np.ndarray, *, n_best_size: int,
                      max_answer_length: int, do_lower_case: bool,
                      version_2_with_negative: bool, null_score_diff_threshold: float = 0.0
                      ) -> Predictions:
    """run_squad's write_predictions over logits [num_windows, max_seq_length]."""
    windows_of = collections.defaultdict(list)
    for window, example_index in enumerate(features.example_index):
        windows_of[int(example_index)].append(window)
    answers, nbest_all, null_odds = {}, {}, {}
    for example_index, example in enumerate(examples):
        candidates = []  # (score order key, window, start, end, start logit, end logit)
        score_null, null_window, null_start, null_end = 1e6, 0, 0.0, 0.0
        for window in windows_of[example_index]:
            starts, ends = start_logits[window], end_logits[window]
            tokens = features.tokens[window]
            to_orig = features.token_to_orig_map[window]
            max_context = features.token_is_max_context[window]
            # Python floats, as run_squad reads the logits: sums in double precision.
            if version_2_with_negative and float(starts[0]) + float(ends[0]) < score_null:
                score_null = float(starts[0]) + float(ends[0])
                null_window, null_start, null_end = window, float(starts[0]), float(ends[0])
            for s in best_indexes(starts, n_best_size):
                for e in best_indexes(ends, n_best_size):
                    if s >= len(tokens) or e >= len(tokens) or s not in to_orig or e not in to_orig:
                        continue
                    if not max_context.get(s, False) or e < s or e - s + 1 > max_answer_length:
                        continue
                    candidates.append((window, s, e, float(starts[s]), float(ends[e])))
        if version_2_with_negative:
            candidates.append((null_window, 0, 0, null_start, null_end))
        # sorted() is stable: equal scores keep the order they were found in, as in run_squad.
        candidates.sort(key=lambda c: c[3] + c[4], reverse=True)
        seen, nbest = set(), []
        for window, s, e, start_logit, end_logit in candidates:
            if len(nbest) >= n_best_size:
                break
            if s > 0:
                tokens = features.tokens[window]
                to_orig = features.token_to_orig_map[window]
                tok_text = " ".join(tokens[s:e + 1]).replace(" ##", "").replace("##", "")
                tok_text = " ".join(tok_text.strip().split())
                orig_text = " ".join(example.doc_tokens[to_orig[s]:to_orig[e] + 1])
                text = get_final_text(tok_text, orig_text, do_lower_case)
                if text in seen:
                    continue
            else:
                text = ""
            seen.add(text)
            nbest.append((text, start_logit, end_logit))
        if version_2_with_negative and "" not in seen:
            nbest.append(("", null_start, null_end))
        if not nbest:  # run_squad's nonce prediction for the rare question with no candidate
            nbest.append(("empty", 0.0, 0.0))
        probabilities = softmax([s + e for _, s, e in nbest])
        nbest_all[example.qas_id] = [
            {"text": text, "probability": p, "start_logit": s, "end_logit": e}
            for (text, s, e), p in zip(nbest, probabilities)]
        if not version_2_with_negative:
            answers[example.qas_id] = nbest[0][0]
            continue
        best_non_null = next(((t, s, e) for t, s, e in nbest if t), None)
        if best_non_null is None:  # run_squad would fail here; nothing but "" is left
            null_odds[example.qas_id] = 0.0
            answers[example.qas_id] = ""
            continue
        diff = score_null - best_non_null[1] - best_non_null[2]
        null_odds[example.qas_id] = diff
        answers[example.qas_id] = "" if diff > null_score_diff_threshold else best_non_null[0]
    return Predictions(answers, nbest_all, null_odds)


def apply_threshold(predictions: Predictions, threshold: float) -> dict[str, str]:
    """The answers at another null threshold, without running the model again (SQuAD 2.0)."""
    answers = {}
    for qid, entries in predictions.nbest.items():
        best_non_null = next((entry["text"] for entry in entries if entry["text"]), "")
        answers[qid] = "" if predictions.null_odds.get(qid, 0.0) > threshold else best_non_null
    return answers
