"""MuJoCo continuous-control tasks (gymnasium v5) as an sf env family."""
