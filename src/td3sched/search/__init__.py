"""Searches over policy arguments. ``best_static``: the static-weights arguments with the highest
episode reward on a scenario's train span (the ``best-static`` and ``best-static-seed`` baselines)."""
