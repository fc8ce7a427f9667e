"""Preloaded by the fork server: the first call of a numba kernel in a process loads numba's compiler and the cached
machine code (0.5-0.8 s on a 2-core EPYC), which every inference worker would otherwise pay at its start, outside
training. Done once in the server, its children inherit the loaded kernels. Imported anywhere else it costs the same
once."""

from sf.model.mlp_kernel import seed_sampling

seed_sampling(0)  # the children seed their own stream at start
