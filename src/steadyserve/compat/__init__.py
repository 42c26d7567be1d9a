"""The peers' files as their users wrote them: SkyServe task files (``skypilot``,
``skyserve``, ``file_mounts``) and Ray Serve configs and graphs (``ray_serve``,
``ray_deployment``, ``ray_graph``), translated into SteadyServe's own spec."""

# The spec's loaders import compat.skypilot, which builds on the spec's models:
# load the spec first, so importing a compat module first does not meet a half-made one.
import steadyserve.spec as _spec  # noqa: F401
