"""Benchmarks; each prints its figures as ratios to the raw Kafka pipe measured in the same run."""
