"""Lowerings, one module per family; importing this package fills the table."""
from . import registry  # noqa: F401
from . import amp, copy, distance, elementwise, factory, indexing, linalg, nn, optim, random, reduction, rnn, shape, views  # noqa: F401
