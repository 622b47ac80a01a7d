"""The reasoned lists the OpInfo/ModuleInfo sweeps and the coverage report share.

- VALUES_NOT_COMPARED: OpInfos whose values cannot equal CPU's by design (random
  numbers from another generator, uninitialized memory); only shapes and dtypes are
  compared.
- EXPECTED_FALLBACKS: ATen overloads allowed to run through the CPU fallback, with why.
  A case that falls back to any other op fails.
- EXPECTED_FAILURES: (OpInfo or ModuleInfo name, check, dtype name or "*") -> reason;
  EXPECTED_DTYPE_FAILURES: dtype name -> reason, for every case of that dtype.
  The tests mark these cases xfail (strict: a case that starts passing fails until its
  entry is removed) and the report lists them with the reason.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

_RANDOM = "random: values come from the neuron generator, not CPU's; shapes and dtypes are compared"
_UNINITIALIZED = "uninitialized memory: values are unspecified; shapes and dtypes are compared"

VALUES_NOT_COMPARED: Dict[str, str] = {
    **{name: _RANDOM for name in (
        "bernoulli", "normal", "normal.number_mean", "uniform", "multinomial", "rand_like", "randn_like",
        "randint_like", "randint", "randn", "rand", "exponential", "geometric", "log_normal", "cauchy",
        "random_", "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
        "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
        "nn.functional.feature_alpha_dropout.without_train", "nn.functional.rrelu", "poisson",
        "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
        "randperm", "torch._refs.rand_like", "torch._refs.randn_like")},
    **{name: _UNINITIALIZED for name in (
        "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
        "resize_", "resize_as_")},
}

EXPECTED_FALLBACKS: Dict[str, str] = {}

EXPECTED_FAILURES: Dict[Tuple[str, str, str], str] = {}

#: dtype name -> why no case of that dtype can pass.
EXPECTED_DTYPE_FAILURES: Dict[str, str] = {
    "complex32": "complex32 (torch.chalf): XLA has no complex32 type, so no tensor of it can live on neuron",
}


def opinfo_name(op) -> str:
    """The key of an OpInfo in these lists: its name, plus '.variant' when it has one."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def values_not_compared(op) -> Optional[str]:
    """Why OpInfo `op`'s values are not compared with CPU's (any variant of a listed
    name, or a listed variant), or None."""
    return VALUES_NOT_COMPARED.get(opinfo_name(op)) or VALUES_NOT_COMPARED.get(op.name)


def expected_failure(name: str, check: str, dtype) -> Optional[str]:
    """The reason case (name, check, dtype) is expected to fail, or None."""
    dt = str(dtype).replace("torch.", "")
    return (EXPECTED_FAILURES.get((name, check, dt)) or EXPECTED_FAILURES.get((name, check, "*"))
            or EXPECTED_DTYPE_FAILURES.get(dt))


def unexpected_fallbacks(fallbacks: Dict[str, int]) -> Dict[str, int]:
    """The fallbacks of a case that EXPECTED_FALLBACKS does not allow."""
    return {op: n for op, n in fallbacks.items() if op not in EXPECTED_FALLBACKS}


def judge(outcome, name: str, check: str, dtype) -> Tuple[str, str]:
    """The verdict on a case's Outcome: ("pass" | "fail" | "xfail" | "xpass", reason).

    A case fails on an error, a mismatch with CPU, or a CPU fallback to an op not in
    EXPECTED_FALLBACKS; listed in EXPECTED_FAILURES, a failure is "xfail" and a pass
    "xpass" (the entry is stale)."""
    from .outcome import FAILING, FALLBACK

    problem = outcome.reason if outcome.status == FAILING else ""
    if not problem and outcome.status == FALLBACK:
        bad = unexpected_fallbacks(outcome.fallbacks)
        if bad:
            problem = "CPU fallback: " + ", ".join(sorted(bad))
    why = expected_failure(name, check, dtype)
    if why:
        return ("xfail", why) if problem else ("xpass", f"listed as an expected failure ({why}) but passes")
    return ("fail", problem) if problem else ("pass", "")
