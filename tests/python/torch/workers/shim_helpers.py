"""The helpers of the hora-horovod package that Horovod's tests and user code
import, checked in one process (no job): horovod.common.util,
horovod.common.exceptions and horovod.runner.util.threads."""

import os
import threading
import time

import horovod.torch as hvd
from horovod.common import exceptions, util
from horovod.common.exceptions import (HorovodInternalError, HorovodVersionMismatchError, HostsUpdatedInterrupt,
                                       get_version_mismatch_message)
from horovod.runner.util.threads import execute_function_multithreaded, in_thread

import hora.errors

# util.env sets variables for a block and restores what was there.
os.environ["SHIM_KEEP"] = "old"
os.environ.pop("SHIM_NEW", None)
with util.env(SHIM_KEEP="new", SHIM_NEW="1", SHIM_NONE=None):
    assert os.environ["SHIM_KEEP"] == "new" and os.environ["SHIM_NEW"] == "1"
    assert "SHIM_NONE" not in os.environ
assert os.environ["SHIM_KEEP"] == "old" and "SHIM_NEW" not in os.environ

# What was built.
from hora import _core  # noqa: E402

assert util.gloo_built() is True and util.mpi_built() == _core.mpi_built()
assert (util.nccl_built(), util.ddl_built(), util.ccl_built(), util.gpu_available("torch")) == (False,) * 4
assert util.extension_available("torch") and not util.extension_available("no_such_framework")
assert [util.num_rank_is_power_2(n) for n in (0, 1, 2, 3, 4, 6, 8)] == [False, True, True, False, True, False, True]
assert util.split_list(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
assert util.is_iterable([1]) and not util.is_iterable(3)
assert util.is_version_greater_equal_than("2.13.0", "1.12.0") and not util.is_version_greater_equal_than("1.5", "1.12.0")
average = util.get_average_backwards_compatibility_fun(hvd)
assert average(None, None) == hvd.Average and average(hvd.Sum, None) == hvd.Sum and average(None, False) == hvd.Sum
try:
    average(hvd.Sum, True)
    raise AssertionError("op and average together were accepted")
except ValueError:
    pass

# Exceptions.
assert HorovodInternalError is hora.errors.HorovodInternalError and issubclass(HorovodInternalError, RuntimeError)
interrupt = HostsUpdatedInterrupt(skip_sync=True)
assert isinstance(interrupt, RuntimeError) and interrupt.skip_sync is True
mismatch = HorovodVersionMismatchError("torch", "2.13.0", "2.0.0")
assert isinstance(mismatch, ImportError) and (mismatch.name, mismatch.version, mismatch.installed_version) == (
    "torch", "2.13.0", "2.0.0")
assert str(mismatch) == get_version_mismatch_message("torch", "2.13.0", "2.0.0")
assert "installed with version 2.0.0 but found version 2.13.0" in str(mismatch)
assert exceptions.HorovodInternalError is HorovodInternalError

# execute_function_multithreaded: results by index, at most N at a time.
running, most = [0], [0]
lock = threading.Lock()


def square_slowly(x, offset):
    with lock:
        running[0] += 1
        most[0] = max(most[0], running[0])
    time.sleep(0.02)
    with lock:
        running[0] -= 1
    return x * x + offset


args_list = [[i, 1] for i in range(10)]
assert execute_function_multithreaded(square_slowly, args_list, max_concurrent_executions=3) == {
    i: i * i + 1 for i in range(10)}
assert most[0] == 3, most
assert args_list == [[i, 1] for i in range(10)], "the caller's argument lists changed"
assert execute_function_multithreaded(square_slowly, [], max_concurrent_executions=3) == {}


def fail_on_three(x):
    if x == 3:
        raise KeyError(x)
    return x


try:
    execute_function_multithreaded(fail_on_three, [[i] for i in range(5)])
    raise AssertionError("a failed call went unreported")
except RuntimeError as error:
    assert "fail_on_three did not complete successfully" in str(error), error

done = threading.Event()
assert execute_function_multithreaded(lambda: done.wait(5) and done, [[]], block_until_all_done=False) is None
done.set()

# in_thread: starts a (daemon) thread; args must be a tuple; silent swallows errors.
box = []
thread = in_thread(box.append, args=(1,), name="shim-thread")
thread.join(5)
assert box == [1] and thread.name == "shim-thread" and thread.daemon
assert not in_thread(box.append, args=(2,), daemon=False).daemon
try:
    in_thread(box.append, args=[3])
    raise AssertionError("a list of args was accepted")
except ValueError as error:
    assert "args must be a tuple" in str(error)
errors = []
threading.excepthook = lambda hook_args: errors.append(hook_args.exc_type)
in_thread(fail_on_three, args=(3,), silent=True).join(5)
assert errors == []
in_thread(fail_on_three, args=(3,)).join(5)
assert errors == [KeyError]
print("helpers ok", flush=True)
