# ruff: noqa
# Verbatim lines of the trainers' skip code (repository, commit, file, lines, sha256
# of the text), written by `python tests/oracles/trainer_skip.py --write` from
# `fetch`ed copies; tests/forensics/skip/test_skip_upstream.py holds them to their
# hashes and, where a copy is on the machine, to the source. Do not edit: refresh.
SNIPPETS = {
    "megatron-lm/dummy_train_step": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
        "path": "megatron/training/training.py",
        "first": 2963,
        "last": 3007,
        "sha256": "91eb8be33790b4f169fc14b26c3c61cd9848741b1a912ea202ac0f70e02fb230",
        "text": r'''def dummy_train_step(data_iterator):
    """Single dummy training step."""
    args = get_args()
    tp_rank = mpu.get_tensor_model_parallel_rank()
    has_cu_seqlens = getattr(args, 'sft', False) or getattr(args, 'dataloader_inter_document_masking', False)
    is_hybrid_cp = args.hybrid_context_parallel

    BATCH_KEYS = [
        "tokens", "labels", "loss_mask", "position_ids", "attention_mask",
        "cu_seqlens", "cu_seqlens_padded", "max_seqlen", "local_cp_size",
        "hybrid_cp_group",
    ]

    num_microbatches = get_num_microbatches()
    rerun_state_machine = get_rerun_state_machine()
    while rerun_state_machine.should_run_forward_backward(data_iterator):
        for _ in range(num_microbatches):
            # Re-use methods used in get_batch() from pretrain_{gpt, mamba}.py.
            batch = {}
            if tp_rank == 0:
                batch = next(data_iterator)
                for key in BATCH_KEYS:
                    batch[key] = batch[key].cuda(non_blocking=True) if key in batch and batch[key] is not None else None
            batch = get_batch_on_this_tp_rank(
                batch,
                broadcast_src_rank=mpu.get_tensor_model_parallel_src_rank(),
                broadcast_group=mpu.get_tensor_model_parallel_group(),
                has_cu_seqlens=has_cu_seqlens,
                is_hybrid_cp=is_hybrid_cp,
                create_attention_mask_in_dataloader=args.create_attention_mask_in_dataloader,
                cp_size=args.context_parallel_size,
                tp_rank=tp_rank,
                micro_batch_size=args.micro_batch_size,
                seq_length=args.seq_length,
                mtp_on_this_rank=False,
                pipeline_model_parallel_size=args.pipeline_model_parallel_size,
                is_pipeline_first_stage=mpu.is_pipeline_first_stage(),
                is_pipeline_last_stage=mpu.is_pipeline_last_stage(),
            )
            batch = get_batch_on_this_cp_rank(
                batch,
                is_hybrid_cp=is_hybrid_cp,
                cp_group=get_context_parallel_group(),
                hybrid_cp_group_func=get_hybrid_data_context_parallel_groups,
            )
''',
    },
    "megatron-lm/loop": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
        "path": "megatron/training/training.py",
        "first": 4554,
        "last": 4554,
        "sha256": "455a359e0c8b15aca7c8d698e15c79c81a94043e15879a754449dcaf652e9c63",
        "text": r"""    while iteration < args.train_iters:
""",
    },
    "megatron-lm/update_num_microbatches": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
        "path": "megatron/training/training.py",
        "first": 4627,
        "last": 4627,
        "sha256": "aad9aa7042936c87f38c5705df8ed6c907368252504b5b5bcb05c61faba3c5fa",
        "text": r"""        update_num_microbatches(args.consumed_train_samples, consistency_check=True, verbose=True)
""",
    },
    "megatron-lm/skip": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
        "path": "megatron/training/training.py",
        "first": 4647,
        "last": 4659,
        "sha256": "e33bccfbb062a5c49df505825ccc882dd7568bc1b7794446a62abac3dfc41287",
        "text": r"""        # Completely skip iteration if needed.
        if (iteration + 1) in args.iterations_to_skip:
            # Dummy train_step to fast forward train_data_iterator.
            dummy_train_step(train_data_iterator)
            if iteration == start_iteration:
                start_iteration = iteration + 1
            iteration += 1
            batch_size = (
                _dp_world_size() * args.micro_batch_size * get_num_microbatches()
            )
            args.consumed_train_samples += batch_size
            args.skipped_train_samples += batch_size
            continue
""",
    },
    "megatron-lm/iteration": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
        "path": "megatron/training/training.py",
        "first": 4785,
        "last": 4785,
        "sha256": "9c700cb93c141828e8850cdcfee3ee3ddb71c35029dbd0d6d9fb457a45f5f6b2",
        "text": r"""        iteration += 1
""",
    },
    "megatron-lm/consumed": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
        "path": "megatron/training/training.py",
        "first": 4804,
        "last": 4818,
        "sha256": "bf1a88f4de41642ca11f1041d1ade0997c82a20f07b989a1052cbbaab94693c8",
        "text": r"""        if args.perform_rl_step and args.rl_use_sequence_packing:
            iteration_sequences = rl_utils.get_iteration_sequence_count(args)
            # Track bins separately for packed mode
            bin_count = (
                _dp_world_size() * args.micro_batch_size * get_num_microbatches()
            )
            args.consumed_train_bins += bin_count
        else:
            batch_size = (
                _dp_world_size() * args.micro_batch_size * get_num_microbatches()
            )
            iteration_sequences = batch_size

        # Update consumed samples (always means sequences now)
        args.consumed_train_samples += iteration_sequences
""",
    },
    "megatron-lm-pre-0.17/dummy_train_step": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "ade81bc79d4e811fca8e7fb1fc3c000543e22af9",
        "path": "megatron/training/training.py",
        "first": 1711,
        "last": 1719,
        "sha256": "cb4b6f4259ccd0404986ce09e402d0815f30e499e5d785d52ce96ae9ba58477f",
        "text": r'''def dummy_train_step(data_iterator):
    """Single dummy training step."""
    num_microbatches = get_num_microbatches()
    rerun_state_machine = get_rerun_state_machine()
    while rerun_state_machine.should_run_forward_backward(data_iterator):
        for _ in range(num_microbatches):
            # Re-use methods used in get_batch() from pretrain_{gpt, mamba}.py.
            batch = get_batch_on_this_tp_rank(data_iterator)
            batch = get_batch_on_this_cp_rank(batch)
''',
    },
    "megatron-lm-pre-0.17/loop": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "ade81bc79d4e811fca8e7fb1fc3c000543e22af9",
        "path": "megatron/training/training.py",
        "first": 2833,
        "last": 2833,
        "sha256": "455a359e0c8b15aca7c8d698e15c79c81a94043e15879a754449dcaf652e9c63",
        "text": r"""    while iteration < args.train_iters:
""",
    },
    "megatron-lm-pre-0.17/update_num_microbatches": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "ade81bc79d4e811fca8e7fb1fc3c000543e22af9",
        "path": "megatron/training/training.py",
        "first": 2887,
        "last": 2887,
        "sha256": "aad9aa7042936c87f38c5705df8ed6c907368252504b5b5bcb05c61faba3c5fa",
        "text": r"""        update_num_microbatches(args.consumed_train_samples, consistency_check=True, verbose=True)
""",
    },
    "megatron-lm-pre-0.17/skip": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "ade81bc79d4e811fca8e7fb1fc3c000543e22af9",
        "path": "megatron/training/training.py",
        "first": 2902,
        "last": 2914,
        "sha256": "118e2ebb4da61bd7f3c84538878027d36674b4599bbebc77393cca5b6a656b16",
        "text": r"""        # Completely skip iteration if needed.
        if iteration in args.iterations_to_skip:
            # Dummy train_step to fast forward train_data_iterator.
            dummy_train_step(train_data_iterator)
            if iteration == start_iteration:
                start_iteration = iteration + 1
            iteration += 1
            batch_size = (
                mpu.get_data_parallel_world_size() * args.micro_batch_size * get_num_microbatches()
            )
            args.consumed_train_samples += batch_size
            args.skipped_train_samples += batch_size
            continue
""",
    },
    "megatron-lm-pre-0.17/iteration": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "ade81bc79d4e811fca8e7fb1fc3c000543e22af9",
        "path": "megatron/training/training.py",
        "first": 3004,
        "last": 3004,
        "sha256": "9c700cb93c141828e8850cdcfee3ee3ddb71c35029dbd0d6d9fb457a45f5f6b2",
        "text": r"""        iteration += 1
""",
    },
    "megatron-lm-pre-0.17/consumed": {
        "repo": "NVIDIA/Megatron-LM",
        "commit": "ade81bc79d4e811fca8e7fb1fc3c000543e22af9",
        "path": "megatron/training/training.py",
        "first": 3020,
        "last": 3034,
        "sha256": "adb59afb743e5266f611e9bb126f85703464c52b00adca680f8215bc9a248d19",
        "text": r"""        if args.perform_rl_step and args.rl_use_sequence_packing:
            iteration_sequences = rl_utils.get_iteration_sequence_count(args)
            # Track bins separately for packed mode
            bin_count = (
                mpu.get_data_parallel_world_size() * args.micro_batch_size * get_num_microbatches()
            )
            args.consumed_train_bins += bin_count
        else:
            batch_size = (
                mpu.get_data_parallel_world_size() * args.micro_batch_size * get_num_microbatches()
            )
            iteration_sequences = batch_size

        # Update consumed samples (always means sequences now)
        args.consumed_train_samples += iteration_sequences
""",
    },
    "megatron-deepspeed/argument": {
        "repo": "bigscience-workshop/Megatron-DeepSpeed",
        "commit": "8387ae17c4704f6579f88a84500b535d19d7fbbf",
        "path": "megatron/arguments.py",
        "first": 572,
        "last": 573,
        "sha256": "f2028a1eb452a424bfa3f878a5495a993849388dd1950269ba0fccb3f9ba5a3a",
        "text": r"""    group.add_argument('--skip-train-iteration-range', type=str, nargs='+', default=None,
                       help='Iteration ranges to skip. The values are one or more dash-separated ranges. e.g., 101-200 251-300.')
""",
    },
    "megatron-deepspeed/parse": {
        "repo": "bigscience-workshop/Megatron-DeepSpeed",
        "commit": "8387ae17c4704f6579f88a84500b535d19d7fbbf",
        "path": "megatron/arguments.py",
        "first": 288,
        "last": 311,
        "sha256": "14e3217e43dbae2ccb9feb9737a0588d23d7e317f29782e36e6dad46f722a47c",
        "text": r"""    # Skip train iterations
    if args.skip_train_iteration_range is not None:
        args.skip_train_iteration_range = [
            list(map(int, range_.split("-"))) for range_ in args.skip_train_iteration_range
        ]
        args.skip_train_iteration_range.sort()
        skip_train_iteration_range = collections.deque()
        for range_ in args.skip_train_iteration_range:
            if len(range_) == 2:
                start, end = range_
                assert end >= start, \
                "end of skip range cannot be smaller than start of skip range"
                # merge overlapping intervals (e.g. 1-5 2-6 -> 1-6)
                if not skip_train_iteration_range:
                    skip_train_iteration_range.append([start, end])
                elif skip_train_iteration_range[-1][1] >= start:
                    skip_train_iteration_range[-1][1] = max(end, skip_train_iteration_range[-1][1])
                else:
                    skip_train_iteration_range.append([start, end])
            else:
                raise ValueError(
                    "skip train iterations should be specified as two numbers, i.e. start-end"
                )
        args.skip_train_iteration_range = skip_train_iteration_range
""",
    },
    "megatron-deepspeed/loop": {
        "repo": "bigscience-workshop/Megatron-DeepSpeed",
        "commit": "8387ae17c4704f6579f88a84500b535d19d7fbbf",
        "path": "megatron/training.py",
        "first": 883,
        "last": 906,
        "sha256": "0ad9089618ef6dcba77a1a079ac2c7c9273aeb77e5cf32599fb9640bec10aabe",
        "text": r"""    # flush intervals prior to current iteration
    if args.skip_train_iteration_range is not None:
        ends = [end for start, end in args.skip_train_iteration_range]
        index = bisect.bisect_left(ends, iteration)
        for _ in range(index):
            args.skip_train_iteration_range.popleft()

    while iteration < args.train_iters:
        if (
            # train_data_iterator is not None
            args.skip_train_iteration_range is not None
            and len(args.skip_train_iteration_range) > 0
            and args.skip_train_iteration_range[0][0] <= iteration + 1 <= args.skip_train_iteration_range[0][1]
        ):
            start, end = args.skip_train_iteration_range.popleft()
            print_rank_0(f"Skipped iterations {start} to {end} due to --skip-train-iteration-range flag.")
            iteration_for_skipping = args.iteration
            while iteration_for_skipping + 1 <= end:
                try:
                    _ = next(train_data_iterator)
                except TypeError:
                    pass
                iteration_for_skipping += 1
            continue
""",
    },
    "megatron-deepspeed/update_num_microbatches": {
        "repo": "bigscience-workshop/Megatron-DeepSpeed",
        "commit": "8387ae17c4704f6579f88a84500b535d19d7fbbf",
        "path": "megatron/training.py",
        "first": 913,
        "last": 913,
        "sha256": "926db53ef90dbe79296903ce369ae00c43054f99ffee51dccf4cee1f27fb81c9",
        "text": r"""        update_num_microbatches(args.consumed_train_samples)
""",
    },
    "megatron-deepspeed/counters": {
        "repo": "bigscience-workshop/Megatron-DeepSpeed",
        "commit": "8387ae17c4704f6579f88a84500b535d19d7fbbf",
        "path": "megatron/training.py",
        "first": 931,
        "last": 936,
        "sha256": "b6a5354a0cd0c8d89cc83cd16cc28ec8d8da21e4be9a966636e5d5ff7fcba200",
        "text": r"""        iteration += 1
        args.iteration = iteration
        new_samples = mpu.get_data_parallel_world_size() * \
                                       args.micro_batch_size * \
                                       get_num_microbatches()
        args.consumed_train_samples += new_samples
""",
    },
    "megatron-deepspeed-argonne/argument": {
        "repo": "argonne-lcf/Megatron-DeepSpeed",
        "commit": "ffa3456d68b630192fcaefcc3288bd18525b8d95",
        "path": "megatron/arguments.py",
        "first": 1607,
        "last": 1613,
        "sha256": "43b3570669688324862ef2e4144df545677c8826c7ff96cbae20def5613c40c0",
        "text": r"""    group.add_argument(
        "--train-range-to-skip",
        action="extend",
        nargs="+",
        type=int,
        help=("Range of iters to skip during training. Must be in pairs."),
    )
""",
    },
    "megatron-deepspeed-argonne/parse": {
        "repo": "argonne-lcf/Megatron-DeepSpeed",
        "commit": "ffa3456d68b630192fcaefcc3288bd18525b8d95",
        "path": "megatron/training.py",
        "first": 1072,
        "last": 1084,
        "sha256": "423738e6a5ed319ab3f9ccd53b28a375aab5e717380c0276a8559f2b1acb8e45",
        "text": r'''    ranges_to_skip = None
    if args.train_range_to_skip is not None:
        assert (
            len(args.train_range_to_skip) % 2 == 0
        ), f"""Expected --train-range-to-skip to have an even number of values.
            Received: {len(args.train_range_to_skip)}
            """
        ranges_to_skip = list(
            zip(
                args.train_range_to_skip[::2],
                args.train_range_to_skip[1::2],
            )
        )
''',
    },
    "megatron-deepspeed-argonne/loop": {
        "repo": "argonne-lcf/Megatron-DeepSpeed",
        "commit": "ffa3456d68b630192fcaefcc3288bd18525b8d95",
        "path": "megatron/training.py",
        "first": 1273,
        "last": 1275,
        "sha256": "59b8845ba7749dfaaddb14b19da380de6b035dad7b1af48459467a585bb4d07e",
        "text": r"""    while iteration < args.train_iters and (
        args.train_tokens is None or args.consumed_train_tokens < args.train_tokens
    ):
""",
    },
    "megatron-deepspeed-argonne/update_num_microbatches": {
        "repo": "argonne-lcf/Megatron-DeepSpeed",
        "commit": "ffa3456d68b630192fcaefcc3288bd18525b8d95",
        "path": "megatron/training.py",
        "first": 1277,
        "last": 1277,
        "sha256": "926db53ef90dbe79296903ce369ae00c43054f99ffee51dccf4cee1f27fb81c9",
        "text": r"""        update_num_microbatches(args.consumed_train_samples)
""",
    },
    "megatron-deepspeed-argonne/skip": {
        "repo": "argonne-lcf/Megatron-DeepSpeed",
        "commit": "ffa3456d68b630192fcaefcc3288bd18525b8d95",
        "path": "megatron/training.py",
        "first": 1295,
        "last": 1323,
        "sha256": "c120aac8037e51d36a0015f832a26640eae56abcdd6ce007c668f8afd85f50a7",
        "text": r"""        if ranges_to_skip is not None and any(
            [i <= (iteration + 1) <= j for (i, j) in ranges_to_skip]
        ):
            log.info(f"Caught {iteration + 1} in 'ranges_to_skip', skipping!")
            skipped_iter = 1
            num_skipped_iters += 1
            num_zeros_in_grad = None
            gas = args.deepspeed_config_dict["gradient_accumulation_steps"]
            for microstep in range(gas):
                _batch = next(train_data_iterator)
                _tokens = _batch["text"]
                if (
                    iteration < 10
                    and os.environ.get("DUMP_SKIPPED_ITERS", None)
                    and RANK == 0
                ):
                    log.info(f"{_tokens.shape}, {len(train_data_iterator)=}")
                    log.info(
                        f"{iteration=} [{microstep}/{gas}]: ({_tokens.shape})\n{_tokens[:10]=}"
                    )

            increment = (
                get_num_microbatches() * args.micro_batch_size * args.data_parallel_size
            )
            model[0].skipped_steps += 1
            model[0].global_steps += 1
            model[0].micro_steps += 1
            model[0].global_samples += model[0].train_batch_size()
            opt_param_scheduler.step(increment=increment)
""",
    },
    "megatron-deepspeed-argonne/counters": {
        "repo": "argonne-lcf/Megatron-DeepSpeed",
        "commit": "ffa3456d68b630192fcaefcc3288bd18525b8d95",
        "path": "megatron/training.py",
        "first": 1358,
        "last": 1365,
        "sha256": "53fa48e94d8ecc5a04a68d51b0b8ff29c0c1e410acda543a61dc54fc1b5e2496",
        "text": r"""        iteration += 1
        args.iteration = iteration
        new_samples = (
            mpu.get_data_parallel_world_size()
            * args.micro_batch_size
            * get_num_microbatches()
        )
        args.consumed_train_samples += new_samples
""",
    },
}
