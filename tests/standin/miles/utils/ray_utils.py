class Box:
    """A holder that keeps Ray from resolving the reference inside when passed to an actor."""

    def __init__(self, inner):
        self._inner = inner

    @property
    def inner(self):
        return self._inner
