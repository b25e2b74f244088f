"""Megatron-core data: .bin/.idx files, GPT/Blended index arrays, the exact replay, and the run
read back from a Megatron-LM or Megatron-Bridge save folder.

The package itself imports nothing; its `Family` (family.py) names the modules it answers from.
"""
