"""SteadyServe: a fleet of replicas behind one endpoint, updated without dropping a request."""

__version__ = "0.1.0"

from steadyserve.replica import deployment

__all__ = ["__version__", "deployment"]
