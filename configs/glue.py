"""GLUE fine-tuning configs (google-research/bert's run_classifier flag names).

    python -m bert_jax.finetune_glue --config configs/glue.py:mrpc --workdir /tmp/mrpc \
        --config.data_dir=GLUE_DIR --config.init_checkpoint=PRETRAIN_WORKDIR/export

Presets (after the colon): a task name, cola sst2 mrpc stsb qqp mnli qnli rte
wnli ax (ax trains MNLI and also predicts the diagnostic set), or custom (your
own TSV/CSV: set the custom.* fields). Keys may follow after a comma:
`mrpc,seed=3`, `custom,labels=ham|spam`, `rte,sweep=paper,seeds=0|1|2|3|4`
(the BERT paper's grid of learning rates, batch sizes and epochs).
"""
import ml_collections

from bert_jax.training.mesh import DEFAULT_RULES

TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "ax", "custom")


def _parse(arg: str) -> tuple[str, dict]:
    task, *pairs = [part.strip() for part in (arg or "mrpc").split(",")]
    keys = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"configs/glue.py:{arg}: {pair!r} is not key=value")
        keys[key] = value
    return task, keys


def get_config(arg: str = "mrpc") -> ml_collections.ConfigDict:
    """The fine-tuning config of `arg` = TASK[,key=value...] (see the module docstring)."""
    task, keys = _parse(arg)
    if task not in TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; tasks: {', '.join(TASKS)}")
    c = ml_collections.ConfigDict()
    c.task = task
    c.data_dir = ""  # folder with the GLUE task folders (CoLA/, MRPC/, ..., diagnostic/)
    # "files": data_dir in GLUE's layout; "tfds": tensorflow-datasets glue/* prepared
    # locally (in tfds_data_dir, or TFDS's default); nothing is downloaded.
    c.data_source = "files"
    c.tfds_data_dir = ""
    # Any checkpoint convert reads: a bert_jax folder (a pretraining run's
    # export/), a Hugging Face folder, a google-research/bert bert_model.ckpt.
    c.init_checkpoint = ""
    c.vocab_file = ""  # default: the checkpoint's own vocab.txt
    # None: the checkpoint's tokenizer_config.json, else True (uncased BERT).
    c.do_lower_case = ml_collections.config_dict.placeholder(bool)
    c.max_seq_length = 128  # tokens after WordPiece, [CLS] and [SEP]s
    c.train_batch_size = 32  # global
    c.eval_batch_size = 64  # global, for dev and test predictions
    c.learning_rate = 2e-5  # peak; the paper's grid: 5e-5, 3e-5, 2e-5
    c.num_train_epochs = 3.0
    c.warmup_proportion = 0.1  # of the training steps, linear warmup, then linear decay
    c.seed = 0  # head init, dropout and example order
    # "bert_adam": google-research/bert's Adam without bias correction (what
    # run_classifier uses); "adamw": bias-corrected; "lamb".
    c.optimizer = "bert_adam"
    c.weight_decay = 0.01  # not on LayerNorm or biases
    c.adam_b1 = 0.9
    c.adam_b2 = 0.999
    c.adam_eps = 1e-6
    c.max_grad_norm = 1.0  # global-norm clipping (0 = off)
    c.dtype = "float32"  # compute dtype ("bfloat16" on GPUs/TPUs)
    c.freeze_encoder = False  # train only the head (feature-based use)
    c.class_weights = []  # per label, for unbalanced classes; [] = unweighted
    # Training batches are packed: the same examples per step, laid out
    # several to a row of max_seq_length (attention stays within each), so
    # little is computed on padding. Off: each batch is padded to the
    # smallest of length_buckets that holds its longest row (also used for
    # evaluation; max_seq_length is always the last bucket).
    c.packing = True
    c.packed_row_length = 64  # at least; rows grow to the batch's longest example's bucket
    c.length_buckets = [16, 32, 48, 64, 80, 96, 112]
    c.log_every = 50  # steps between log lines / metrics.jsonl rows
    c.progress_bar = True  # steps, ETA and examples/s on stderr
    c.checkpoint_every = 0  # steps between checkpoints (0 = once per epoch)
    c.keep_checkpoints = 2

    # A user's own task (task "custom"): files with a header row.
    c.custom = ml_collections.ConfigDict()
    c.custom.name = "custom"  # also the predictions file's name
    c.custom.train_file = ""
    c.custom.eval_file = ""
    c.custom.test_file = ""  # optional; predictions/<name>.tsv
    c.custom.test_index = "index"  # the test file's id column
    c.custom.text_a = ""  # column names
    c.custom.text_b = ""  # empty: single-sentence task
    c.custom.label = ""
    c.custom.labels = []  # label strings, in order; [] = regression on a number
    c.custom.delimiter = "\t"  # "," for CSV

    # The BERT paper's grid, run one trial after another in one process
    # (`mrpc,sweep=paper` or --config.sweep.enabled=True); the result is the
    # setting with the best median dev score over seeds (sweep_results.json).
    c.sweep = ml_collections.ConfigDict()
    c.sweep.enabled = False
    c.sweep.learning_rates = [5e-5, 3e-5, 2e-5]
    c.sweep.batch_sizes = [16, 32]
    c.sweep.epochs = [2.0, 3.0, 4.0]
    c.sweep.seeds = [0]  # e.g. [0, 1, 2, 3, 4]: the paper's restarts for small tasks

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1  # data parallel over all devices by default
    c.mesh.fsdp = 1
    c.mesh.tensor = 1
    c.mesh.rules = [list(rule) for rule in DEFAULT_RULES]

    if task in ("mnli", "ax", "qqp", "qnli", "sst2"):
        c.log_every = 200
    for key, value in keys.items():
        if key == "labels":
            c.custom.labels = value.split("|")
        elif key == "sweep":
            if value != "paper":
                raise ValueError(f"configs/glue.py:{arg}: sweep={value!r}; only sweep=paper")
            c.sweep.enabled = True
        elif key == "seeds":
            c.sweep.seeds = [int(s) for s in value.split("|")]
        elif key in c:
            c[key] = type(c[key])(value) if not isinstance(c[key], list) else value.split("|")
        else:
            raise ValueError(f"configs/glue.py:{arg}: unknown key {key!r}")
    return c
