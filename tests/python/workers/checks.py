"""What the workers assert about errors (imported by the scripts beside it)."""


def raises(exc, fn, *texts):
    """Asserts that fn() raises `exc` with each of `texts` in its message;
    returns the message."""
    try:
        fn()
    except exc as e:
        for text in texts:
            assert text in str(e), f"{text!r} not in {str(e)!r}"
        return str(e)
    raise AssertionError(f"{fn} did not raise {exc.__name__}")
