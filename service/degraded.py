"""The service's answer while its journal cannot commit: nothing changed, try again later."""


class ServiceDegraded(RuntimeError):
    """Raised by a service call that could not be made durable; the REST layer answers 503."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
