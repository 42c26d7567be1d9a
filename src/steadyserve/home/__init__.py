"""The home: everything of one ``STEADY_HOME`` on disk: where its files are
(``paths.py``), the API token its controller requires (``api_token.py``), and the
Unix sockets under it that an isolated replica may reach (``unix_socket.py``)."""
