"""The train state every trainer uses: a plain pytree, its shardings, its start.

    {"step": int32 [], "params": nested dict (nnx.to_pure_dict of a model's
     Params), "opt_state": optax state, "rng": uint32 [2] (raw key data)}

jit, Orbax and the sharding rules see arrays and nothing else. Dropout keys
are derived from `rng` and `step` inside the step functions, so a resumed run
draws the same masks as an uninterrupted one.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from bert_jax.training import mesh as mesh_lib

TrainState = dict[str, Any]


def init_train_state(params: dict, optimizer: optax.GradientTransformation,
                     seed: int) -> TrainState:
    """The initial state around `params` (nnx.to_pure_dict of the model's Params)."""
    return {"step": jnp.zeros((), jnp.int32), "params": params,
            "opt_state": optimizer.init(params),
            "rng": jax.random.key_data(jax.random.PRNGKey(seed))}


def pure_params(model: nnx.Module) -> dict:
    """The model's Params as a nested dict of arrays (what the state holds)."""
    return nnx.to_pure_dict(nnx.state(model, nnx.Param))


@dataclasses.dataclass(frozen=True)
class ShardedModel:
    """A model's structure laid out on the device mesh (nothing is allocated)."""

    mesh: Mesh
    graphdef: Any  # nnx.graphdef: the static half the steps merge params into
    abstract_params: dict  # ShapeDtypeStructs, nested like pure_params
    param_shardings: dict  # NamedShardings by the config's logical-axis rules
    batch_sharding: NamedSharding  # a batch's leading axis over the `batch` rule
    replicated: NamedSharding


def shard_model(make_model: Callable[[], nnx.Module], mesh_config) -> ShardedModel:
    """The mesh of `mesh_config` (data, fsdp, tensor, rules) and the model laid out on it."""
    device_mesh = mesh_lib.make_mesh(mesh_config.data, mesh_config.fsdp, mesh_config.tensor)
    rules = mesh_lib.rules_from_config(mesh_config.rules)
    abstract_model = nnx.eval_shape(make_model)
    return ShardedModel(
        mesh=device_mesh, graphdef=nnx.graphdef(abstract_model),
        abstract_params=pure_params(abstract_model),
        param_shardings=mesh_lib.param_shardings(abstract_model, device_mesh, rules),
        batch_sharding=mesh_lib.batch_sharding(device_mesh, rules),
        replicated=mesh_lib.replicated(device_mesh))


def state_shardings(optimizer: optax.GradientTransformation, abstract_params: dict,
                    param_shardings: dict, mesh: Mesh) -> dict:
    """NamedShardings of the whole state: optimizer moments follow their params."""
    replicated = mesh_lib.replicated(mesh)
    opt_abstract = jax.eval_shape(optimizer.init, abstract_params)
    opt_shardings = optax.tree_map_params(
        optimizer, lambda _, s: s, opt_abstract, param_shardings,
        transform_non_params=lambda _: replicated)
    return {"step": replicated, "params": param_shardings, "opt_state": opt_shardings,
            "rng": replicated}


def abstract_train_state(optimizer: optax.GradientTransformation, abstract_params: dict,
                         shardings: dict, seed: int) -> TrainState:
    """ShapeDtypeStructs with shardings: the target a checkpoint restores into."""
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        jax.eval_shape(lambda p: init_train_state(p, optimizer, seed), abstract_params),
        shardings)


def new_train_state(make_model: Callable[[], nnx.Module],
                    optimizer: optax.GradientTransformation, seed: int,
                    shardings: dict, load_params: Callable[[nnx.Module], None] | None = None
                    ) -> TrainState:
    """A fresh state, built directly in its shardings.

    `make_model()` builds the model with its initializers; `load_params`, if
    given, then overwrites parameters in place on the host (from a
    checkpoint) before they are placed on the devices.
    """
    if load_params is None:
        init = jax.jit(lambda: init_train_state(pure_params(make_model()), optimizer, seed),
                       out_shardings=shardings)
        return init()
    model = make_model()
    load_params(model)
    params = jax.device_put(pure_params(model), shardings["params"])
    return jax.jit(lambda p: init_train_state(p, optimizer, seed), out_shardings=shardings)(params)

