"""broadcast_optimizer_state after rank 0 alone restored a checkpoint, for
every torch.optim optimizer; DistributedOptimizer's local step (4 ranks)."""

import pytest
import torch
from helpers import run_torch_worker

pytestmark = pytest.mark.usefixtures("backend")


def test_every_optimizer_restored_on_rank_0_reaches_every_rank():
    result = run_torch_worker("optimizer_state.py", timeout=240)
    assert result.stdout.count("local step ok") == 4, result.stdout
    names = [c.__name__ for c in torch.optim.Optimizer.__subclasses__()
             if c.__module__.startswith("torch.optim") and c not in (torch.optim.LBFGS, torch.optim.SparseAdam)]
    assert len(names) >= 10, names
    for name in names:
        assert result.stdout.count(f": {name} restored ok") == 4, (name, result.stdout)
    assert result.stdout.count("optimizer state done") == 4, result.stdout
