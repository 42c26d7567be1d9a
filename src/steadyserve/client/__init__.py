"""What the CLI, the SDK and the serve API stand on: the way to the controller, the
``--json`` contracts, and service and deploy files read into requests. The CLI is a
leaf on top of this package; nothing here imports it."""
