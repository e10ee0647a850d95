"""The operator's command line (``kafkron submit|list|show|...``): click commands over the REST
API and the dead-letter topic, the local profile that ``kafkron up`` writes, and output for
people (tables, human times) and scripts (``--json``, exit codes 0/1/2)."""
