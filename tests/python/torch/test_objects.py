"""broadcast_object / allgather_object pickle with cloudpickle, as Horovod's
do: lambdas and locally defined classes cross ranks. 4 ranks."""

import pytest
from helpers import run_torch_worker

pytestmark = pytest.mark.usefixtures("backend")


def test_lambdas_and_local_classes_cross_ranks():
    result = run_torch_worker("objects.py")
    assert result.stdout.count("objects on [0, 1, 2, 3] ok") == 4, result.stdout
    assert result.stdout.count("objects on [1, 2, 3] ok") == 3, result.stdout
