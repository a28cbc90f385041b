class Timer:
    """A process-wide singleton that keeps the batch's sequence lengths for throughput metrics."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance
