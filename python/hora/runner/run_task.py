"""One rank of hora.runner.run(): ``python -m hora.runner.run_task``.

Reads the pickled function from the store that run() serves (its address
and secret are in HORA_RUN_FUNCTION_ADDR, _PORT and _SECRET), calls it, and
stores the pickled result under ``result/<rank>``, or the error (loading
the function, calling it or pickling its result) under ``error/<rank>``,
then exits 1. The function and the result are signed with the job's
secret (signed.py). A worker of an elastic job (hora.spark.run_elastic), whose
rank changes from round to round, uses its worker id in place of the rank.
"""

import os
import sys
import traceback

import cloudpickle

from hora.runner import signed
from hora.runner.rendezvous import BadRequestError, RendezvousClient
from hora.runner.rounds import ENVIRONMENT_FLAG as ELASTIC_FLAG
from hora.runner.rounds import WORKER_VARIABLE
from hora.runner.run_function import ADDR, FUNCTION_KEY, PORT, SECRET, error_key, result_key

# Where a rank's number is, under horarun and under the MPI launchers.
RANK_VARIABLES = ("HORA_RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")


def own_rank(environ):
    for name in RANK_VARIABLES:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    raise SystemExit("hora.runner.run_task: no rank in the environment; start it through hora.runner.run()")


def own_key(environ):
    """The rank, or the worker id of an elastic job's worker."""
    if environ.get(ELASTIC_FLAG) == "1" and environ.get(WORKER_VARIABLE):
        return environ[WORKER_VARIABLE]
    return own_rank(environ)


def main(environ=os.environ):
    rank, secret = own_key(environ), environ[SECRET]
    with RendezvousClient(environ[ADDR], environ[PORT], secret) as store:
        try:
            function = signed.verify(secret, FUNCTION_KEY, store.get(FUNCTION_KEY, timeout=60))
            payload = cloudpickle.dumps(cloudpickle.loads(function)())
        except BaseException as error:   # the driver reports it, with the rank
            return _report(store, rank, "".join(
                traceback.format_exception(type(error), error, error.__traceback__)))
        try:
            store.set(result_key(rank), signed.sign(secret, result_key(rank), payload))
        except BadRequestError as error:
            return _report(store, rank, f"the result ({len(payload)} bytes pickled) cannot be "
                                        f"returned: {error}\n")
    return 0


def _report(store, rank, text):
    store.set(error_key(rank), text)
    sys.stderr.write(text)
    return 1


if __name__ == "__main__":
    sys.exit(main())
