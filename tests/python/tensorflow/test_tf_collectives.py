"""hora.tensorflow's collectives on 4 ranks, in one horarun job (importing
TensorFlow costs seconds per process): every function on the global set and
on [0,2], [1,3], [1,2,3], for float32/float64/float16/int32/int64, eagerly
and inside tf.function; gradients against their closed forms;
DistributedGradientTape; variables and objects; SyncBatchNormalization; mismatched ops raise on
every member; bad input raises a clear error (workers/collectives.py).
The job runs under each backend this build has."""

import pytest
from conftest import BACKENDS, mpi_unavailable
from tf_helpers import describe, failed, passed, run_tf_worker

MEMBERS = {"global": 4, "even": 2, "odd": 2, "upper": 3}
ALL_DTYPES = ("float32", "float64", "float16", "int32", "int64")
FLOATS = ("float32", "float64", "float16")
MODES = ("eager", "graph")

# check -> (dtypes, modes) it runs with, on every set.
CHECKS = {name: (ALL_DTYPES, MODES) for name in (
    "allreduce_sum", "allreduce_min", "allreduce_max", "allreduce_product", "grouped_allreduce", "allgather",
    "grouped_allgather", "broadcast", "alltoall", "reducescatter", "grouped_reducescatter")}
CHECKS.update({name: (FLOATS, MODES) for name in (
    "allreduce_average", "allreduce_scaled", "allreduce_fp16", "allreduce_indexed_slices")})
CHECKS.update({name: (("float32", "float64"), MODES) for name in (
    "grad_allreduce_sum", "grad_allreduce_average", "grad_grouped_allreduce", "grad_allgather", "grad_broadcast",
    "grad_alltoall", "grad_reducescatter_sum", "grad_reducescatter_average")})
CHECKS.update({name: (("float64",), MODES) for name in (
    "tape_average", "tape_sum_groups_fp16", "tape_predivide_sparse_as_dense", "tape_packed_average",
    "tape_packed_sum_fp16", "optimizer_numpy_gradients")})
CHECKS.update({name: (("-",), MODES) for name in (
    "broadcast_variables", "broadcast_", "sync_batch_norm", "mismatch_shape", "mismatch_dtype")})
CHECKS.update({name: (("-",), ("eager",)) for name in (
    "broadcast_object", "allgather_object", "join", "barrier", "after_mismatch")})
BAD_INPUT = ("string", "ragged", "dtype", "op", "root_type", "root_range", "process_set", "reducescatter_op",
             "splits", "grouped_single", "sparse_op", "tape", "scalar_gather", "xla")


@pytest.fixture(scope="module", params=BACKENDS)
def job(request):
    """The job's output, once per backend this build has (Gloo; MPI)."""
    if request.param == "mpi" and mpi_unavailable():
        pytest.skip(mpi_unavailable())
    result = run_tf_worker("collectives.py", backend=request.param)
    assert result.returncode == 0, describe(result)
    assert result.stdout.count("collectives done failures=0") == 4, describe(result)
    return result


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_check_passes_on_every_member_of_every_set(job, check):
    dtypes, modes = CHECKS[check]
    assert not failed(job, check), describe(job)
    expected = sorted((rank, label, dtype, mode) for label, count in MEMBERS.items()
                      for rank in ({"global": range(4), "even": (0, 2), "odd": (1, 3), "upper": (1, 2, 3)}[label])
                      for dtype in dtypes for mode in modes)
    assert sorted(passed(job, check)) == expected, describe(job)


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_raises_a_clear_error_on_the_rank_that_gave_it(job, case):
    assert sorted(rank for rank, *_ in passed(job, f"bad_input_{case}")) == [0, 1, 2, 3], describe(job)


def test_a_non_member_and_a_bad_root_inside_tf_function_are_refused(job):
    assert sorted(rank for rank, *_ in passed(job, "bad_input_non_member")) == [0, 2], describe(job)
    assert sorted(rank for rank, *_ in passed(job, "bad_input_graph_root_range")) == [0, 1, 2, 3], describe(job)
