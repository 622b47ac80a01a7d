"""Operator coverage evidence: PyTorch's OpInfo and ModuleInfo databases run on `neuron`
and compared with CPU PyTorch (`opinfo`, `modules`), core ATen overloads classified by
the lowering table (`core_aten`), the reasoned lists of expected fallbacks and failures
(`expected`), the report `python -m torchneuron coverage` writes (`report`), and the
sweep of out= tensors of other dtypes than the result (`out_dtype_sweep`).

Nothing here is imported by `import torchneuron`: the sweeps need
`torch.testing._internal`, which is slow to import.
"""
