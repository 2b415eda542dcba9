"""Where each of our parameters lives in Hugging Face and google-research/bert.

One table, used in both directions by the converters. Each row names our
parameter, its Hugging Face (PyTorch) key, its google-research/bert (TF v1)
variable, and its layout:

- "plain": same values everywhere (embeddings, LayerNorm, biases), up to a
  reshape into our [heads, head_dim] axes.
- "linear": a dense kernel. Ours and TF store [in, out]; PyTorch's nn.Linear
  stores weight [out, in], so Hugging Face needs a transpose.
- "linear_tf_out_in": google-research/bert's NSP `output_weights`, which it
  stores [out, in] like PyTorch (it multiplies with transpose_b=True).

Our multi-axis kernels (query/key/value [embed, heads, head_dim], attention
output [heads, head_dim, embed]) are the 2-D [in, out] matrix reshaped.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from bert_jax.model.config import BertConfig

ENCODER_PREFIX = "bert/"


@dataclasses.dataclass(frozen=True)
class WeightName:
    ours: str  # path in BertForPreTraining, e.g. bert/pooler/kernel
    hf: str  # key in transformers' BertForPreTraining state dict
    tf: str  # variable in a google-research/bert checkpoint
    layout: str  # "plain", "linear" or "linear_tf_out_in"
    shape: tuple[int, ...]  # our shape
    external: tuple[int, ...]  # TF's shape, but [in, out] for every kernel


def _dense(ours, hf, tf, in_shape, out_shape, layout="linear"):
    fan_in, fan_out = int(np.prod(in_shape)), int(np.prod(out_shape))
    return [WeightName(f"{ours}/kernel", f"{hf}.weight", f"{tf}/kernel", layout,
                       tuple(in_shape) + tuple(out_shape), (fan_in, fan_out)),
            WeightName(f"{ours}/bias", f"{hf}.bias", f"{tf}/bias", "plain", tuple(out_shape),
                       (fan_out,))]


def _layer_norm(ours, hf, tf, h):
    return [WeightName(f"{ours}/scale", f"{hf}.weight", f"{tf}/gamma", "plain", (h,), (h,)),
            WeightName(f"{ours}/bias", f"{hf}.bias", f"{tf}/beta", "plain", (h,), (h,))]


def weight_names(config: BertConfig) -> list[WeightName]:
    """Every parameter of BertForPreTraining for this config, in a fixed order."""
    h, n, d, m = (config.hidden_size, config.num_attention_heads, config.head_dim,
                  config.intermediate_size)
    names = []
    for kind, rows in (("word", config.vocab_size), ("position", config.max_position_embeddings),
                       ("token_type", config.type_vocab_size)):
        names.append(WeightName(f"bert/embeddings/{kind}_embeddings/embedding",
                                f"bert.embeddings.{kind}_embeddings.weight",
                                f"bert/embeddings/{kind}_embeddings", "plain", (rows, h),
                                (rows, h)))
    names += _layer_norm("bert/embeddings/layer_norm", "bert.embeddings.LayerNorm",
                         "bert/embeddings/LayerNorm", h)
    for i in range(config.num_hidden_layers):
        ours = f"bert/encoder/layers/{i}"
        hf, tf = f"bert.encoder.layer.{i}", f"bert/encoder/layer_{i}"
        for proj in ("query", "key", "value"):
            names += _dense(f"{ours}/attention/{proj}", f"{hf}.attention.self.{proj}",
                            f"{tf}/attention/self/{proj}", (h,), (n, d))
        names += _dense(f"{ours}/attention/output", f"{hf}.attention.output.dense",
                        f"{tf}/attention/output/dense", (n, d), (h,))
        names += _layer_norm(f"{ours}/attention_layer_norm", f"{hf}.attention.output.LayerNorm",
                             f"{tf}/attention/output/LayerNorm", h)
        names += _dense(f"{ours}/intermediate", f"{hf}.intermediate.dense",
                        f"{tf}/intermediate/dense", (h,), (m,))
        names += _dense(f"{ours}/output", f"{hf}.output.dense", f"{tf}/output/dense", (m,), (h,))
        names += _layer_norm(f"{ours}/output_layer_norm", f"{hf}.output.LayerNorm",
                             f"{tf}/output/LayerNorm", h)
    names += _dense("bert/pooler", "bert.pooler.dense", "bert/pooler/dense", (h,), (h,))
    names += _dense("mlm_head/transform", "cls.predictions.transform.dense",
                    "cls/predictions/transform/dense", (h,), (h,))
    names += _layer_norm("mlm_head/layer_norm", "cls.predictions.transform.LayerNorm",
                         "cls/predictions/transform/LayerNorm", h)
    names.append(WeightName("mlm_head/output_bias", "cls.predictions.bias",
                            "cls/predictions/output_bias", "plain", (config.vocab_size,),
                            (config.vocab_size,)))
    names.append(WeightName("nsp_head/kernel", "cls.seq_relationship.weight",
                            "cls/seq_relationship/output_weights", "linear_tf_out_in", (h, 2),
                            (h, 2)))
    names.append(WeightName("nsp_head/bias", "cls.seq_relationship.bias",
                            "cls/seq_relationship/output_bias", "plain", (2,), (2,)))
    return names


# Fine-tuned heads: our path prefix, transformers' module name, google-research/bert's
# variables (run_classifier's output_weights [labels, hidden], run_squad's cls/squad/*).
TASK_HEADS = {
    "BertForSequenceClassification": ("classifier", "classifier", "output"),
    "BertForTokenClassification": ("classifier", "classifier", "output"),
    "BertForMultipleChoice": ("classifier", "classifier", "output"),
    "BertForQuestionAnswering": ("qa_outputs", "qa_outputs", "cls/squad/output"),
}
# transformers builds these without the pooler (add_pooling_layer=False).
NO_POOLER = ("BertForTokenClassification", "BertForQuestionAnswering")


def task_head_names(config: BertConfig, architecture: str, num_outputs: int) -> list[WeightName]:
    """The head of a fine-tuned `architecture` with `num_outputs` outputs, in all three names."""
    if architecture not in TASK_HEADS:
        raise ValueError(f"unknown task architecture {architecture!r}; known: "
                         f"{sorted(TASK_HEADS)}")
    ours, hf, tf = TASK_HEADS[architecture]
    h = config.hidden_size
    return [WeightName(f"{ours}/kernel", f"{hf}.weight", f"{tf}_weights", "linear_tf_out_in",
                       (h, num_outputs), (h, num_outputs)),
            WeightName(f"{ours}/bias", f"{hf}.bias", f"{tf}_bias", "plain", (num_outputs,),
                       (num_outputs,))]


def encoder_names(config: BertConfig, architecture: str) -> list[WeightName]:
    """The encoder rows a fine-tuned `architecture` keeps (transformers' layout of it)."""
    return [n for n in weight_names(config) if n.ours.startswith(ENCODER_PREFIX)
            and not (architecture in NO_POOLER and n.ours.startswith("bert/pooler/"))]


def import_tensors(config: BertConfig, keys: set[str], get, framework: str,
                   source: str, names: list[WeightName] | None = None
                   ) -> tuple[dict[str, np.ndarray], list[str]]:
    """Reads every parameter a checkpoint has, in our layout.

    keys: the checkpoint's tensor names; get(key) -> array; framework "hf" or
    "tf"; names: the rows to look for (default: BertForPreTraining's). Returns
    (flat params, report of the absent parts). Raises KeyError naming the
    encoder tensors that are missing (a pooler or head may be).
    """
    flat, missing = {}, []
    for name in names if names is not None else weight_names(config):
        key = name.hf if framework == "hf" else name.tf
        if key not in keys:
            missing.append(name)
            continue
        flat[name.ours] = import_tensor(name, get(key), framework, source)
    missing_encoder = [n.hf if framework == "hf" else n.tf for n in missing
                       if n.ours.startswith(ENCODER_PREFIX)
                       and not n.ours.startswith("bert/pooler/")]
    if missing_encoder:
        raise KeyError(f"{source}: missing tensor(s) {missing_encoder[:8]} "
                       f"({len(missing_encoder)} in all)")
    return flat, missing_report(missing)


def missing_report(missing: list[WeightName]) -> list[str]:
    """One line per part a checkpoint lacks (pooler, MLM head, NSP head)."""
    groups = {"bert/pooler/": "pooler", "mlm_head/": "masked-LM head (cls.predictions)",
              "nsp_head/": "next-sentence head (cls.seq_relationship)"}
    return [f"not in checkpoint: {label}" for prefix, label in groups.items()
            if any(n.ours.startswith(prefix) for n in missing)]


def _needs_transpose(name: WeightName, framework: str) -> bool:
    if framework == "hf":
        return name.layout in ("linear", "linear_tf_out_in")
    if framework == "tf":
        return name.layout == "linear_tf_out_in"
    raise ValueError(f"unknown framework {framework!r}")


def external_shape(name: WeightName, framework: str) -> tuple[int, ...]:
    """The tensor's shape in a Hugging Face ("hf") or google-research/bert ("tf") checkpoint."""
    shape = name.external[::-1] if _needs_transpose(name, framework) else name.external
    return tuple(shape)


def import_tensor(name: WeightName, value: np.ndarray, framework: str, source: str) -> np.ndarray:
    """A tensor from Hugging Face ("hf") or google-research/bert ("tf"), in our layout.

    Raises ValueError naming the tensor when its shape disagrees with the config.
    """
    value = np.asarray(value)
    expected = external_shape(name, framework)
    if value.shape != expected:
        key = name.hf if framework == "hf" else name.tf
        raise ValueError(f"{source}: tensor {key} has shape {value.shape}, but the model config "
                         f"implies {expected}")
    if _needs_transpose(name, framework):
        value = value.T
    return value.reshape(name.shape)


def export_tensor(name: WeightName, value: np.ndarray, framework: str) -> np.ndarray:
    """Our tensor in the layout of Hugging Face ("hf") or google-research/bert ("tf")."""
    value = np.asarray(value).reshape(name.external)
    return np.ascontiguousarray(value.T if _needs_transpose(name, framework) else value)
