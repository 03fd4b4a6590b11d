"""hora.mxnet's collectives on 4 ranks, in one horarun job (importing MXNet
costs a second per process): every op on the global set and on [0,2] and
[1,2,3] for float32/float64/int32, results as NDArrays of the input's dtype
and context; the in-place forms write into their NDArray; objects;
mismatched shapes raise on every member and leave the set usable; bad input
raises a clear ValueError (workers/collectives.py)."""

import pytest
from mx_helpers import describe, failed, passed, run_mx_worker

MEMBERS = {"global": (0, 1, 2, 3), "even": (0, 2), "upper": (1, 2, 3)}
ALL_DTYPES = ("float32", "float64", "int32")

# check -> the dtypes it runs with, on every set.
CHECKS = {name: ALL_DTYPES for name in (
    "allreduce_sum", "allreduce_min", "allreduce_max", "allreduce_product", "allreduce_", "grouped_allreduce",
    "grouped_allreduce_", "allgather", "grouped_allgather", "broadcast", "broadcast_", "alltoall", "alltoall_even",
    "reducescatter", "grouped_reducescatter")}
CHECKS.update({name: ("float32", "float64") for name in ("allreduce_average", "allreduce_scaled")})
CHECKS.update({name: ("-",) for name in ("broadcast_object", "allgather_object", "mismatch_shape", "after_mismatch")})
BAD_INPUT = ("list", "numpy", "sparse", "op", "root_type", "root_range", "process_set", "non_member",
             "reducescatter_op", "splits_values", "splits_sum", "splits_dtype", "splits_even", "grouped_single",
             "grouped_entry", "params", "prefix", "optimizer", "predivide", "read_only")


@pytest.fixture(scope="module")
def job():
    result = run_mx_worker("collectives.py")
    assert result.returncode == 0, describe(result)
    assert result.stdout.count("collectives done failures=0") == 4, describe(result)
    return result


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_check_passes_on_every_member_of_every_set(job, check):
    assert not failed(job, check), describe(job)
    expected = sorted((rank, label, dtype) for label, ranks in MEMBERS.items() for rank in ranks
                      for dtype in CHECKS[check])
    assert sorted(passed(job, check)) == expected, describe(job)


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_raises_a_clear_value_error(job, case):
    assert sorted(rank for rank, *_ in passed(job, f"bad_input_{case}")) == [0, 1, 2, 3], describe(job)
