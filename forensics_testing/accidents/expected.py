"""What each refusal of the accident battery must say: the file, flag or field it refuses
(`names`) and the problem (`needle`), one expected fragment each, read off the messages and
checked by hand to be the ones a user needs; and what a good answer is for the accidents that
may succeed (forensics_testing.accidents.results). `apply` attaches both to the battery; an
accident that sets its own `names` / `needle` / `check` keeps them."""

from __future__ import annotations

from forensics_testing.accidents.case import Accident
from forensics_testing.accidents.results import RESULTS

# accident name -> (names, needle)
REFUSALS: dict[str, tuple[str, str]] = {
    "check-skip: --trainer nemo": ("'nemo'", "unknown trainer 'nemo'"),
    "check-skip: a JSON list": ("skip.json", "not a skip file (expected a JSON object)"),
    "check-skip: a data file changed": ("prose_text_document.idx", "corrupt index: sequence"),
    "check-skip: a flag edited": ("skip.json", "the megatron-lm flag is wrong for this run"),
    "check-skip: a flag of the wrong type": (
        "skip.json",
        "flags.megatron-lm must be an object with a string",
    ),
    "check-skip: a range before the rollback": (
        "skip.json",
        "skips iterations at or before the rollback checkpoint",
    ),
    "check-skip: a range reversed": ("skip.json", "iterations must be ranges with"),
    "check-skip: a range to 10^12": ("skip.json", "skips iteration"),
    "check-skip: a skip file whose folder a kill left mid-publish": (
        "spike",
        "killed while publishing into it",
    ),
    "check-skip: binary": ("skip.json", "not valid JSON"),
    "check-skip: fingerprint a string": ("skip.json", "fingerprint must be an object (edited?)"),
    "check-skip: fingerprint emptied": (
        "skip.json",
        "made for another run: the data changed: datasets",
    ),
    "check-skip: flags not an object": ("skip.json", "flags must be an object (edited?)"),
    "check-skip: iterations as strings": (
        "skip.json",
        "iterations must be a list of [first, last]",
    ),
    "check-skip: not JSON": ("skip.json", "not valid JSON (Expecting property name enclosed in"),
    "check-skip: rollback checkpoint gone": ("skip.json", "no longer available"),
    "check-skip: rollback removed": ("skip.json", "not a skip file from forensics spike (no"),
    "check-skip: rollback.iteration a string": (
        "skip.json",
        "rollback.iteration must be an integer (edited?)",
    ),
    "check-skip: rollback.iteration moved": (
        "skip.json",
        "the checkpoint list changed: the rollback checkpoint",
    ),
    "check-skip: samples edited": ("skip.json", "the sample ranges do not match the iterations"),
    "check-skip: seed changed": ("skip.json", "made for another run"),
    "check-skip: skip file missing": ("nope.json", "skip file not found"),
    "check-skip: skip past the end": ("skip.json", "skips iteration"),
    "check-skip: tracker edited": (
        "iterations_to_skip.tracker",
        "does not list the plan's iterations (edited?)",
    ),
    "check-skip: trainer unknown": ("skip.json", "trainer 'nemo' has no entry in flags"),
    "check-skip: version 1": ("skip.json", "skip file version"),
    "check-skip: weights changed": ("skip.json", "made for another run"),
    "manifest --tokenizer: two adjacent JSONL lines swapped": (
        "docs.jsonl",
        "line 4 is not document 3 of",
    ),
    "manifest: --fields ''": ("--fields", "name at least one field to keep (--fields"),
    "manifest: --fields dataset": ("--fields", "the replay table has its own column of"),
    "manifest: --fields doc_id": ("doc_id", "doc_id is the manifest's own column"),
    "manifest: --out exists": ("m.parquet", "already exists; pass --force to replace it"),
    "manifest: --out the .idx": ("prose_text_document.idx", "must be a .parquet file"),
    "manifest: --out the JSONL": ("docs.jsonl", "must be a .parquet file"),
    "manifest: --out the config": ("forensics.yaml", "must be a .parquet file"),
    "manifest: --out the run's manifest": (
        "prose.manifest.parquet",
        "already exists; pass --force to replace it",
    ),
    "manifest: --out tokenizer.json": ("tokenizer.json", "must be a .parquet file"),
    "manifest: --prefix count differs": (
        "docs.jsonl",
        "lines but data/prose_text_document.idx has",
    ),
    "manifest: --prefix of the run with a JSONL that is not its text (lines of 2 characters for documents of hundreds of tokens)": (  # noqa: E501
        "docs.jsonl",
        "characters per token",
    ),
    "manifest: JSONL bad line 3": ("docs.jsonl", ":3"),
    "manifest: JSONL binary": ("docs.jsonl", "not UTF-8 text"),
    "manifest: JSONL line not an object": ("docs.jsonl", "expected a JSON object per line"),
    "manifest: JSONL missing": ("nope.jsonl", "JSONL file not found"),
    "manifest: disk full": ("the disk is full", "free space and rerun"),
    "manifest: field nobody has": ("docs.jsonl", "no line has the field(s) nope"),
    "manifest: no --out, no --prefix": (
        "--out",
        "give --out, or --prefix to write PREFIX.manifest.parquet",
    ),
    "rebuild: the spike folder a kill left mid-publish": (
        "spike",
        "killed while publishing into it",
    ),
    "replay --from-checkpoint: OLMo-core config.json with data_loader.seed a string": (
        "config.json",
        "data_loader.seed is '17'",
    ),
    "replay --from-checkpoint: OLMo-core config.json with dataset.sequence_length a string": (
        "config.json",
        "dataset.sequence_length is '2048'",
    ),
    "replay --text: MDS shard with a random offsets table": (
        "shard.00001.mds",
        "offsets table is not MDS's",
    ),
    "replay --text: tokenizer garbage": (
        "tokenizer.json",
        "not a tokenizer.json (key must be a string",
    ),
    "replay --text: tokenizer missing": ("tokenizer.json", "tokenizer file not found"),
    "replay --text: tokenizer.json with its ids permuted": (
        "tokenizer.json",
        "re-encode to their own ids",
    ),
    "replay: --megatron-args @binary": ("bin.args", "not a text file of Megatron arguments"),
    "replay: --megatron-args @missing": ("nope", "Megatron arguments file not found"),
    "replay: --megatron-args nonsense": (
        "--megatron-args",
        "no --data-path (or --data-args-path) given",
    ),
    "replay: --out a directory": ("data", "--out must be a .parquet file"),
    "replay: --out an existing file": ("x.parquet", "already exists; pass --force to replace it"),
    "replay: --out not .parquet": ("w.csv", "--out must be a .parquet file"),
    "replay: --out the .bin": ("web_text_document.bin", "--out must be a .parquet file"),
    "replay: --out the .idx": ("web_text_document.idx", "--out must be a .parquet file"),
    "replay: --out the config": ("forensics.yaml", "--out must be a .parquet file"),
    "replay: --out the manifest": (
        "prose.manifest.parquet",
        "is an input of this run; choose another",
    ),
    "replay: --out the tokenizer": ("tokenizer.json", "--out must be a .parquet file"),
    "replay: --step 0": ("--step", "is outside the run"),
    "replay: --step past the end": ("--step", "is outside the run"),
    "replay: --window 0": ("--window", "--window must be at least"),
    "replay: --window past iteration 1": ("--step", "is outside the run"),
    "replay: .bin grown": ("prose_text_document.bin", "bytes, but its index"),
    "replay: .bin missing": ("prose_text_document.bin", "Megatron dataset file not found"),
    "replay: .bin truncated": ("prose_text_document.bin", "truncated data file"),
    "replay: .idx docs damaged": (
        "prose_text_document.idx",
        "corrupt index: document boundaries are not in order",
    ),
    "replay: .idx float damaged": ("prose_text_document.idx", "corrupt index: sequence"),
    "replay: .idx length damaged": ("prose_text_document.idx", "corrupt index: sequence"),
    "replay: .idx magic damaged": ("prose_text_document.idx", "not a Megatron index (wrong magic"),
    "replay: .idx of another dataset": ("prose_text_document.bin", "bytes, but its index"),
    "replay: .idx pointer damaged": ("prose_text_document.idx", "corrupt index: sequence"),
    "replay: .idx rewritten, same size and mtime, cache warm": (
        "prose_text_document.idx",
        "corrupt index: sequence",
    ),
    "replay: .idx truncate damaged": ("prose_text_document.idx", "truncated index"),
    "replay: 12 MB YAML": ("forensics.yaml", "bytes is not a run config"),
    "replay: HF data file a JSONL file named .parquet": (
        "part-1.parquet",
        "not a readable Parquet file",
    ),
    "replay: HF data file empty": ("part-1.parquet", "not a readable Parquet file"),
    "replay: HF data file of another schema": ("part-1.parquet", "has columns ['body', 'n'], but"),
    "replay: HF data file truncated": ("part-1.parquet", "not a readable Parquet file"),
    "replay: MDS index.json with negative samples": (
        "index.json",
        "shard 1: samples is -20, not a count",
    ),
    "replay: YAML alias bomb": ("forensics.yaml", "its YAML aliases expand to more than"),
    "replay: both --config and --megatron-args": (
        "--config",
        "give --config or --megatron-args, not both",
    ),
    "replay: config binary": ("forensics.yaml", "not valid YAML"),
    "replay: config is a list": ("forensics.yaml", "expected a mapping at the top level"),
    "replay: config missing": ("nope.yaml", "config file not found"),
    "replay: config not YAML": ("forensics.yaml", "not valid YAML (while parsing a flow sequence)"),
    "replay: data.format: 'nemo'": (
        "forensics.yaml",
        "data: Input tag 'nemo' found using 'format' does",
    ),
    "replay: data.seed: -1": (
        "forensics.yaml",
        "data.megatron.seed: Input should be greater than or equal",
    ),
    "replay: data.seed: 1180591620717411303424": (
        "forensics.yaml",
        "data.megatron.seed: Input should be less than or equal",
    ),
    "replay: data.seed: True": (
        "forensics.yaml",
        "data.megatron: Value error, seed: expected a number, got",
    ),
    "replay: data.seq_length: '4096'": (
        "forensics.yaml",
        "data.megatron: Value error, seq_length: expected a number, got",
    ),
    "replay: data.seq_length: -5": (
        "forensics.yaml",
        "data.megatron.seq_length: Input should be greater than",
    ),
    "replay: data.seq_length: 0": (
        "forensics.yaml",
        "data.megatron.seq_length: Input should be greater than",
    ),
    "replay: data.seq_length: 10000000": ("prose_text_document", "is longer than all"),
    "replay: data.split: '-98,2,0'": (
        "forensics.yaml",
        "data.megatron.split: Value error, split must be like",
    ),
    "replay: data.split: '0,0,0'": (
        "forensics.yaml",
        "data.megatron.split: Value error, split must be like",
    ),
    "replay: data.split: 98": (
        "forensics.yaml",
        "data.megatron.split: Input should be a valid string",
    ),
    "replay: disk full": ("the disk is full", "free space and rerun"),
    "replay: duplicate blend names": (
        "forensics.yaml",
        "data.megatron.stages.0: Value error, dataset names in a blend",
    ),
    "replay: empty blend": (
        "forensics.yaml",
        "data.megatron.stages.0.blend: List should have at least",
    ),
    "replay: manifest not parquet": (
        "prose.manifest.parquet",
        "not a readable Parquet manifest (parquet: File out",
    ),
    "replay: manifest short": ("prose.manifest.parquet", "rows but the dataset has"),
    "replay: manifest with a 'dataset' column": (
        "prose.manifest.parquet",
        "manifest column 'dataset' would replace the replay table's",
    ),
    "replay: manifest with a 'text' column": (
        "prose.manifest.parquet",
        "manifest column 'text' would replace the replay table's",
    ),
    "replay: manifest with an 'iteration' column": (
        "prose.manifest.parquet",
        "manifest column 'iteration' would replace the replay table's",
    ),
    "replay: manifest with its first two rows swapped": (
        "prose.manifest.parquet",
        "its rows are not this dataset's documents in .idx order",
    ),
    "replay: prefix missing": ("data/nope", "names two prefixes"),
    "replay: short shuffle_index.npy in the Megatron cache": (
        "data-cache",
        "Megatron's cached indices for prose_text_document are damaged (shuffle_index",
    ),
    "replay: stage after the end": ("iteration 310", "data stage starting at iteration"),
    "replay: stages out of order": (
        "forensics.yaml",
        "data.megatron: Value error, data.stages must start at iteration",
    ),
    "replay: training.global_batch_size: 0": (
        "forensics.yaml",
        "training.global_batch_size: Input should be greater than",
    ),
    "replay: training.global_batch_size: 1000000000000": (
        "forensics.yaml",
        "training: Value error, the run would train",
    ),
    "replay: training.train_iters: -1": (
        "forensics.yaml",
        "training.train_iters: Input should be greater than",
    ),
    "replay: training.train_iters: 1.5": (
        "forensics.yaml",
        "training.train_iters: Input should be a valid integer, got",
    ),
    "replay: training.train_iters: 1000000000000000": (
        "forensics.yaml",
        "training: Value error, the run would train",
    ),
    "replay: unknown key": ("forensics.yaml", "data.megatron.sead: Extra inputs are not permitted"),
    "replay: weight -1": (
        "forensics.yaml",
        "data.megatron.stages.0.blend.0.weight: Input should be greater than",
    ),
    "replay: weight inf": (
        "forensics.yaml",
        "data.megatron.stages.0.blend.0.weight: Input should be a finite number",
    ),
    "replay: weight nan": (
        "forensics.yaml",
        "data.megatron.stages.0.blend.0.weight: Input should be a finite number",
    ),
    "rescore: --batch-size 0": ("--batch-size", "must be >="),
    "rescore: --dtype bogus": ("nope", "--checkpoint must be a model directory (config.json +"),
    "rescore: --export-tokens onto the data": (
        "data",
        "already exists; pass --force to overwrite it",
    ),
    "rescore: checkpoint missing": (
        "nope",
        "--checkpoint must be a model directory (config.json +",
    ),
    "rescore: losses not parquet": (
        "l.parquet",
        "not a readable Parquet losses file (parquet: File",
    ),
    "rescore: neither checkpoint nor losses": (
        "--checkpoint",
        "pass --checkpoint DIR, --losses FILE or --export-tokens DIR",
    ),
    "scan: --engine bogus": ("--engine", "choose one of local, ray"),
    "scan: --from 0": ("--from", "iterations are 1-indexed"),
    "scan: --from after --to": ("--from", "is after --to"),
    "scan: --out a file": ("forensics.yaml", "exists and is not a directory"),
    "scan: --out foreign files": ("data", "exists and holds files that are not a"),
    "scan: --shard-iterations 0": ("--shard-iterations", "must be at least"),
    "scan: --threshold -1": ("--threshold", "--threshold must be in"),
    "scan: --to past the end": ("--to", "is beyond the end of training"),
    "scan: --workers 0": ("--workers", "must be >="),
    "scan: .idx damaged": ("prose_text_document.idx", "corrupt index: sequence"),
    "score: --out a directory": ("--out", "is a directory; give a file path"),
    "score: --out exists": ("s.parquet", "already exists; pass --force to replace it"),
    "score: --out the .idx": (
        "prose_text_document.idx",
        "a training run's data or config file, never",
    ),
    "score: --out the input": ("d.jsonl", "is an input of this run; choose another"),
    "score: JSONL bad line 2": ("d.jsonl:2", "not a JSON object"),
    "score: disk full": ("the disk is full", "free space and rerun"),
    "score: empty JSONL": ("d.jsonl", "no rows or columns to score"),
    "score: input missing": ("nope.parquet", "no such file"),
    "score: input not parquet": ("x.parquet", "cannot read as .parquet: parquet: File out of"),
    "score: no text column": ("prose.manifest.parquet", "text column 'text' not found"),
    "score: text not a string": ("d.jsonl", "cannot read as .jsonl: failed to determine supertype"),
    "spike --force: disk full at 150000 B": ("the disk is full", "free space and rerun"),
    "spike --force: disk full at 20000 B": ("the disk is full", "free space and rerun"),
    "spike: --after -1": ("--after", "must be >="),
    "spike: --ahead-share -1": ("--ahead-share", "must be in"),
    "spike: --baseline 5-1": ("--baseline", "need 1 <= FIRST <= LAST"),
    "spike: --baseline nonsense": ("--baseline", "expected FIRST-LAST, e.g."),
    "spike: --baseline overlapping the window": ("--baseline", "overlaps"),
    "spike: --culprit unknown": ("--culprit", "no such cluster in this window"),
    "spike: --embed-model missing": ("nope", "--embed-model must be a local model directory"),
    "spike: --out a file": ("forensics.yaml", "exists and is not a directory"),
    "spike: --out an older run, no --force": ("spike", "holds an older run (step"),
    "spike: --out foreign files": ("data", "exists and holds files that are not a"),
    "spike: --rescore checkpoint missing": (
        "nope",
        "--checkpoint must be a model directory (config.json +",
    ),
    "spike: --step 0": ("--step", "is outside the run"),
    "spike: --step past the end": ("--step", "is outside the run"),
    "spike: --threshold 2": ("--threshold", "--threshold must be in"),
    "spike: --threshold nan": ("--threshold", "--threshold must be in"),
    "spike: --trainer nemo": ("'nemo'", "unknown trainer 'nemo'"),
    "spike: --window past iteration 1": ("--step", "is outside the run"),
    "spike: .idx damaged": ("prose_text_document.idx", "corrupt index: sequence"),
    "spike: config missing": ("nope.yaml", "config file not found"),
    "spike: disk full at 150000 B": ("the disk is full", "free space and rerun"),
    "spike: disk full at 20000 B": ("the disk is full", "free space and rerun"),
    "spike: no config here": ("--config", "no config: pass --config, set FORENSICS_CONFIG, or put"),
    "spike: seq_length 10000000": ("prose_text_document", "is longer than all"),
    "triage --force: disk full": ("the disk is full", "free space and rerun"),
    "triage: --checkpoints a,b": (
        "--checkpoints",
        "not a directory and not a comma-separated list",
    ),
    "triage: --checkpoints empty dir": (
        "--checkpoints",
        "no megatron-lm checkpoint folders (iter_N) found",
    ),
    "triage: --format bogus": (
        "--format",
        "unknown; choose one of auto, megatron, megatron-bridge, olmo-core, torchtitan, "
        "tensorboard",
    ),
    "triage: --format hf-trainer-state on text": ("train.log", "not valid JSON"),
    "triage: --format jsonl on text": ("train.log", "no JSON objects found"),
    "triage: --format tensorboard on text": (
        "train.log",
        "no scalar summaries found in the TensorBoard event",
    ),
    "triage: --out existing triage": ("--out", "already holds events.json"),
    "triage: --out holds a spike report": ("spike", "already holds report.md"),
    "triage: --out is the log": ("train.log", "exists and is not a directory"),
    "triage: --plateau-steps -5": ("--plateau-steps", "must be a positive number of steps"),
    "triage: --recovery-window 0": ("--recovery-window", "must be a positive number of steps"),
    "triage: 1e999 losses": ("h.csv", "no finite loss in"),
    "triage: CSV header only": ("h.csv", "the CSV has a header but no rows"),
    "triage: CSV without a loss": ("h.csv", "no loss field found (fields: step, lr)"),
    "triage: NaN-only log": ("train.log", "no finite"),
    "triage: binary log": ("train.log", "cannot tell the log format (no Megatron 'iteration"),
    "triage: corrupt TensorBoard file": (
        "tb",
        "no scalar summaries found in the TensorBoard event",
    ),
    "triage: disk full": ("the disk is full", "free space and rerun"),
    "triage: empty directory as log": (
        "data",
        "directory without TensorBoard event files (*tfevents*)",
    ),
    "triage: empty log": ("train.log", "the log is empty"),
    "triage: missing log": ("nope.log", "no such file or directory"),
    "triage: trainer_state with a list step": (
        "trainer_state.json",
        "no step/iteration column (columns: loss, __line)",
    ),
    "watch: --checkpoints a,b": ("--checkpoints", "not a directory and not a comma-separated list"),
    "watch: --format bogus": ("train.log", "bogus is not a log that grows as"),
    "watch: --interval -1": (
        "--interval",
        "must be a positive number of seconds",
    ),
    "watch: --interval 0": (
        "--interval",
        "must be a positive number of seconds",
    ),
    "watch: --on-malignant bogus": ("--on-malignant", "choose spike or none"),
    "watch: --out is the log": ("train.log", "exists and is not a directory"),
    "watch: --prometheus is the log": (
        "train.log",
        "exists and is not a forensics textfile; choose",
    ),
    "watch: --webhook not a URL": ("--webhook", "not an http(s) URL"),
    "watch: trainer_state.json": (
        "trainer_state.json",
        "hf-trainer-state is not a log that grows as",
    ),
}


def apply(accidents: list[Accident]) -> list[Accident]:
    """Each accident with its expected refusal fragments and result check."""
    for accident in accidents:
        if accident.name in REFUSALS:
            names, needle = REFUSALS[accident.name]
            accident.names = accident.names or names
            if not accident.needle:
                accident.needle = needle
        if accident.check is None and accident.name in RESULTS:
            accident.check = RESULTS[accident.name]
    return accidents
