"""The calibration questions: one module a question, each with solve(p, s)."""
