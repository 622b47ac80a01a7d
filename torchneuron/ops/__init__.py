"""Lowerings, one module per family; importing this package fills the table."""
from . import registry  # noqa: F401
from . import (amp, copy, distance, elementwise, factory, fft, grouped_mm, indexing, linalg, nn, optim,  # noqa: F401
               random, reduction, rnn, scaled_mm, shape, special, views)
