"""Lowerings: shape (being written)."""
