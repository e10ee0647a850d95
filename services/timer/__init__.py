"""The timer: partition-owning timing wheels that turn job commands into due events."""

from streams.native import extend_path

__path__ = extend_path(__path__, __name__)
