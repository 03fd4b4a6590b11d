"""``horovod.spark`` on hora: ``run()`` runs a function as the ranks of one
job on Spark tasks (``hora.spark.run``)."""

from hora.spark import run  # noqa: F401
