"""The runner questions: one module a question, each with solve(p, s)."""
