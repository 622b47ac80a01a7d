"""Lowerings: nn (being written)."""
