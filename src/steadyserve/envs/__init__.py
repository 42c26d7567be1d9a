"""A version's files and environment: the workdir snapshot (``workdir``), which
environment a version needs (``plan``), building it (``build``) and the files a
build leaves (``outputs``)."""
