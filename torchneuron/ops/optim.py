"""Lowerings: optim (being written)."""
