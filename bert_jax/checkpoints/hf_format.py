"""Hugging Face transformers checkpoints: read and write BERT folders.

A folder holds `config.json` and the weights as `model.safetensors` (or a
sharded `model.safetensors.index.json`, or a PyTorch `pytorch_model.bin`).
Keys may come with the `bert.` prefix (BertForPreTraining, BertForMaskedLM,
...) or without (BertModel). Written folders load with
`transformers.BertForPreTraining.from_pretrained` (or `BertModel` when there are
no heads), offline, with no missing or unexpected keys.
"""
from __future__ import annotations

import json
import os

import numpy as np

from bert_jax.checkpoints.flat_params import (
    CheckpointData,
    TaskHead,
    read_do_lower_case,
    vocab_file_beside,
)
from bert_jax.checkpoints.weight_names import (
    ENCODER_PREFIX,
    TASK_HEADS,
    encoder_names,
    export_tensor,
    import_tensors,
    task_head_names,
    weight_names,
)
from bert_jax.model.config import BertConfig

# transformers' activation names -> ours. "gelu" there is the exact erf form.
_HF_TO_OURS_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                   "relu": "relu", "tanh": "tanh"}
_OURS_TO_HF_ACT = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "tanh": "tanh"}
_CONFIG_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
                  "max_position_embeddings", "type_vocab_size", "initializer_range",
                  "layer_norm_eps")
# Keys that carry no weights of their own: buffers and the MLM decoder, whose
# weight is tied to the word embeddings and whose bias to cls.predictions.bias.
_TIED_OR_BUFFERS = ("bert.embeddings.position_ids", "cls.predictions.decoder.weight",
                    "cls.predictions.decoder.bias")


def read_config(folder: str) -> BertConfig:
    """Our BertConfig from a transformers `config.json`; rejects what we do not implement."""
    path = os.path.join(folder, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no config.json in {folder}")
    with open(path) as f:
        hf = json.load(f)
    unsupported = {
        "position_embedding_type": ("absolute", None),
        "is_decoder": (False, None),
        "add_cross_attention": (False, None),
    }
    for field, allowed in unsupported.items():
        if hf.get(field) not in allowed:
            raise ValueError(f"{path}: {field}={hf[field]!r} is not supported "
                             f"(only {allowed[0]!r})")
    if hf.get("model_type", "bert") != "bert":
        raise ValueError(f"{path}: model_type={hf['model_type']!r}, expected 'bert'")
    act = hf.get("hidden_act", "gelu")
    if act not in _HF_TO_OURS_ACT:
        raise ValueError(f"{path}: hidden_act={act!r} is not supported; "
                         f"supported: {sorted(_HF_TO_OURS_ACT)}")
    values = {k: hf[k] for k in _CONFIG_FIELDS if k in hf}
    return BertConfig(hidden_act=_HF_TO_OURS_ACT[act], **values)


def _read_state_dict(folder: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    single = os.path.join(folder, "model.safetensors")
    index = os.path.join(folder, "model.safetensors.index.json")
    pytorch = os.path.join(folder, "pytorch_model.bin")
    if os.path.exists(single):
        return load_file(single)
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        tensors = {}
        for shard in shards:
            tensors.update(load_file(os.path.join(folder, shard)))
        return tensors
    if os.path.exists(pytorch):
        try:
            import torch
        except ImportError as e:
            raise ImportError(f"{pytorch} needs PyTorch to read; install torch or convert the "
                              "folder to safetensors") from e
        state = torch.load(pytorch, map_location="cpu", weights_only=True)
        return {k: v.float().numpy() if v.is_floating_point() else v.numpy()
                for k, v in state.items()}
    raise FileNotFoundError(f"{folder}: no model.safetensors, model.safetensors.index.json or "
                            "pytorch_model.bin")


def _canonical_key(key: str) -> str:
    # BertModel saves without the "bert." prefix; old checkpoints name
    # LayerNorm parameters gamma/beta.
    if not key.startswith(("bert.", "cls.", "classifier.", "qa_outputs.")):
        key = "bert." + key
    if ".LayerNorm." in key:
        key = key.replace(".gamma", ".weight").replace(".beta", ".bias")
    return key


def load(folder: str) -> CheckpointData:
    """Reads a transformers BERT folder.

    The params are in our layout; `missing` lists what the checkpoint does
    not have (e.g. no pretraining heads in a BertModel): nothing missing is
    invented. A vocab.txt beside the weights is reported as `vocab_file`.
    """
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"Hugging Face checkpoint folder not found: {folder}")
    config = read_config(folder)
    state = {_canonical_key(k): v for k, v in _read_state_dict(folder).items()}
    if "cls.predictions.bias" not in state and "cls.predictions.decoder.bias" in state:
        state["cls.predictions.bias"] = state["cls.predictions.decoder.bias"]
    decoder = state.get("cls.predictions.decoder.weight")
    word = state.get("bert.embeddings.word_embeddings.weight")
    if decoder is not None and word is not None and not np.array_equal(decoder, word):
        raise ValueError(f"{folder}: cls.predictions.decoder.weight is not tied to the word "
                         "embeddings; untied MLM decoders are not supported")

    names = weight_names(config)
    task = _task_head(folder, state)
    if task is not None:
        kernel = TASK_HEADS[task.architecture][1] + ".weight"
        names += task_head_names(config, task.architecture, state[kernel].shape[0])
    known = {n.hf for n in names} | set(_TIED_OR_BUFFERS)
    unknown = sorted(set(state) - known)
    if unknown:
        raise ValueError(f"{folder}: unknown tensor(s) {unknown[:8]} ({len(unknown)} in all); "
                         "not a BERT checkpoint we can read")
    flat, report = import_tensors(config, set(state), state.__getitem__, "hf", folder, names)
    if task is not None:
        report = [line for line in report if "head" not in line]  # a fine-tuned model
    return CheckpointData(config, flat, report, vocab_file_beside(folder),
                          read_do_lower_case(folder), task)


def _task_head(folder: str, state: dict) -> TaskHead | None:
    """The fine-tuned head of a BertFor<Task> folder (from config.json), or None."""
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    architecture = (hf.get("architectures") or [""])[0]
    if architecture not in TASK_HEADS:
        if any(k.startswith(("classifier.", "qa_outputs.")) for k in state):
            raise ValueError(f"{folder}: task head tensors, but config.json's architectures "
                             f"{hf.get('architectures')} name none of {sorted(TASK_HEADS)}")
        return None
    id2label = hf.get("id2label") or {}
    labels = tuple(id2label[k] for k in sorted(id2label, key=int))
    if hf.get("problem_type") == "regression" or architecture in (
            "BertForQuestionAnswering", "BertForMultipleChoice"):
        labels = ()
    return TaskHead(architecture, labels, hf.get("problem_type") or "")


def hf_config_dict(config: BertConfig, architecture: str, task: TaskHead | None = None,
                   num_outputs: int = 0) -> dict:
    """A transformers config.json for our config (and a fine-tuned head's labels)."""
    values = {k: getattr(config, k) for k in _CONFIG_FIELDS}
    values.update(architectures=[architecture], model_type="bert",
                  hidden_act=_OURS_TO_HF_ACT[config.hidden_act],
                  position_embedding_type="absolute", pad_token_id=0, dtype="float32",
                  tie_word_embeddings=True)
    if task is not None and architecture != "BertForMultipleChoice":
        labels = task.labels or tuple(f"LABEL_{i}" for i in range(num_outputs))
        values.update(num_labels=num_outputs, id2label=dict(enumerate(labels)),
                      label2id={label: i for i, label in enumerate(labels)})
        if task.problem_type:
            values["problem_type"] = task.problem_type
    return values


def save(folder: str, config: BertConfig, flat: dict[str, np.ndarray],
         task: TaskHead | None = None) -> str:
    """Writes `flat` as a transformers folder (into `folder`, which must exist and be empty).

    With `task`, its architecture (BertForSequenceClassification, ...: the
    encoder under `bert.`, the head, the labels in config.json); otherwise
    BertForPreTraining when both pretraining heads are present, else BertModel
    (encoder keys without the `bert.` prefix, as transformers saves it).
    Returns the architecture written.
    """
    from safetensors.numpy import save_file

    num_outputs = 0
    if task is not None:
        architecture, prefix = task.architecture, True
        ours_kernel = TASK_HEADS[architecture][0] + "/kernel"
        if ours_kernel not in flat:
            raise KeyError(f"cannot export a {architecture}: parameter {ours_kernel} is missing")
        num_outputs = flat[ours_kernel].shape[-1]
        names = (encoder_names(config, architecture)
                 + task_head_names(config, architecture, num_outputs))
    else:
        names = weight_names(config)
        prefix = all(n.ours in flat for n in names)
        architecture = "BertForPreTraining" if prefix else "BertModel"
        names = [n for n in names if prefix or n.ours.startswith(ENCODER_PREFIX)]
    tensors = {}
    for name in names:
        if name.ours not in flat:
            raise KeyError(f"cannot export: parameter {name.ours} is missing")
        key = name.hf if prefix else name.hf[len("bert."):]
        tensors[key] = export_tensor(name, flat[name.ours], "hf").astype(np.float32)
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf_config_dict(config, architecture, task, num_outputs), f, indent=2,
                  sort_keys=True)
        f.write("\n")
    return architecture
