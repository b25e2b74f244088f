"""`forensics.atomic` is `dataloaders.atomic`: the data layer at the bottom owns what it needs (the
run config, atomic writes, the tokenizer) and imports nothing from `forensics`. This module IS
that module (the same object), so imports and patches under either name see one thing."""

import sys

from dataloaders import atomic as _module

sys.modules[__name__] = _module
