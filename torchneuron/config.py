"""Every `TORCHNEURON_*` environment variable, read in one place.

The README lists them. Values are read when this module is imported; tests that need a
different value set the variable and reload the module or patch the attribute.
"""
import os


def _flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def _int(name: str, default: int) -> int:
    # Read during `import torch` (backend autoload): a bad value warns and keeps the
    # default rather than making PyTorch fail to import.
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        import warnings

        warnings.warn(f"{name}={value!r} is not an integer; using {default}", stacklevel=2)
        return default


#: PJRT platform the `neuron` device runs on (``cpu``, ``cuda``, ``tpu``, ``neuron``);
#: empty means JAX's default backend.
PLATFORM: str = os.environ.get("TORCHNEURON_PLATFORM", "")

#: Raise instead of running an operator through the CPU fallback.
STRICT: bool = _flag("TORCHNEURON_STRICT")

#: Directory for the compiled C++ shim and on-disk executable caches.
CACHE_DIR: str = os.environ.get(
    "TORCHNEURON_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "torchneuron")
)

#: Directory of the built C++ shim (default: under CACHE_DIR, keyed by source hash).
EXTENSION_DIR: str = os.environ.get("TORCHNEURON_EXTENSION_DIR", "")

#: Directory where compiled graphs' FX code and StableHLO text are written (empty: off).
DUMP_DIR: str = os.environ.get("TORCHNEURON_DUMP_DIR", "")

#: Logging level of the ``torchneuron`` logger (DEBUG, INFO, WARNING, ...).
LOG_LEVEL: str = os.environ.get("TORCHNEURON_LOG_LEVEL", "WARNING")

#: Raise device-side errors (out-of-range indices) at the op instead of at the next
#: synchronization point; costs one host round trip per checked op.
SYNC_CHECKS: bool = _flag("TORCHNEURON_SYNC_CHECKS")

#: Run cached eager executables from the C++ kernel (csrc/eager.cpp) instead of crossing
#: into Python for every op; off sends every call through the Python executor (for
#: debugging the hot path: both give the same results).
EAGER_CPP: bool = _flag("TORCHNEURON_EAGER_CPP", True)

#: Most eager executables kept compiled at once, over all operators (see
#: `torchneuron.eager.executable_cache`, which also watches the memory-map count);
#: 0 or less: no count bound.
EXECUTABLE_CACHE_SIZE: int = _int("TORCHNEURON_EXECUTABLE_CACHE_SIZE", 2048)
