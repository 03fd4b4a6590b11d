"""Assertions the torch workers share."""


def raises(exc, fn, *texts):
    """Calls ``fn``, which must raise ``exc`` with every one of ``texts`` in
    its message; returns the message."""
    try:
        fn()
    except exc as e:
        for text in texts:
            assert text in str(e), f"{text!r} not in {str(e)!r}"
        return str(e)
    raise AssertionError(f"{fn} did not raise {exc.__name__}")
