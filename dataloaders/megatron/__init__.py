"""Megatron-core data: .bin/.idx files, GPT/Blended index arrays, and the exact replay.

The package imports nothing at its top, so `dataloaders.data_sections` can import the Megatron
config's helpers (remote.py) without loading the replayer: replayer.py, indexed.py and the
others are imported by their module names.
"""
