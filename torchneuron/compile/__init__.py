"""torch.compile backend `neuron` (registered through the `torch_dynamo_backends` entry point)."""
from .backend import compile_graph, neuron_backend  # noqa: F401
