"""Lowerings, one module per family; importing this package fills the table."""
from . import registry  # noqa: F401
from . import copy, elementwise  # noqa: F401
