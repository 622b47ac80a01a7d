"""Lowerings: indexing (being written)."""
