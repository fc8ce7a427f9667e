"""ViZDoom scenarios bundled with the `vizdoom` package, as an sf env family."""
