"""The tests' check that a call is refused with an error of `kind` whose text holds `words`."""


def refused(fn, words, kind=(RuntimeError, ValueError, TypeError)):
    try:
        fn()
    except kind as e:
        assert words in str(e), f"'{words}' not in: {e}"
        return
    raise AssertionError(f"no error for {words}")
