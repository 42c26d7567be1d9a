"""The peers' files as their users wrote them: SkyServe task files (``skypilot``,
``skyserve``, ``file_mounts``) and Ray Serve configs and graphs (``ray_serve``,
``ray_deployment``, ``ray_graph``), translated into SteadyServe's own spec."""
