"""The rehearsal of a real experiment preset: every job run on a CPU with tiny random-weight instances of the
real checkpoints (``checkpoints``) in place of the models."""
