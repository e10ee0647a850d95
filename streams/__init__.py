"""Shared Kafka and state plumbing for kafkron's services: settings, codec, stores, runtime."""
