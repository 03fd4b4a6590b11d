"""The horarun command: parses its arguments (launch.parse_args) and runs
the job as they say: a fixed set of ranks (launch.Job), an elastic job
(elastic.py) or ranks under mpirun (mpi_run.py). The ``horarun`` script
and ``python -m hora.runner`` call ``main``."""

import signal
import sys
import threading

from hora.runner import elastic, launch, mpi_run


def main(argv=None):
    args = launch.parse_args(sys.argv[1:] if argv is None else argv)
    if args.elastic:
        return elastic.main(args)
    if args.mpi:
        return mpi_run.run(args, extra_env=launch.job_environment(args))
    job = launch.Job(args)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, job.forward_signal)
    return job.run()


if __name__ == "__main__":
    sys.exit(main())
