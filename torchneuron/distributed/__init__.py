"""torch.distributed on `neuron`: the c10d backend named ``neuron``.

`register()` runs when torchneuron installs (on ``import torch``); it only records the
backend with `torch.distributed.Backend.register_backend`, the backend module itself is
imported when a process group is created. Afterwards ``init_process_group("neuron")``,
``init_process_group("cpu:gloo,neuron:neuron")`` and the default backend of a process
group whose device is `neuron` all give the host-staged backend of `backend.py`.
"""
from __future__ import annotations

__all__ = ["register"]


def _create(options, backend_options=None):
    from .backend import create_backend

    return create_backend(options, backend_options)


def register() -> None:
    """Registers the c10d backend ``neuron`` for the `neuron` and `cpu` devices (CPU
    tensors go straight to gloo), unless torch.distributed is not built in."""
    import torch.distributed as dist

    if not dist.is_available() or "neuron" in dist.Backend.backend_list:
        return
    dist.Backend.register_backend("neuron", _create, extended_api=True, devices=["cpu", "neuron"])
