"""Compat module: transformers and accelerate detect a Neuron device by the presence of
`torch_neuronx` plus `torch.neuron.is_available()`. Re-exports torchneuron."""
from torchneuron import *  # noqa: F401,F403
from torchneuron import install as _install

_install()
