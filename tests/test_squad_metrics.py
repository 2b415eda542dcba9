"""SQuAD evaluation: the official scripts' numbers, to the last digit."""
import json
import os
import random
import subprocess
import sys

import pytest

from bert_jax.tasks import squad_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Outputs of the official evaluate-v1.1.py / evaluate-v2.0.py on the shared dev
# files with the predictions `partly_right_predictions` makes (seed 0), run once.
EXPECTED = os.path.join(REPO, "tests", "data", "squad_official_scores.json")


def partly_right_predictions(dataset: list, seed: int, allow_missing: bool):
    """Deterministic predictions of every kind the formulas treat differently.

    Returns (predictions, no-answer probabilities).
    """
    rng = random.Random(seed)
    predictions, na_probs = {}, {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"].split()
            for qa in paragraph["qas"]:
                golds = [a["text"] for a in qa["answers"]] or [""]
                gold = rng.choice(golds)
                words = gold.split()
                start = rng.randrange(max(1, len(context) - 5))
                kind = rng.random()
                if kind < 0.05 and allow_missing:
                    continue
                if kind < 0.30:
                    text = gold  # exact
                elif kind < 0.40:
                    text = f"The {gold.upper()}!"  # articles, case, punctuation
                elif kind < 0.55:
                    text = " ".join(words[: max(1, len(words) // 2)])  # partial
                elif kind < 0.70:
                    text = " ".join(words + context[start:start + 2])  # too long
                elif kind < 0.80:
                    text = ""  # no answer
                elif kind < 0.90:
                    text = " ".join(context[start:start + 4])  # elsewhere
                else:
                    text = f"  an   {gold}\u2019s ,,"  # whitespace, unicode quote
                predictions[qa["id"]] = text
                na_probs[qa["id"]] = round(rng.random(), 2)  # ties on purpose
    return predictions, na_probs


def load(shared_data, name):
    with open(shared_data / "squad" / name, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def expected():
    with open(EXPECTED) as f:
        return json.load(f)


def test_gold_answers_score_100(shared_data):
    v1 = load(shared_data, "dev-v1.1.json")["data"]
    gold = {qa["id"]: qa["answers"][0]["text"] for a in v1 for p in a["paragraphs"]
            for qa in p["qas"]}
    assert squad_metrics.evaluate_v1(v1, gold) == {"exact_match": 100.0, "f1": 100.0}
    v2 = load(shared_data, "dev-v2.0-half.json")["data"]
    gold = {qa["id"]: (qa["answers"][0]["text"] if qa["answers"] else "")
            for a in v2 for p in a["paragraphs"] for qa in p["qas"]}
    result = squad_metrics.evaluate_v2(v2, gold)
    assert result["exact"] == result["f1"] == 100.0 and result["total"] == 6078
    assert result["HasAns_total"] == 2910 and result["NoAns_total"] == 3168


def test_v1_equals_the_official_script(shared_data, expected):
    v1 = load(shared_data, "dev-v1.1.json")["data"]
    predictions, _ = partly_right_predictions(v1, seed=0, allow_missing=True)
    assert squad_metrics.evaluate_v1(v1, predictions) == expected["v1.1"]


@pytest.mark.parametrize("threshold", [1.0, 0.5])
def test_v2_equals_the_official_script(shared_data, expected, threshold):
    v2 = load(shared_data, "dev-v2.0-half.json")["data"]
    predictions, na_probs = partly_right_predictions(v2, seed=0, allow_missing=False)
    assert squad_metrics.evaluate_v2(v2, predictions) == expected["v2.0"]
    result = squad_metrics.evaluate_v2(v2, predictions, na_probs, threshold)
    assert list(result) == list(expected[f"v2.0_na_{threshold}"])  # the official key order
    assert result == expected[f"v2.0_na_{threshold}"]


def test_the_formulas_on_hand_made_cases():
    data = [{"paragraphs": [{"qas": [
        {"id": "a", "answers": [{"text": "the Eiffel Tower"}, {"text": "Eiffel"}]},
        {"id": "b", "answers": [{"text": "1889"}]},
        {"id": "c", "answers": [{"text": "Gustave Eiffel's company"}]},
        {"id": "d", "answers": []},
    ]}]}]
    # a: "Eiffel Tower!" normalises to gold 1 (article, punctuation) -> EM 1, F1 1.
    # b: missing. c: "company of Eiffel" against "gustave eiffels company" shares only
    # "company" ("eiffels" is one token): P = R = 1/3 -> F1 1/3. d: "" when there is none.
    predictions = {"a": "Eiffel Tower!", "c": "company of Eiffel", "d": ""}
    answerable = [{"paragraphs": [{"qas": data[0]["paragraphs"][0]["qas"][:3]}]}]
    v1 = squad_metrics.evaluate_v1(answerable, predictions)
    assert v1 == {"exact_match": 100.0 / 3, "f1": 100.0 * (1 + 1 / 3) / 3}
    v2 = squad_metrics.evaluate_v2(data, predictions)
    # Missing "b" is left out of the totals, as the official v2.0 script does.
    assert v2["total"] == 3 and v2["exact"] == pytest.approx(200 / 3)
    assert v2["f1"] == pytest.approx(100 * (1 + 1 / 3 + 1) / 3)
    assert v2["NoAns_exact"] == 100.0 and v2["HasAns_total"] == 2
    # Best threshold: "d" (no answer, predicted "") costs nothing; "a" and "c" add
    # when their probabilities sit below the threshold.
    na = {"a": 0.1, "c": 0.9, "d": 0.5}
    best = squad_metrics.evaluate_v2(data, predictions, na, 1.0)
    assert best["best_exact"] == pytest.approx(100 * 2 / 3) and best["best_exact_thresh"] == 0.1
    assert best["best_f1"] == pytest.approx(100 * (2 + 1 / 3) / 3)
    assert best["best_f1_thresh"] == 0.9


def test_cli_prints_the_official_keys(tmp_path, shared_data):
    data = shared_data / "squad" / "dev-v2.0-half.json"
    v2 = load(shared_data, "dev-v2.0-half.json")["data"]
    predictions, na_probs = partly_right_predictions(v2, seed=0, allow_missing=False)
    (tmp_path / "p.json").write_text(json.dumps(predictions))
    (tmp_path / "na.json").write_text(json.dumps(na_probs))
    out = subprocess.run([sys.executable, "-m", "bert_jax.squad_eval", str(data),
                          str(tmp_path / "p.json"), "--na-prob-file", str(tmp_path / "na.json")],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert list(json.loads(out)) == [
        "exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact",
        "NoAns_f1", "NoAns_total", "best_exact", "best_exact_thresh", "best_f1",
        "best_f1_thresh"]


def test_malformed_files_name_the_path_and_key(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        squad_metrics.evaluate_files(str(tmp_path / "bad.json"), str(tmp_path / "bad.json"))
    (tmp_path / "nodata.json").write_text('{"version": "1.1"}')
    with pytest.raises(ValueError, match="nodata.json: no 'data' key"):
        squad_metrics.evaluate_files(str(tmp_path / "nodata.json"), str(tmp_path / "bad.json"))
