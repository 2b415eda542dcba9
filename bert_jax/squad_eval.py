"""The official SQuAD evaluation: v1.1's exact_match/f1, v2.0's full report.

    python -m bert_jax.squad_eval DATA_FILE PRED_FILE [--na-prob-file F] [--na-prob-thresh T]

Prints the JSON the official evaluate-v1.1.py / evaluate-v2.0.py print (the
version is read from the data file; --na-prob-file implies v2.0), computed
the same way (bert_jax/tasks/squad_metrics.py).
"""
import argparse
import json

from bert_jax.tasks.squad_metrics import evaluate_files


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data_file", help="SQuAD JSON (dev-v1.1.json, dev-v2.0.json)")
    parser.add_argument("pred_file", help="JSON object: question id -> predicted answer text")
    parser.add_argument("--na-prob-file", "-n", help="JSON object: id -> no-answer probability")
    parser.add_argument("--na-prob-thresh", "-t", type=float, default=1.0,
                        help="predict no answer when the probability exceeds this")
    args = parser.parse_args(argv)
    result = evaluate_files(args.data_file, args.pred_file, args.na_prob_file,
                            args.na_prob_thresh)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
