"""Accuracy evals and cross-vendor comparison reports (issue 8)."""
