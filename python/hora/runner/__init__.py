"""horarun and the rendezvous server: starting a job's ranks and letting them
find each other. See docs/rendezvous.md for the protocol.

``hora.runner.run(func, np=...)`` runs a function on every rank and returns
their results in rank order (run_function.py)."""


def __getattr__(name):
    # Imported on first use, so that `python -m hora.runner.<module>` finds
    # none of this package's modules imported already.
    if name == "run":
        from hora.runner.run_function import run

        return run
    raise AttributeError(f"module 'hora.runner' has no attribute {name!r}")
