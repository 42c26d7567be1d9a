"""SteadyServe: a fleet of replicas behind one endpoint, updated without dropping a request."""

__version__ = "0.1.0"

# Ray Serve's decorator (options, .bind(), .options()); steadyserve.serve has the rest.
from steadyserve.serve.deployment import deployment

__all__ = ["__version__", "deployment"]
