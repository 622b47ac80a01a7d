"""Lowerings, one module per family; importing this package fills the table."""
from . import registry  # noqa: F401
from . import (amp, copy, distance, elementwise, factory, fft, grid_sample, grouped_mm, indexing, layouts,  # noqa: F401
               linalg, nn, optim, random, reduction, rnn, scaled_mm, shape, special, views)
