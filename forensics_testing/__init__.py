"""Generators for the demo, the tests and the benchmarks: runs, windows and loss curves with a
known answer. Installed beside `forensics` (pyproject.toml) but not part of the tool: nothing in
`forensics/` or `dataloaders/` imports it.

- `demo/`: a small but real Megatron run with a dirty crawl batch (`demo.build`), the harvested
  text it is made of (`demo.texts`), its web pages clean and dirty (`demo.dirty`), and a tiny GPT-2
  trained on it (`demo.train`);
- `windows`: a replay window and baseline with a known culprit (cluster tests, bench_cluster);
- `loss_curves`: loss curves of every shape triage must recognise (triage and watch tests);
- `scan_run`: a Megatron run with dirty stretches planted ahead (scan tests, bench_scan);
- `mds`: small MDS streams laid out as the streaming library writes them (mosaic tests, bench).
"""
