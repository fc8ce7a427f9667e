"""A user-written environment registered with sf: Dict observations, a Tuple(Discrete, Box) action."""
