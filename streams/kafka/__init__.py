"""Kafka plumbing for partition-owning processors: error classes, producer, consumers."""
