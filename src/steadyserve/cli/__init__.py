"""The `steady` command: one module per group of commands, sharing the client and tables."""
