"""``horovod.runner.launch``: the entry point of the ``horovodrun`` script
(``run_commandline``), which maps Horovod's flags onto horarun's
(``hora.runner.horovodrun``)."""

import sys

from horovod.common.util import gloo_built, mpi_built  # noqa: F401  (names Horovod's tests patch)
from hora.runner.horovodrun import main


def run_commandline():
    sys.exit(main())


if __name__ == "__main__":
    run_commandline()
