"""On-disk cache of compiled graph executables, shared across processes.

Entries live in ``$TORCHNEURON_CACHE_DIR/executables/<key>.bin``; the key hashes the
StableHLO text and the argument types with the JAX version and the device kind, so any
change of program, compiler or device misses. (The text alone would not do: `jax.jit`
leaves unused arguments out of it, so graphs that differ only in an unused input's
dtype lower to the same text, and the executable refuses the other dtype.) Each entry
carries a SHA-256 of its payload: a truncated or corrupt entry is detected, logged,
recompiled and rewritten, never a crash. Entries are written to a temporary file and
renamed into place, so processes sharing the directory never see a partial entry.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile

import jax
from jax.experimental import serialize_executable

from .. import config

log = logging.getLogger("torchneuron")
_MAGIC = b"TNXC1"


def directory() -> str:
    return os.path.join(config.CACHE_DIR, "executables")


def key_of(lowered) -> str:
    device = jax.devices()[0]
    h = hashlib.sha256()
    for part in (lowered.as_text(), str(lowered.in_avals), jax.__version__, device.platform, device.device_kind,
                 os.environ.get("XLA_FLAGS", "")):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _read(path: str, lowered, device):
    with open(path, "rb") as f:
        blob = f.read()
    if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 32:
        raise ValueError("bad header")
    digest, payload = blob[len(_MAGIC):len(_MAGIC) + 32], blob[len(_MAGIC) + 32:]
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("checksum mismatch")
    # Without execution_devices it would be loaded for all of the client's devices.
    return serialize_executable.deserialize_and_load(payload, lowered.in_tree, lowered.out_tree,
                                                     execution_devices=[device])


def _write(path: str, compiled) -> None:
    if jax.config.jax_compilation_cache_dir:
        # The user turned on JAX's persistent cache: it already keeps this executable,
        # and one it deserialized cannot be serialized again.
        return
    try:
        payload, _, _ = serialize_executable.serialize(compiled)
    except (ValueError, NotImplementedError) as e:
        log.debug("executable not cacheable: %s", e)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("torchneuron: could not write executable cache entry %s: %s", path, e)
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_or_compile(lowered, device):
    """(compiled executable, whether it came from the disk cache) for a `jax.stages.Lowered`
    whose arguments live on the one PJRT `device`, which the executable runs on."""
    path = os.path.join(directory(), key_of(lowered) + ".bin")
    if os.path.exists(path):
        try:
            return _read(path, lowered, device), True
        except Exception as e:  # any unreadable entry is recompiled, never fatal
            log.warning("torchneuron: discarding unreadable executable cache entry %s (%s)", path, e)
    # JAX's own persistent cache must stay off in this process (torchneuron never turns
    # it on): an XLA:CPU executable it deserialized cannot be serialized again.
    compiled = lowered.compile()
    _write(path, compiled)
    return compiled, False
