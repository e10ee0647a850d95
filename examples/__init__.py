"""Downstream services that consume kafkron's topics (README, "Consuming results")."""
