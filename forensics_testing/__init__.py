"""Generators for the demo, the tests and the benchmarks: runs, windows and loss curves with a
known answer. Installed beside `forensics` (pyproject.toml) but not part of the tool: nothing in
`forensics/` or `dataloaders/` imports it.

- `demo/`: a small but real Megatron run with a dirty crawl batch (`demo.build`), the harvested
  text it is made of (`demo.texts`), its web pages clean and dirty (`demo.dirty`), and a tiny GPT-2
  trained on it (`demo.train`);
- `windows`: a replay window and baseline with a known culprit (cluster tests, bench_cluster);
- `loss_curves`: loss curves of every shape triage must recognise (triage and watch tests);
- `scan_run`: a Megatron run with dirty stretches planted ahead (scan tests, bench_scan);
- `mds`: small MDS streams laid out as the streaming library writes them (mosaic tests, bench);
- the suite's support modules: `small_run` and `file_runs` (runs built for a test session),
  `megatron_checkpoints`, `olmo_core_run` and `mosaic_support` (runs and the oracles in their own
  venvs), `browser` (a report measured in headless Chromium), `webhook_receiver`,
  `watch_trainer` (a fake trainer writing a log), `refusal` (one-line refusals asserted) and
  `repo_paths` (where the checkout and its suite are).
"""
