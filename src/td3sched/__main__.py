"""``python -m td3sched``: the ``td3sched`` command."""

if __name__ == "__main__":  # spawned worker processes import this module as __mp_main__: they must not run it
    from td3sched.cli import app

    app(prog_name="td3sched")
