"""Pretraining of the shipped tiny VLM on the synthetic suite (``src/pretrain_tiny.py``)."""
