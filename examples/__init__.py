"""Runnable examples of the `neuron` device; the README shows how to start each one."""
