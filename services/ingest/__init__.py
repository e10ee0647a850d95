"""Ingest: the REST API and the Python client library that write job commands to ``jobs``,
and the status view that serves job state, run history and dead letters."""
