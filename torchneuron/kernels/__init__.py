"""Custom kernels: the `kernel` decorator (JAX functions as PyTorch operators) and the
kernel library (memory-efficient attention, grouped matmul)."""
