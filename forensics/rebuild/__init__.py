"""`forensics rebuild`: remove a spike's block list from the data and write the restart's blend.

plan.py decides (datasets, stages, --data-path lines, rebuilt config), run.py writes (filtered
.bin/.idx through dataloaders.megatron.filtered, manifests, publish), texts.py words it.
"""

from forensics.rebuild.plan import RebuildPlan, plan_rebuild, refuse_unsupported
from forensics.rebuild.run import RebuildResult, run_rebuild

__all__ = ["RebuildPlan", "RebuildResult", "plan_rebuild", "refuse_unsupported", "run_rebuild"]
