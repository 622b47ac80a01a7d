"""Lowerings: reduction (being written)."""
