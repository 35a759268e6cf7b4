"""Fixtures the test modules share."""

import pytest


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread for a module (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``):
    its models are tiny, and on a loaded machine threads only wait for each other."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
