"""The BERT encoder in Flax NNX, numerically faithful to google-research/bert.

Embeddings (word + learned position + token type, LayerNorm, dropout), a stack
of post-LN transformer blocks, and the pooler (dense + tanh on [CLS]).

Every parameter carries logical axis names in its `out_sharding` metadata
(`vocab, embed, mlp, heads, kv`; None for axes never sharded) so that the
parallelism is chosen by a table in the config, not by code. The names are
metadata only: a model is built unsharded here, and the trainer places it.

Parameter paths (what the converters and the weight-decay mask rely on):
  embeddings/{word,position,token_type}_embeddings/embedding, embeddings/layer_norm
  encoder/layers/N/attention/{query,key,value,output}/{kernel,bias}
  encoder/layers/N/{attention_layer_norm,intermediate,output,output_layer_norm}
  pooler/{kernel,bias}
"""
from __future__ import annotations

from typing import Sequence

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from bert_jax.model.config import BertConfig

Axes = tuple[str | None, ...]


def activation(name: str):
    """The activation function called `name` in a BertConfig."""
    if name == "gelu":  # exact erf GELU, Hugging Face's "gelu"
        return lambda x: jax.nn.gelu(x, approximate=False)
    if name == "gelu_tanh":  # google-research/bert's gelu
        return lambda x: jax.nn.gelu(x, approximate=True)
    if name == "relu":
        return jax.nn.relu
    if name == "tanh":
        return jnp.tanh
    raise ValueError(f"unknown activation {name!r}")


def new_param(rngs: nnx.Rngs, init, shape: Sequence[int], axes: Axes, dtype) -> nnx.Param:
    # eager_sharding=False: the names are only recorded here; the trainer maps
    # them to a mesh. Without it Flax would demand a mesh at construction.
    return nnx.Param(init(rngs.params(), tuple(shape), dtype), out_sharding=axes,
                     eager_sharding=False)


def _kernel_init(config: BertConfig):
    # tf.truncated_normal_initializer(stddev): a normal cut at +-2 stddev.
    return jax.nn.initializers.truncated_normal(stddev=config.initializer_range)


class Dense(nnx.Module):
    """y = x . kernel + bias, contracting the last `len(in_shape)` axes of x.

    Multi-axis shapes let attention keep [embed, heads, head_dim] kernels, so
    the heads axis can be sharded by name.
    """

    def __init__(self, in_shape: Sequence[int], out_shape: Sequence[int], *,
                 kernel_axes: Axes, bias_axes: Axes, config: BertConfig, rngs: nnx.Rngs):
        in_shape, out_shape = tuple(in_shape), tuple(out_shape)
        self.kernel = new_param(rngs, _kernel_init(config), in_shape + out_shape, kernel_axes,
                             config.param_dtype)
        self.bias = new_param(rngs, jax.nn.initializers.zeros, out_shape, bias_axes,
                           config.param_dtype)
        self.num_in_axes = len(in_shape)
        self.dtype = jnp.dtype(config.dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        n = self.num_in_axes
        contract = (tuple(range(x.ndim - n, x.ndim)), tuple(range(n)))
        y = jax.lax.dot_general(x.astype(self.dtype), self.kernel[...].astype(self.dtype),
                                (contract, ((), ())))
        return y + self.bias[...].astype(self.dtype)


def new_layer_norm(config: BertConfig, rngs: nnx.Rngs) -> nnx.LayerNorm:
    meta = {"out_sharding": ("embed",), "eager_sharding": False}
    return nnx.LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps, dtype=config.dtype,
                         param_dtype=config.param_dtype, scale_metadata=meta,
                         bias_metadata=meta, rngs=rngs)


class Embed(nnx.Module):
    """A lookup table [num, embed]; also the tied output matrix of the MLM head."""

    def __init__(self, num: int, config: BertConfig, axes: Axes, rngs: nnx.Rngs):
        self.embedding = new_param(rngs, _kernel_init(config), (num, config.hidden_size), axes,
                                config.param_dtype)

    def __call__(self, ids: jax.Array) -> jax.Array:
        return jnp.take(self.embedding[...], ids, axis=0)


class BertEmbeddings(nnx.Module):
    """word + position + token type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig, rngs: nnx.Rngs):
        self.word_embeddings = Embed(config.vocab_size, config, ("vocab", "embed"), rngs)
        self.position_embeddings = Embed(config.max_position_embeddings, config, (None, "embed"),
                                         rngs)
        self.token_type_embeddings = Embed(config.type_vocab_size, config, (None, "embed"), rngs)
        self.layer_norm = new_layer_norm(config, rngs)
        self.dropout = nnx.Dropout(config.hidden_dropout_prob)
        self.dtype = jnp.dtype(config.dtype)

    def __call__(self, input_ids, token_type_ids, position_ids, *, deterministic, rngs):
        x = (self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
             + self.position_embeddings(position_ids))  # [batch, length, embed]
        x = self.layer_norm(x.astype(self.dtype))
        return self.dropout(x, deterministic=deterministic, rngs=rngs)


class BertSelfAttention(nnx.Module):
    """Multi-head self-attention with an output projection (no residual/LN)."""

    def __init__(self, config: BertConfig, rngs: nnx.Rngs):
        h, n, d = config.hidden_size, config.num_attention_heads, config.head_dim
        qkv = dict(kernel_axes=("embed", "heads", "kv"), bias_axes=("heads", "kv"),
                   config=config, rngs=rngs)
        self.query = Dense((h,), (n, d), **qkv)
        self.key = Dense((h,), (n, d), **qkv)
        self.value = Dense((h,), (n, d), **qkv)
        self.output = Dense((n, d), (h,), kernel_axes=("heads", "kv", "embed"),
                            bias_axes=("embed",), config=config, rngs=rngs)
        self.dropout_rate = config.attention_probs_dropout_prob
        self.dropout = nnx.Dropout(config.attention_probs_dropout_prob)

    def __call__(self, x, mask, *, deterministic, rngs):
        # x: [batch, length, embed]; mask: bool [batch, 1, length, length].
        q, k, v = self.query(x), self.key(x), self.value(x)  # [batch, length, heads, head_dim]
        if deterministic or self.dropout_rate == 0.0:
            # The fused path (cuDNN flash attention on GPUs) has no dropout on
            # the attention probabilities, so it serves eval and rate 0.
            context = jax.nn.dot_product_attention(q, k, v, mask=mask)
        else:
            context = self._attention_with_dropout(q, k, v, mask, rngs)
        return self.output(context)

    def _attention_with_dropout(self, q, k, v, mask, rngs):
        # google-research/bert drops attention probabilities (p=0.1) in training.
        scale = 1.0 / jnp.sqrt(q.shape[-1]).astype(q.dtype)
        logits = jnp.einsum("bthd,bshd->bhts", q * scale, k)  # [batch, heads, q_len, k_len]
        logits = jnp.where(mask, logits.astype(jnp.float32), jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(logits, axis=-1).astype(q.dtype)
        probs = self.dropout(probs, deterministic=False, rngs=rngs)
        return jnp.einsum("bhts,bshd->bthd", probs, v)  # [batch, length, heads, head_dim]


class BertLayer(nnx.Module):
    """One post-LN transformer block: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, config: BertConfig, rngs: nnx.Rngs):
        h, m = config.hidden_size, config.intermediate_size
        self.attention = BertSelfAttention(config, rngs)
        self.attention_layer_norm = new_layer_norm(config, rngs)
        self.intermediate = Dense((h,), (m,), kernel_axes=("embed", "mlp"), bias_axes=("mlp",),
                                  config=config, rngs=rngs)
        self.output = Dense((m,), (h,), kernel_axes=("mlp", "embed"), bias_axes=("embed",),
                            config=config, rngs=rngs)
        self.output_layer_norm = new_layer_norm(config, rngs)
        self.dropout = nnx.Dropout(config.hidden_dropout_prob)
        self.act = activation(config.hidden_act)

    def __call__(self, x, mask, *, deterministic, rngs):
        attended = self.attention(x, mask, deterministic=deterministic, rngs=rngs)
        attended = self.dropout(attended, deterministic=deterministic, rngs=rngs)
        x = self.attention_layer_norm(x + attended)
        y = self.output(self.act(self.intermediate(x)))  # [batch, length, embed]
        y = self.dropout(y, deterministic=deterministic, rngs=rngs)
        return self.output_layer_norm(x + y)


class BertEncoder(nnx.Module):
    """The stack of `num_hidden_layers` BertLayers."""

    def __init__(self, config: BertConfig, rngs: nnx.Rngs):
        self.layers = nnx.List([BertLayer(config, rngs) for _ in range(config.num_hidden_layers)])

    def __call__(self, x, mask, *, deterministic, rngs, output_hidden_states=False):
        hidden_states = [x]
        for layer in self.layers:
            x = layer(x, mask, deterministic=deterministic, rngs=rngs)
            if output_hidden_states:
                hidden_states.append(x)
        return x, (tuple(hidden_states) if output_hidden_states else None)


@flax.struct.dataclass
class BertOutput:
    """What BertModel returns.

    sequence_output: [batch, length, embed], the last layer.
    pooled_output: [batch, embed], tanh(dense([CLS])).
    hidden_states: the embeddings output and each layer's output
      (num_hidden_layers + 1 arrays), or None unless asked for.
    """
    sequence_output: jax.Array
    pooled_output: jax.Array
    hidden_states: tuple[jax.Array, ...] | None = None


def attention_mask_4d(attention_mask: jax.Array) -> jax.Array:
    """A bool [batch, 1, q_len, k_len] mask from a padding or pairwise mask.

    [batch, length] (1 = real token): every query may see every real key, as
    google-research/bert's additive mask on padded keys.
    [batch, length, length]: an explicit query-key mask (for packed sequences).
    """
    mask = attention_mask.astype(bool)
    if mask.ndim == 2:
        return mask[:, None, None, :]
    if mask.ndim == 3:
        return mask[:, None, :, :]
    raise ValueError(f"attention_mask must have rank 2 or 3, got shape {attention_mask.shape}")


class BertModel(nnx.Module):
    """The BERT encoder with its pooler."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embeddings = BertEmbeddings(config, rngs)
        self.encoder = BertEncoder(config, rngs)
        h = config.hidden_size
        self.pooler = Dense((h,), (h,), kernel_axes=("embed", None), bias_axes=(None,),
                            config=config, rngs=rngs)

    def __call__(self, input_ids: jax.Array, token_type_ids: jax.Array | None = None,
                 attention_mask: jax.Array | None = None, position_ids: jax.Array | None = None,
                 *, deterministic: bool = True, rngs: nnx.Rngs | None = None,
                 output_hidden_states: bool = False) -> BertOutput:
        """Encodes int [batch, length] `input_ids`.

        token_type_ids: [batch, length] segment ids (default 0).
        attention_mask: [batch, length] 1 for real tokens (default all 1), or a
          [batch, length, length] query-key mask.
        position_ids: [batch, length] (default 0..length-1).
        deterministic: False in training, where dropout needs `rngs` with a
          'dropout' stream.
        """
        batch, length = input_ids.shape
        if length > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {length} exceeds model.max_position_embeddings="
                             f"{self.config.max_position_embeddings}")
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = jnp.ones_like(input_ids)
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(length), (batch, length))
        x = self.embeddings(input_ids, token_type_ids, position_ids,
                            deterministic=deterministic, rngs=rngs)
        x, hidden_states = self.encoder(x, attention_mask_4d(attention_mask),
                                        deterministic=deterministic, rngs=rngs,
                                        output_hidden_states=output_hidden_states)
        return BertOutput(sequence_output=x, pooled_output=self.pool(x[:, 0]),
                          hidden_states=hidden_states)

    def pool(self, cls_hidden: jax.Array) -> jax.Array:
        """The pooler: tanh(dense(h)) of [CLS] hidden states [..., embed]."""
        return jnp.tanh(self.pooler(cls_hidden))
