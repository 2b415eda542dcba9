"""SQuAD feature conversion and decoding, against run_squad's rules and the official text."""
import json

import numpy as np
import pytest

from bert_jax.tasks import squad_data, squad_decoding, squad_metrics
from bert_jax.tokenization import FullTokenizer

# Answerable dev-v1.1 questions whose labelled window does not map back to the
# answer, from tokenisation alone (google-research/bert's conversion has the same
# ones); an upper bound, so a regression shows.
MAX_ROUND_TRIP_FAILURES = 37  # measured: 37 of 10,570


def test_windows_advance_by_the_stride_and_cover_everything():
    assert squad_data.doc_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert squad_data.doc_spans(3, 4, 2) == [(0, 3)]
    spans = squad_data.doc_spans(1000, 300, 128)
    assert spans[0] == (0, 300) and all(b[0] - a[0] == 128 for a, b in zip(spans, spans[1:]))
    assert spans[-1][0] + spans[-1][1] == 1000


def test_max_context_prefers_the_most_centred_window():
    spans = [(0, 5), (3, 5)]  # pieces 3 and 4 are in both
    # piece 3: left 3 / right 1 in the first (score 1.05), left 0 in the second (0.05).
    assert squad_data.is_max_context(spans, 0, 3) and not squad_data.is_max_context(spans, 1, 3)
    # piece 4: min(4, 0) = 0 in the first, min(1, 3) = 1 in the second.
    assert squad_data.is_max_context(spans, 1, 4)


def test_get_final_text_maps_pieces_back_to_the_original():
    # The answer is part of an original word, and lower-cased by the tokenizer.
    assert squad_decoding.get_final_text("steve smith", "Steve Smith's", True) == "Steve Smith"
    # Not found: the whole original text.
    assert squad_decoding.get_final_text("jones", "Steve Smith's", True) == "Steve Smith's"


def test_every_answer_round_trips_through_its_window(shared_data):
    """The labelled window of each dev-v1.1 answer decodes back to the answer."""
    data = squad_data.load_squad_json(str(shared_data / "squad" / "dev-v1.1.json"))["data"]
    tokenizer = FullTokenizer(str(shared_data / "google_bert" / "vocab.txt"), do_lower_case=True)
    report = squad_data.ReadReport()
    examples = squad_data.read_examples(data, is_training=True, version_2_with_negative=False,
                                        report=report, first_answer_only=True)
    features = squad_data.convert_examples(examples, tokenizer, max_seq_length=384,
                                           doc_stride=128, max_query_length=64, is_training=True)
    failures, checked = 0, set()
    for window in range(len(features.tokens)):
        start, end = features.start_positions[window], features.end_positions[window]
        example = examples[features.example_index[window]]
        if start == 0 or example.qas_id in checked:
            continue
        checked.add(example.qas_id)
        tok_text = " ".join(features.tokens[window][start:end + 1]).replace(" ##", "")
        to_orig = features.token_to_orig_map[window]
        orig = " ".join(example.doc_tokens[to_orig[start]:to_orig[end] + 1])
        text = squad_decoding.get_final_text(tok_text.replace("##", ""), orig, True)
        if (squad_metrics.normalize_answer(text)
                != squad_metrics.normalize_answer(example.orig_answer_text)):
            failures += 1
    print(f"{failures} of {len(checked)} answers do not round-trip; {len(report.skipped)} "
          "skipped")
    assert len(checked) == len(examples) and len(examples) > 10_000
    assert failures <= MAX_ROUND_TRIP_FAILURES


def test_decoding_picks_the_best_valid_span_and_the_null_answer(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "who", "built", "it", "?", "the",
         "tower", "was", "by", "eiffel", "'", "s", "company", "."]) + "\n")
    tokenizer = FullTokenizer(str(tmp_path / "vocab.txt"), do_lower_case=True)
    data = [{"paragraphs": [{"context": "The tower was built by Eiffel's company.",
                             "qas": [{"id": "q", "question": "Who built it?",
                                      "answers": [{"text": "Eiffel's company",
                                                   "answer_start": 23}]}]}]}]
    examples = squad_data.read_examples(data, is_training=False, version_2_with_negative=False)
    features = squad_data.convert_examples(examples, tokenizer,
                                           max_seq_length=24, doc_stride=8, max_query_length=8,
                                           is_training=False)
    tokens = features.tokens[0]
    start_logits = np.full((1, 24), -5.0, np.float32)
    end_logits = np.full((1, 24), -5.0, np.float32)
    start_logits[0, tokens.index("eiffel")] = 3.0
    end_logits[0, tokens.index("company")] = 2.0
    end_logits[0, 1] = 9.0  # in the question: never an answer
    result = squad_decoding.write_predictions(
        examples, features, start_logits, end_logits, n_best_size=5, max_answer_length=30,
        do_lower_case=True, version_2_with_negative=False)
    assert result.answers == {"q": "Eiffel's company"}
    assert json.dumps(result.nbest["q"][0]["probability"]) and len(result.nbest["q"]) <= 5
    start_logits[0, 0] = end_logits[0, 0] = 4.0  # the null score: 8 > 3 + 2
    v2 = squad_decoding.write_predictions(
        examples, features, start_logits, end_logits, n_best_size=5, max_answer_length=30,
        do_lower_case=True, version_2_with_negative=True)
    assert v2.answers == {"q": ""} and v2.null_odds["q"] == pytest.approx(8.0 - 5.0)
    assert squad_decoding.apply_threshold(v2, 3.5) == {"q": "Eiffel's company"}

