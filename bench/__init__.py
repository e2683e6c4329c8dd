"""Benchmarks: each module writes JSON to bench/results/ and prints a short table."""
