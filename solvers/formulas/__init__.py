"""Models shared by the question solvers: step time, collectives, KV layout, MoE dispatch, speculative acceptance..."""
