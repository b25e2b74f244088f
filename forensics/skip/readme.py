"""skip.json's `readme`: one sentence per key, written into the file itself, so an engineer who
finds it beside a checkpoint months later can read it without this source."""

SKIP_README: dict[str, str] = {
    "action": "what to do first: kind rebuild (run `command`: remove the block list and rebuild "
    "the data; the skip flags are the stopgap), remove (the same with your own pipeline), skip "
    "(the skip flags are the fix) or none; share_ahead is the culprit's share of the samples of "
    "the rest of the run, material_share the threshold it is compared with; why says it in words; "
    "flags_dir is where the restart-<trainer>.flags files are, as seen from where spike ran; "
    "restart_pin, where present, is the trainer's flag that loads the rollback checkpoint, to "
    "add to the launch line beside the rebuild's restart file (torchtitan's "
    "--checkpoint.load_step=R)",
    "step": "the spike's iteration (1-indexed, as logged)",
    "window": "[first, last] iterations replayed before the spike",
    "rollback": "the checkpoint to restart from (iteration) and the first iteration the restart "
    "trains (resume_iteration), with the rule and a note",
    "scope": "[first, last] iterations the skip list was chosen in",
    "threshold": "an iteration is skipped when its share of samples holding culprit documents "
    "exceeds this",
    "trainer": "the training loop that will read the flags (its syntax is in flags)",
    "iterations": "[first, last] ranges of logged iterations to skip, inclusive",
    "samples": "the same batches as global sample ranges [start, end), half-open",
    "documents": "the block list: culprit documents per dataset (doc_ids in .idx order); "
    "`forensics rebuild` removes them",
    "culprit_clusters": "the cluster ids blamed (see report.json's clusters)",
    "documents_seen_in_window": "how many culprit documents the window drew",
    "documents_flagged": "the narrow block list: the culprit documents of the window that a "
    "scorer flagged",
    "flags": "per trainer: the flag string, what its numbers mean, what the restart then does "
    "differently, the checkpoint pin, or why no exact flag exists; restart-<trainer>.flags holds "
    "the pin (where it is a flag) and the flag on one line, to add as it is at the end of the "
    "launch line; a pin that is not a flag builds a new load folder and leaves the checkpoint "
    "folder as it is; a trainer with no skip option (torchtitan) has its refusal and its pin",
    "collateral": "what the skip costs and misses: clean samples skipped, culprit samples missed",
    "ahead": "the culprit after the skipped range: its share of the remaining samples, how many "
    "iterations hold it, the densest ones, and advice",
    "fingerprint": "the run this file is valid for (config hash, data file sizes and index "
    "hashes): check-skip and rebuild refuse another run",
    "notes": "what the pipeline noticed on the way (stage crossings, the baseline chosen)",
    "composed": "iterations an earlier restart already skipped that are skipped again",
    "tracker_file": "the Megatron-LM tracker file written beside this one, or null",
    "version": "the skip file format's version",
    "readme": "this explanation",
    "provenance": "who wrote this file: the run's name, forensics version, time (UTC), command",
}
