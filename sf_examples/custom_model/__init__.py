"""A user-written model registered with sf's model factory: a set encoder over a Dict observation."""
