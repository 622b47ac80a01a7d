import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run the long sweeps in full")


def pytest_configure(config):
    # The OpInfo/ModuleInfo sweeps choose their full or CI-sample parametrization at import.
    if config.getoption("--runslow"):
        os.environ["TORCHNEURON_OPINFO"] = "full"


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="long sweep: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_graphs():
    # As PyTorch's own TestCase resets Dynamo: one module's compiled graphs (each holding
    # XLA executables and their code's memory maps) are not kept for the rest of the run.
    yield
    torch._dynamo.reset()
