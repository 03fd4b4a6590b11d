"""``horovod.spark`` on hora: ``run()`` runs a function as the ranks of one
job on Spark tasks, ``run_elastic()`` as an elastic job (``hora.spark``)."""

from hora.spark import run, run_elastic  # noqa: F401
