"""Megatron-core data: .bin/.idx files, GPT/Blended index arrays, the exact replay, and the run
read back from a Megatron-LM or Megatron-Bridge save folder.

The package itself imports nothing: the `data:` union (dataloaders/data_sections.py) imports
its config model, which must not pull in the replayer.
"""
