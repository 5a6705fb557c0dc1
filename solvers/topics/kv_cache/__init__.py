"""The kv cache questions: one module a question, each with solve(p, s)."""
