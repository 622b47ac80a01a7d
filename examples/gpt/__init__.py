"""A small GPT-style byte-level language model trained on the Python standard library."""
