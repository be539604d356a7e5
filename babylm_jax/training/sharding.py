"""One device mesh with `data` and `fsdp` axes, logical axis rules, and global batches.

Pure data parallelism is `mesh.fsdp = 1`: parameters replicated, the batch split over all
devices. With `mesh.fsdp = k`, parameters are sharded over the `fsdp` axis along their
"embed" dimension (ZeRO-3 style) and the batch is split over `data` x `fsdp`.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from babylm_jax.config.training import BATCH_AXES, MeshConfig


def logical_axis_rules(fsdp: bool) -> tuple[tuple[str, Any], ...]:
    """Logical parameter axes -> mesh axes. Only "embed" is ever sharded (over `fsdp`)."""
    return (
        ("embed", "fsdp" if fsdp else None),
        ("embed_out", None),
        ("vocab", None),
        ("mlp", None),
        ("heads", None),
        ("kv", None),
        ("layers", None),
    )


def make_mesh(mesh_config: MeshConfig, devices: list | None = None) -> Mesh:
    """A (data, fsdp) mesh over all devices; `mesh.fsdp` devices per FSDP group (>= 1: the schema)."""
    devices = list(jax.devices() if devices is None else devices)
    fsdp = mesh_config.fsdp
    if len(devices) % fsdp:
        raise ValueError(f"config key mesh.fsdp={fsdp} must divide the {len(devices)} devices")
    return Mesh(np.asarray(devices).reshape(len(devices) // fsdp, fsdp), BATCH_AXES)


def run_devices(mesh_config: MeshConfig, available: list) -> list:
    """The devices a single-process run uses: the first `mesh.num_devices` (0 = all), checked."""
    wanted = mesh_config.num_devices
    if not 0 <= wanted <= len(available):
        raise ValueError(f"config key mesh.num_devices={wanted}: {len(available)} device(s) are present; "
                         f"set it to 1..{len(available)}, or 0 for all")
    return available[: wanted or None]


def check_batch_size(batch_size: int, mesh: Mesh) -> None:
    """The global batch (>= 1: the schema) must split evenly over the mesh's data-parallel devices."""
    if batch_size % mesh.size:
        multiple = -(-batch_size // mesh.size) * mesh.size
        raise ValueError(f"config key train.batch_size={batch_size} must be a multiple of the {mesh.size} "
                         f"data-parallel devices (mesh {dict(mesh.shape)}); use e.g. {multiple}, "
                         "or fewer devices with mesh.num_devices")


def state_shardings(abstract_boxed_state: Any, mesh: Mesh) -> Any:
    """NamedShardings for a state whose params carry logical-partitioning boxes."""
    specs = nn.get_partition_spec(abstract_boxed_state)
    rules = logical_axis_rules(fsdp=mesh.shape["fsdp"] > 1)
    return nn.logical_to_mesh_sharding(specs, mesh, rules)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (row) axis split over every mesh axis."""
    return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Builds global arrays from this process's rows (multi-host safe)."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}
