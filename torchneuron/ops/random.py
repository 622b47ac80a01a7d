"""Lowerings: random (being written)."""
