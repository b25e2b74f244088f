"""Write a torchtitan console log with torchtitan's own logging code (run in .venv-titan).

torchtitan 0.3.0 prints one line per logged step from `MetricsProcessor.log`
(torchtitan/components/metrics.py:451-537, the line at 523-532) and one per validation from
`log_validation` (539-576, the line at 566-572), through the root logger that `init_logger()`
sets up (tools/logging.py:15-27: a stdout handler, `[titan] %(asctime)s - %(name)s -
%(levelname)s - %(message)s`). Both methods are run here as they are, on a stand-in for the
processor's state (the device memory monitor, the throughput counters and the metric sinks are
what a GPU run would fill in); the line text is torchtitan's.

    python torchtitan_metrics_log.py SPEC.json OUT.log

SPEC.json: {"color": bool, "log_freq": int, "quantized": bool,
            "steps": [[step, avg_loss, max_loss, grad_norm], ...],
            "validations": [[step, loss], ...]}  (a validation is logged after its step)
"""

from __future__ import annotations

import json
import sys
import time
from types import SimpleNamespace


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(open(spec_path, encoding="utf-8").read())
    with open(out_path, "w", encoding="utf-8") as out:
        sys.stdout = out  # init_logger's handler writes to the stdout of its call
        from torchtitan.components.metrics import DeviceMemStats, MetricsProcessor
        from torchtitan.tools.logging import init_logger
        from torchtitan.tools.utils import Color, NoColor

        init_logger()
        state = SimpleNamespace(
            num_flops_per_token=6 * 124_000_000,
            time_last_log=0.0,
            ntokens_since_last_log=0,
            data_loading_times=[],
            parallel_dims=SimpleNamespace(non_data_parallel_size=1),
            has_quantization=bool(spec.get("quantized")),
            gpu_peak_flops=989e12,
            config=SimpleNamespace(log_freq=int(spec.get("log_freq", 10))),
            device_memory_monitor=SimpleNamespace(
                get_peak_stats=lambda: DeviceMemStats(31.5, 39.8, 42.25, 53.4, 0, 0),
                reset_peak_stats=lambda: None,
            ),
            logger=SimpleNamespace(log=lambda metrics, step: None),
            color=Color() if spec.get("color") else NoColor(),
        )
        validations = {int(s): float(v) for s, v in spec.get("validations", [])}
        for step, avg, top, norm in spec["steps"]:
            state.ntokens_since_last_log = 8 * 2048 * int(spec.get("log_freq", 10))
            state.data_loading_times = [0.01]
            state.time_last_log = time.perf_counter() - 4.0  # 4 s since the last line
            MetricsProcessor.log(state, int(step), float(avg), float(top), float(norm))
            if int(step) in validations:
                state.ntokens_since_last_log = 4 * 2048
                state.time_last_log = time.perf_counter() - 2.0
                MetricsProcessor.log_validation(state, validations[int(step)], int(step))
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
