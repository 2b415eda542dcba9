"""The official SQuAD evaluation (v1.1 and v2.0), computed the same way to the last digit.

v1.1 (evaluate-v1.1.py): exact_match and f1, each the max over the gold
answers, averaged over every question of the data file in percent; a question
without a prediction scores 0 (and is named on stderr).

v2.0 (evaluate-v2.0.py): exact and f1 with the empty string as the only gold
answer of an unanswerable question, F1 of empty against non-empty is 0;
HasAns_/NoAns_ splits; with no-answer probabilities, a prediction whose
probability exceeds `na_prob_thresh` counts as "no answer", and best_exact /
best_f1 are the scores at the best threshold, found by sweeping the questions
in order of probability. As in the official script, a question without a
prediction is left out of the totals (the official script then fails with a
KeyError in the HasAns/NoAns splits; here those splits count only the
questions that have a prediction, and the missing ids are named on stderr).
"""
from __future__ import annotations

import collections
import json
import re
import string
import sys

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower case, drop punctuation, drop a/an/the, collapse whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", s).split())


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def exact_score(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_v1(gold: str, prediction: str) -> float:
    """evaluate-v1.1.py's f1_score (empty answers score 0, never 1)."""
    predicted, truth = normalize_answer(prediction).split(), normalize_answer(gold).split()
    same = sum((collections.Counter(predicted) & collections.Counter(truth)).values())
    if same == 0:
        return 0
    precision, recall = same / len(predicted), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def f1_v2(gold: str, prediction: str) -> float:
    """evaluate-v2.0.py's compute_f1: two empty answers agree (1), one empty scores 0."""
    truth, predicted = _tokens(gold), _tokens(prediction)
    if not truth or not predicted:
        return int(truth == predicted)
    same = sum((collections.Counter(truth) & collections.Counter(predicted)).values())
    if same == 0:
        return 0
    precision, recall = same / len(predicted), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def _questions(dataset: list):
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def evaluate_v1(dataset: list, predictions: dict) -> dict:
    """{"exact_match", "f1"} of evaluate-v1.1.py (dataset = the file's "data")."""
    exact = f1 = total = 0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            print(f"Unanswered question {qa['id']} will receive score 0.", file=sys.stderr)
            continue
        golds = [answer["text"] for answer in qa["answers"]]
        prediction = predictions[qa["id"]]
        exact += max(exact_score(g, prediction) for g in golds)
        f1 += max(f1_v1(g, prediction) for g in golds)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def _raw_scores_v2(dataset: list, predictions: dict) -> tuple[dict, dict]:
    exact, f1 = {}, {}
    for qa in _questions(dataset):
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        if qa["id"] not in predictions:
            print(f"Missing prediction for {qa['id']}", file=sys.stderr)
            continue
        prediction = predictions[qa["id"]]
        exact[qa["id"]] = max(exact_score(g, prediction) for g in golds)
        f1[qa["id"]] = max(f1_v2(g, prediction) for g in golds)
    return exact, f1


def _with_threshold(scores: dict, na_probs: dict, has_answer: dict, threshold: float) -> dict:
    return {qid: float(not has_answer[qid]) if na_probs[qid] > threshold else s
            for qid, s in scores.items()}


def _totals(exact: dict, f1: dict, qids=None) -> dict:
    qids = list(exact) if qids is None else qids
    return {"exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
            "f1": 100.0 * sum(f1[q] for q in qids) / len(qids), "total": len(qids)}


def _best_threshold(predictions: dict, scores: dict, na_probs: dict,
                    has_answer: dict) -> tuple[float, float]:
    score = best = sum(1 for has in has_answer.values() if not has)
    threshold = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            score += scores[qid]
        elif predictions[qid]:
            score -= 1
        if score > best:
            best, threshold = score, na_probs[qid]
    return 100.0 * best / len(scores), threshold


def evaluate_v2(dataset: list, predictions: dict, na_probs: dict | None = None,
                na_prob_thresh: float = 1.0) -> dict:
    """The dict evaluate-v2.0.py prints, keys in its order."""
    has_answer = {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}
    exact_raw, f1_raw = _raw_scores_v2(dataset, predictions)
    probs = na_probs if na_probs is not None else {k: 0.0 for k in predictions}
    exact = _with_threshold(exact_raw, probs, has_answer, na_prob_thresh)
    f1 = _with_threshold(f1_raw, probs, has_answer, na_prob_thresh)
    out = _totals(exact, f1)
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, has in has_answer.items() if has == wanted and q in exact]
        if qids:
            out.update({f"{prefix}_{k}": v for k, v in _totals(exact, f1, qids).items()})
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = _best_threshold(
            predictions, exact_raw, probs, has_answer)
        out["best_f1"], out["best_f1_thresh"] = _best_threshold(
            predictions, f1_raw, probs, has_answer)
    return out


def is_v2(dataset_json: dict) -> bool:
    """Whether a SQuAD file is v2.0 (its version, or unanswerable questions in it)."""
    if str(dataset_json.get("version", "")).startswith("v2"):
        return True
    return any(qa.get("is_impossible") for qa in _questions(dataset_json["data"]))


def evaluate_files(data_file: str, prediction_file: str, na_prob_file: str | None = None,
                   na_prob_thresh: float = 1.0) -> dict:
    """The official script's result for these files (its version read from the data file)."""
    data = _load_json(data_file, "data")
    predictions = _load_json(prediction_file)
    if not isinstance(predictions, dict):
        raise ValueError(f"{prediction_file}: expected a JSON object of id -> answer text")
    if is_v2(data) or na_prob_file:
        na_probs = _load_json(na_prob_file) if na_prob_file else None
        return evaluate_v2(data["data"], predictions, na_probs, na_prob_thresh)
    return evaluate_v1(data["data"], predictions)


def _load_json(path: str, key: str | None = None):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if key is not None and (not isinstance(value, dict) or key not in value):
        raise ValueError(f"{path}: no '{key}' key (not a SQuAD data file)")
    return value
