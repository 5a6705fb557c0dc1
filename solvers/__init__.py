import os

# numpy's OpenBLAS would start a thread per core for the seeded simulations' small matrix products
# (fp8-attention-quant-points: 16 x 128 by 128 x 2,048), and its threads spin between them: on two cores
# that doubled the simulation's CPU time and slowed it on a busy machine, for no change in any result (the
# products are the same to the bit on one thread). Set before numpy is first imported; a caller's own
# setting stands.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
