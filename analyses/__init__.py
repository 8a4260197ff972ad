"""Analyses beyond paired contrasts, one module per question."""
