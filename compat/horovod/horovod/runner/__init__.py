"""``horovod.runner`` on hora: ``run()`` runs a function on every rank of a
job and returns their results in rank order (``hora.runner.run``); the
``horovodrun`` script maps Horovod's flags onto horarun's."""

from hora.runner import run  # noqa: F401
