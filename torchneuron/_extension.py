"""Builds (once, cached by source hash) and loads the C++ shim `csrc/*.cpp`."""
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import sys
import tempfile

from . import config

_module = None
_CSRC = os.path.join(os.path.dirname(__file__), "csrc")
_SOURCES = [os.path.join(_CSRC, name) for name in ("neuron.cpp", "profiler.cpp", "eager.cpp")]


def _build_dir() -> str:
    import torch

    if config.EXTENSION_DIR:
        return config.EXTENSION_DIR
    digest = hashlib.sha256(torch.__version__.encode() + sys.version.encode())
    for source in _SOURCES:
        with open(source, "rb") as f:
            digest.update(f.read())
    digest = digest.hexdigest()[:16]
    return os.path.join(config.CACHE_DIR, "extensions", digest)


def _import(path: str):
    loader = importlib.machinery.ExtensionFileLoader("torchneuron_C", path)
    spec = importlib.util.spec_from_file_location("torchneuron_C", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def load():
    """Returns the loaded shim module, building it on first use (30-60 s on free cores,
    a few minutes on two busy ones; a line on stderr says so).

    The build lands in ``$TORCHNEURON_CACHE_DIR/extensions/<hash of source, torch and
    Python versions>/torchneuron_C.so``. Concurrent first imports are safe: one process
    builds under a file lock in a private directory and publishes the finished library
    with an atomic rename, so no process ever loads a half-written file. Raises
    RuntimeError if the C++ compiler is missing.
    """
    global _module
    if _module is not None:
        return _module
    build_dir = _build_dir()
    built = os.path.join(build_dir, "torchneuron_C.so")
    if os.path.exists(built):
        _module = _import(built)
        return _module
    from filelock import FileLock

    os.makedirs(build_dir, exist_ok=True)
    with FileLock(os.path.join(build_dir, "build.lock")):
        if os.path.exists(built):
            _module = _import(built)
        else:
            _module = _build(build_dir, built)
    return _module


def _build(build_dir: str, target: str):
    """Builds the shim in a private directory, loads it, and publishes it at `target`."""
    # The builder warns about a missing CUDA runtime, which is irrelevant here.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    import torch
    from torch.utils import cpp_extension

    # ninja is installed into the interpreter's environment; make it findable even when
    # the environment is not activated.
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    private = tempfile.mkdtemp(prefix="build-", dir=build_dir)
    # The build is silent and can take minutes: without a word it looks like a hang.
    print(f"torchneuron: building the C++ extension once (cached in {build_dir})", file=sys.stderr, flush=True)
    module = cpp_extension.load(
        name="torchneuron_C",
        sources=_SOURCES,
        build_directory=private,
        # The profiler plugin implements Kineto's interfaces, whose headers torch ships.
        extra_cflags=["-O2", "-DUSE_KINETO"],
        extra_include_paths=[os.path.join(os.path.dirname(torch.__file__), "include", "kineto")],
        verbose=False,
    )
    staged = target + f".{os.getpid()}.tmp"
    shutil.copyfile(os.path.join(private, "torchneuron_C.so"), staged)
    os.replace(staged, target)
    shutil.rmtree(private, ignore_errors=True)
    return module
