"""SteadyServe's stand-in for Ray, only where Ray is not installed.

``from ray import serve`` then gives SteadyServe's Ray Serve API
(steadyserve/serve/ray_stand_in.py says how this never shadows a real Ray).
"""

import importlib.machinery
import importlib.util
import os
import sys


def _real_ray() -> "importlib.machinery.ModuleSpec | None":
    """Ray's own ``ray`` package in another folder of ``sys.path``, if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]
    return importlib.machinery.PathFinder.find_spec("ray", others)


_spec = _real_ray()
if _spec is not None and _spec.loader is not None:
    # The import system returns what sys.modules holds once this module ran.
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[__name__] = _module
    _spec.loader.exec_module(_module)
else:
    from steadyserve.serve.ray_stand_in import adopt

    adopt(sys.modules[__name__])
