"""The executor: runs registered handlers for due events, with deadlines, retries and lanes.

One module per concern, independent of the Kafka loop: ``handlers`` (registry),
``handler_kinds`` (http, kafka), ``context``, ``runner`` and ``sync_pool`` (running one
attempt), ``backoff`` (retry timing), ``lanes`` (priority selection), ``offsets`` (what to
commit) and ``exceptions``.
"""

from streams.native import extend_path

__path__ = extend_path(__path__, __name__)
