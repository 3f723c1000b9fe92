"""Shared pytest configuration."""

pytest_plugins = ["tests.kafka_support"]
