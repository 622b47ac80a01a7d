"""Lowerings, one module per family; importing this package fills the table."""
from . import registry  # noqa: F401
from . import (amp, copy, distance, elementwise, factory, fft, indexing, linalg, nn, optim, random,  # noqa: F401
               reduction, rnn, shape, views)
from . import grid_sample  # noqa: F401
