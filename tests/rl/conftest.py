"""One torch thread: the simulator's worker thread needs the other core, and small networks gain
nothing from more (on a busy 2-core machine, two torch threads make a gradient step 50x slower)."""

try:
    import torch
except ImportError:  # the rl test modules skip themselves
    pass
else:
    torch.set_num_threads(1)
