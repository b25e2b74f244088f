"""`forensics rebuild`: remove a spike's block list from the data and write the restart's blend.

Megatron: plan.py decides (datasets, stages, --data-path lines, rebuilt config), run.py writes
(filtered .bin/.idx through dataloaders.megatron.filtered, manifests, publish), texts.py words it.
Hugging Face, OLMo-core and MosaicML streaming: files.py drops the whole files of the block list
(a block list covering part of a file is refused), run.py publishes, texts.py words it.
"""

from forensics.rebuild.plan import RebuildPlan, plan_rebuild
from forensics.rebuild.run import RebuildResult, run_rebuild

__all__ = ["RebuildPlan", "RebuildResult", "plan_rebuild", "run_rebuild"]
