"""Hiding Python warnings raised inside torchneuron's own calls into PyTorch."""
import contextlib
import warnings


@contextlib.contextmanager
def python_warnings_hidden():
    """Python warnings raised meanwhile are ignored, whatever the filters say (an
    "error" filter included). Not `warnings.catch_warnings`: changing the filters
    through the warnings API marks them changed, which clears every module's record of
    warnings already shown, so the user's once-per-place warnings would show again
    after each hidden call. An "ignore" entry is put in front of the filters in place,
    and taken out again, so the record stays valid (an ignored warning records
    nothing). ATen's warnings take the shim's `without_warnings`."""
    entry = ("ignore", None, Warning, None, 0)
    filters = warnings.filters
    filters.insert(0, entry)
    try:
        yield
    finally:
        for i, f in enumerate(filters):
            if f is entry:
                del filters[i]
                break
