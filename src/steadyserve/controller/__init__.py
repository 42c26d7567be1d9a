"""The controller: one daemon per STEADY_HOME, its HTTP API and one reconcile loop per service."""
