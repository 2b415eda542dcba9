"""The device mesh and the mapping from logical axis names to mesh axes.

Parameters carry logical names (`vocab, embed, mlp, heads, kv`, see
bert_jax.model.encoder); the batch axis is `batch`. One table of rules in the config
maps each name to a mesh axis (`data, fsdp, tensor`) or to None (replicated),
so changing the parallelism is a config change:

    embed -> fsdp      shards every weight over the FSDP axis
    mlp, heads, vocab -> tensor   Megatron-style tensor parallelism
    batch -> (data, fsdp)         the batch is split over both
"""
from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")
DEFAULT_RULES = (
    ("batch", ("data", "fsdp")),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("vocab", "tensor"),
    ("kv", None),
)


def make_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh over all devices; one size may be -1 (the rest)."""
    devices = list(devices if devices is not None else jax.devices())
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError(f"mesh: at most one of data/fsdp/tensor may be -1, got {sizes}")
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        if len(devices) % known:
            raise ValueError(f"mesh: {len(devices)} devices do not divide by {known}")
        sizes[sizes.index(-1)] = len(devices) // known
    if int(np.prod(sizes)) != len(devices):
        raise ValueError(f"mesh: data*fsdp*tensor = {int(np.prod(sizes))} but there are "
                         f"{len(devices)} devices")
    return jax.make_mesh(tuple(sizes), MESH_AXES, axis_types=(AxisType.Auto,) * 3,
                         devices=devices)


def rules_from_config(rules) -> tuple:
    """The config's `mesh.rules` (lists, as ml_collections stores them) as a tuple of pairs."""
    return tuple((name, tuple(t) if isinstance(t, list) else t) for name, t in rules)


def logical_to_spec(axes: Sequence[str | None], rules=DEFAULT_RULES) -> PartitionSpec:
    """PartitionSpec for logical axis names; a mesh axis is used at most once."""
    table = dict(rules)
    used: set[str] = set()
    spec = []
    for name in axes:
        target = table.get(name) if name is not None else None
        targets = (target,) if isinstance(target, str) else tuple(target or ())
        if any(t in used for t in targets):
            target = None  # e.g. two `embed` axes: shard only the first
        else:
            used.update(targets)
        spec.append(target)
    return PartitionSpec(*spec)


def param_shardings(abstract_model: nnx.Module, mesh: Mesh, rules=DEFAULT_RULES) -> Any:
    """A pure-dict tree of NamedShardings matching nnx.to_pure_dict(params)."""
    state = nnx.state(abstract_model, nnx.Param)
    specs = jax.tree.map(
        lambda var: NamedSharding(mesh, logical_to_spec(var.get_metadata()["out_sharding"],
                                                        rules)),
        state, is_leaf=lambda x: isinstance(x, nnx.Variable))
    return nnx.to_pure_dict(specs)


def batch_sharding(mesh: Mesh, rules=DEFAULT_RULES) -> NamedSharding:
    """Sharding of a batch: its leading axis over the `batch` rule's mesh axes."""
    return NamedSharding(mesh, logical_to_spec(("batch",), rules))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def global_batch(local_batch: dict, sharding: NamedSharding) -> dict:
    """One global jax.Array per feature from this host's rows of the batch."""
    return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
            for k, v in local_batch.items()}
