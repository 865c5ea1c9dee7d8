"""Generations with SmolLM2: streaming, determinism, stops, cancellation, stats, errors."""
import dataclasses
import threading

import pytest

import pulseinfer
from pulseinfer import (Admission, CopyExecutor, Engine, EngineParams, Eviction, FinishReason,
                        HostCodec, OffloadMode, SamplingParams, SummaryPrecision)

PROMPT = "Once upon a time"
# SmolLM2's greedy continuation of PROMPT: ", the city of Nova Haven was a thriving..."
NOVA, HAVEN = 23324, 27108


def greedy(max_tokens: int = 8, **fields) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, **fields)


def test_streamed_text_is_the_detokenized_ids(model, engine):
    generation = engine.generate(PROMPT, greedy(16))
    tokens = list(generation)
    ids = [token.id for token in tokens]
    assert len(ids) == 16
    assert "".join(token.text for token in tokens) == model.detokenize(ids) == generation.text()
    assert generation.token_ids() == ids
    assert generation.finish_reason is FinishReason.MAX_TOKENS


def test_greedy_is_deterministic_for_text_and_token_prompts(model, engine):
    first = engine.generate(PROMPT, greedy()).token_ids()
    assert engine.generate(PROMPT, greedy()).token_ids() == first
    assert engine.generate(model.tokenize(PROMPT), greedy()).token_ids() == first
    assert first[4] == NOVA


def test_seeded_sampling_repeats(engine):
    sampling = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05,
                              repetition_penalty=1.1, seed=42, max_tokens=8)
    assert engine.generate(PROMPT, sampling).text() == engine.generate(PROMPT, sampling).text()


def test_stop_string_ends_the_text_before_it(engine):
    generation = engine.generate(PROMPT, greedy(16, stop_strings=[" Haven", "unused"]))
    assert generation.text() == ", the city of Nova"
    assert generation.finish_reason is FinishReason.STOP_STRING
    assert generation.token_ids()[-1] == HAVEN  # the tokens that formed it stay


def test_stop_token_is_the_last_token(engine):
    generation = engine.generate(PROMPT, greedy(16, stop_token_ids=[NOVA]))
    assert generation.token_ids()[-1] == NOVA
    assert generation.finish_reason is FinishReason.STOP_TOKEN


def test_chat_prompt_answers(model, engine):
    prompt = model.apply_chat_template([{"role": "user",
                                         "content": "What is the capital of France?"}])
    generation = engine.generate(prompt, greedy(16),
                                 tokenize_flags=pulseinfer.TokenizeFlags.PARSE_SPECIAL)
    assert "Paris" in generation.text()
    assert generation.finish_reason is FinishReason.STOP_TOKEN
    assert generation.token_ids()[-1] == model.info.eos_token


def test_chat_applies_the_template_and_its_special_tokens(model, engine):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    by_hand = engine.generate(model.apply_chat_template(messages), greedy(16),
                              tokenize_flags=pulseinfer.TokenizeFlags.PARSE_SPECIAL)
    chat = engine.chat(messages, greedy(16))
    assert chat.token_ids() == by_hand.token_ids()
    assert "Paris" in chat.text()
    assert chat.stats().prompt_tokens == by_hand.stats().prompt_tokens


def test_generate_batch_returns_the_outputs_in_order(engine):
    prompts = ["Once upon a time", "The capital of France is", "def fibonacci(n):"]
    alone = [engine.generate(prompt, greedy(6, ignore_eos=True)).token_ids()
             for prompt in prompts]
    batch = engine.generate_batch(prompts, greedy(6, ignore_eos=True))
    assert [generation.token_ids() for generation in batch] == alone
    assert all(generation.finish_reason is FinishReason.MAX_TOKENS for generation in batch)
    per_prompt = engine.generate_batch(prompts[:2], [greedy(2), greedy(3)])
    assert [len(generation.token_ids()) for generation in per_prompt] == [2, 3]
    with pytest.raises(ValueError, match="2 sampling params for 3 prompts"):
        engine.generate_batch(prompts, [greedy(), greedy()])
    with pytest.raises(pulseinfer.InvalidArgumentError):
        engine.generate_batch(["fine", ""])
    assert engine.stats().running == 0 and engine.stats().queued == 0


def test_cancel_mid_stream(engine):
    generation = engine.generate(PROMPT, greedy(16))
    first = [next(generation), next(generation)]
    generation.cancel()
    assert first + list(generation) == first
    assert generation.finish_reason is FinishReason.CANCELLED
    assert generation.stats().generated_tokens == 2
    generation.close()


def test_cancel_from_another_thread(engine):
    generation = engine.generate(PROMPT, greedy(16))
    next(generation)
    canceller = threading.Thread(target=generation.cancel)
    canceller.start()
    canceller.join()
    assert len(generation.token_ids()) < 16
    assert generation.finish_reason is FinishReason.CANCELLED


def test_breaking_out_of_the_loop_cancels(engine):
    for _ in engine.generate(PROMPT, greedy(16)):
        break
    stats = engine.stats()
    assert (stats.running, stats.queued, stats.finished_requests) == (0, 0, 1)
    assert stats.kv_blocks_in_use == 0


def test_closing_releases_the_request(engine):
    with engine.generate(PROMPT, greedy(16)) as generation:
        next(generation)
    assert list(generation) == []
    with pytest.raises(pulseinfer.NotFoundError, match=f"no request {generation.id}"):
        generation.stats()
    assert engine.stats().running == 0


def test_request_stats(model, engine):
    generation = engine.generate(PROMPT, greedy())
    generation.text()
    stats = generation.stats()
    assert (stats.state, stats.finish_reason) == (pulseinfer.RequestState.FINISHED,
                                                  FinishReason.MAX_TOKENS)
    assert (stats.prompt_tokens, stats.generated_tokens) == (len(model.tokenize(PROMPT)), 8)
    assert stats.error == pulseinfer.capi.PULSE_OK
    assert 0 < stats.ttft_ms <= stats.total_ms and stats.tpot_ms > 0


def test_engine_stats_and_stepping(model, engine):
    generations = [engine.generate(PROMPT, greedy()), engine.generate(PROMPT, greedy())]
    report = engine.step()
    assert (report.scheduled, report.decode_tokens, report.pending) == (2, 0, 2)
    assert report.prefill_tokens == 2 * len(model.tokenize(PROMPT))
    engine.run()
    stats = engine.stats()
    assert (stats.generated_tokens, stats.finished_requests, stats.running) == (16, 2, 0)
    assert stats.prefill_tokens == report.prefill_tokens and stats.steps >= 8
    assert stats.kv_blocks > 0 and stats.kv_blocks_in_use == 0
    assert generations[0].token_ids() == generations[1].token_ids()


def test_invalid_requests_raise(model, engine):
    with pytest.raises(pulseinfer.InvalidArgumentError, match="temperature must be"):
        engine.generate(PROMPT, SamplingParams(temperature=-1))
    with pytest.raises(pulseinfer.InvalidArgumentError, match="the prompt is empty"):
        engine.generate([])
    with pytest.raises(pulseinfer.InvalidArgumentError):
        engine.generate([model.info.vocab_size])
    with pytest.raises(TypeError):
        engine.generate(PROMPT, SamplingParams(max_tokens="8"))
    with pytest.raises(TypeError):
        engine.generate(PROMPT, greedy(stop_strings="."))


def test_a_request_that_can_never_fit_raises_out_of_memory(model):
    params = pulseinfer.EngineParams(block_tokens=16, kv_capacity_tokens=64)
    with pulseinfer.Engine(model, params) as engine:
        with pytest.raises(pulseinfer.OutOfMemoryError, match="more than the whole cache"):
            engine.generate(PROMPT, greedy(200))


def test_random_weights_generate_ids_without_text(tiny_model):
    with pulseinfer.Engine(tiny_model) as engine:
        generation = engine.generate([5, 6, 7], greedy(4, ignore_eos=True))
        tokens = list(generation)
        assert len(tokens) == 4 and all(token.text == "" for token in tokens)
        assert generation.text() == ""
        with pytest.raises(pulseinfer.UnsupportedError, match="no tokenizer"):
            engine.generate("text")
        with pytest.raises(pulseinfer.NotFoundError, match="no tokenizer"):
            engine.chat([{"role": "user", "content": "hi"}])
        with pytest.raises(pulseinfer.FailedPreconditionError, match="stop strings"):
            engine.generate([5], greedy(stop_strings=["x"]))


def test_closed_engine_ends_its_generations(engine):
    generation = engine.generate(PROMPT, greedy())
    next(generation)
    engine.close()
    with pytest.raises(ValueError, match="engine is closed"):
        next(generation)
    generation.close()  # the engine freed the request: nothing to do
    with pytest.raises(ValueError, match="engine is closed"):
        engine.generate(PROMPT)



def test_offload_with_a_budget_covering_the_context_generates_the_dense_tokens(model, engine):
    expected = engine.generate(PROMPT, greedy()).token_ids()
    for mode in (OffloadMode.SOLOHEAD, OffloadMode.HEADWISE):
        params = EngineParams(max_context=512, offload_mode=mode, offload_budget_tokens=4096,
                              offload_admission=Admission.OFFLOAD_EVERY)
        with Engine(model, params) as sparse:
            assert sparse.generate(PROMPT, greedy()).token_ids() == expected
            stats = sparse.stats()
        assert stats.sparse_selections > 0
        assert stats.sparse_attended_tokens == stats.sparse_context_tokens


# The offload settings of tests/unit/capi/abi_generation_test.cc: 8-token blocks, a budget
# covering the context, host and slot tiers of 1024 and 256 tokens.
# Offloaded with recall: the slots hold the whole context, so with the blocks the request stops
# keeping resident filling them (offload_fill_free_slots, the default) nothing would be recalled.
OFFLOADED = EngineParams(block_tokens=8, offload_mode=OffloadMode.SOLOHEAD,
                         offload_budget_tokens=1 << 20, offload_sink_tokens=8,
                         offload_window_tokens=16, offload_host_tokens=1024,
                         offload_slot_tokens=256, offload_admission=Admission.OFFLOAD_EVERY,
                         offload_fill_free_slots=0)
TINY_PROMPT = [3 + (i * 37) % 297 for i in range(150)]  # 150 ids of the tiny vocabulary


def test_offloaded_kv_smaller_than_the_request_generates_the_dense_tokens(tiny_model):
    with Engine(tiny_model, EngineParams(block_tokens=8)) as dense:
        expected = dense.generate(TINY_PROMPT, greedy(12, ignore_eos=True)).token_ids()
    # A KV cache of 160 tokens: the prompt fits, the 161 tokens of KV the request reaches do not.
    for executor in CopyExecutor:
        for eviction in Eviction:
            params = dataclasses.replace(OFFLOADED, kv_capacity_tokens=160,
                                         offload_executor=executor, offload_eviction=eviction)
            with Engine(tiny_model, params) as offloaded:
                generation = offloaded.generate(TINY_PROMPT, greedy(12, ignore_eos=True))
                assert generation.token_ids() == expected, (executor, eviction)
                stats = offloaded.stats()
            assert (stats.host_blocks, stats.slot_blocks) == (1024 // 8, 256 // 8)
            assert stats.writeback_bytes > 0 and stats.recall_bytes > 0
            assert stats.recall_transfers > 0 and stats.recall_plans > 0
            assert stats.slot_hits > 0 and stats.selection_ms > 0
            assert (stats.host_blocks_in_use, stats.slot_blocks_in_use) == (0, 0)


def test_a_prefix_cache_shares_a_finished_prompt_and_keeps_the_tokens(tiny_model):
    # A budget of 64 tokens: selection matters. The second prompt starts with the first's 18
    # full blocks of 8 tokens.
    params = dataclasses.replace(OFFLOADED, kv_capacity_tokens=160, offload_budget_tokens=64)
    assert EngineParams().offload_prefix_cache == 0
    longer = TINY_PROMPT + TINY_PROMPT[:10]
    results = {}
    for cache in (0, 1):
        with Engine(tiny_model, dataclasses.replace(params, offload_prefix_cache=cache)) as engine:
            engine.generate(TINY_PROMPT, greedy(12, ignore_eos=True)).token_ids()
            tokens = engine.generate(longer, greedy(12, ignore_eos=True)).token_ids()
            results[cache] = (tokens, engine.stats())
    (unshared, off), (shared, on) = results[0], results[1]
    assert shared == unshared and len(shared) == 12
    assert (off.prefix_hits, off.host_blocks_cached) == (0, 0)
    assert (on.prefix_hits, on.prefix_hit_tokens) == (1, 144)
    assert on.prefill_tokens == off.prefill_tokens - 144
    with pytest.raises(pulseinfer.InvalidArgumentError, match="offload_prefix_cache"):
        Engine(tiny_model, dataclasses.replace(params, offload_prefix_cache=2))


def test_an_fp8_host_tier_moves_fewer_bytes_and_a_bad_codec_is_refused(tiny_model):
    params = dataclasses.replace(OFFLOADED, kv_capacity_tokens=160)
    assert EngineParams().offload_host_codec == HostCodec.RAW
    stats = {}
    for codec in HostCodec:
        with Engine(tiny_model, dataclasses.replace(params, offload_host_codec=codec)) as engine:
            generation = engine.generate(TINY_PROMPT, greedy(12, ignore_eos=True))
            assert len(generation.token_ids()) == 12
            stats[codec] = engine.stats()
    # The tiny model's f32 blocks of 2048 bytes are 16 bytes of scales and 512 of codes in fp8;
    # a covering budget recalls the same blocks either way.
    raw, fp8 = stats[HostCodec.RAW], stats[HostCodec.FP8]
    assert raw.recall_bytes > 0 and raw.recall_bytes * 528 == fp8.recall_bytes * 2048
    assert raw.writeback_bytes * 528 == fp8.writeback_bytes * 2048
    with pytest.raises(pulseinfer.InvalidArgumentError, match="offload_host_codec"):
        Engine(tiny_model, dataclasses.replace(params, offload_host_codec=2))


def test_adaptive_admission_runs_what_fits_resident_and_says_so(tiny_model):
    assert EngineParams().offload_admission == Admission.IO_ADAPTIVE
    with Engine(tiny_model, EngineParams(block_tokens=8)) as dense:
        expected = dense.generate(TINY_PROMPT, greedy(12, ignore_eos=True)).token_ids()
    params = dataclasses.replace(OFFLOADED, offload_admission=Admission.IO_ADAPTIVE)
    with Engine(tiny_model, params) as engine:
        assert engine.generate(TINY_PROMPT, greedy(12, ignore_eos=True)).token_ids() == expected
        stats = engine.stats()
    assert (stats.admitted_resident, stats.admitted_offloaded) == (1, 0)
    assert stats.kv_memory_bytes > 0
    assert stats.sparse_selections == 0 and stats.recall_bytes == 0
    with Engine(tiny_model, OFFLOADED) as engine:
        assert engine.generate(TINY_PROMPT, greedy(12, ignore_eos=True)).token_ids() == expected
        stats = engine.stats()
    assert (stats.admitted_resident, stats.admitted_offloaded, stats.running_offloaded) == (0, 1, 0)
    assert stats.link_gb_s > 0 and stats.step_compute_ms > 0 and stats.recall_mb_per_row > 0
    # A least budget to lower to: nothing is lowered for a request that fits, and one above the
    # budget is refused by name.
    assert EngineParams().offload_min_budget_tokens == 0
    with Engine(tiny_model, dataclasses.replace(params, offload_min_budget_tokens=16)) as engine:
        assert engine.generate(TINY_PROMPT, greedy(12, ignore_eos=True)).token_ids() == expected
        assert (engine.stats().admitted_resident, engine.stats().lowered_budgets) == (1, 0)
    with pytest.raises(pulseinfer.InvalidArgumentError, match="offload_min_budget_tokens"):
        Engine(tiny_model, dataclasses.replace(params, offload_budget_tokens=48,
                                               offload_min_budget_tokens=49))


def test_micro_batches_give_the_ids_of_one(tiny_model):
    def run(count):
        params = dataclasses.replace(OFFLOADED, offload_budget_tokens=48, micro_batches=count)
        with Engine(tiny_model, params) as engine:
            generations = [engine.generate(TINY_PROMPT[shift:] + TINY_PROMPT[:shift],
                                           greedy(12, ignore_eos=True)) for shift in (0, 1)]
            engine.run()
            return [g.token_ids() for g in generations], engine.stats()

    assert EngineParams().micro_batches == 0
    one, one_stats = run(1)
    two, two_stats = run(2)
    assert two == one
    assert one_stats.split_steps == 0 and two_stats.split_steps > 0
    assert two_stats.sparse_attended_tokens < two_stats.sparse_context_tokens


def test_a_request_chooses_its_offloading_within_its_engine_s(tiny_model):
    with Engine(tiny_model, EngineParams(block_tokens=8)) as dense:
        expected = dense.generate(TINY_PROMPT, greedy(12, ignore_eos=True)).token_ids()
        with pytest.raises(pulseinfer.FailedPreconditionError):
            dense.generate(TINY_PROMPT, greedy(12, offload_mode=OffloadMode.SOLOHEAD))
    small_budget = dataclasses.replace(OFFLOADED, offload_budget_tokens=48)
    with Engine(tiny_model, small_budget) as engine:
        for own in ({"offload_mode": OffloadMode.OFF}, {"offload_budget_tokens": 1 << 20}):
            generation = engine.generate(TINY_PROMPT, greedy(12, ignore_eos=True, **own))
            assert generation.token_ids() == expected, own
        with pytest.raises(pulseinfer.InvalidArgumentError, match="solohead"):
            engine.generate(TINY_PROMPT, greedy(12, offload_mode=OffloadMode.HEADWISE))


def test_bad_offload_settings_are_refused_by_name(tiny_model):
    for field, value in (("offload_executor", 9), ("offload_eviction", -1),
                         ("offload_host_tokens", -5), ("offload_summary_radius", 1.5),
                         ("offload_summary_boxes", 3), ("offload_summary_boxes", -1),
                         ("offload_summary_precision", 7)):
        with pytest.raises(pulseinfer.InvalidArgumentError, match=field):
            Engine(tiny_model, dataclasses.replace(OFFLOADED, **{field: value}))


def test_every_summary_estimator_generates_the_dense_tokens_at_a_covering_budget(tiny_model):
    assert (EngineParams().offload_summary_boxes,
            EngineParams().offload_summary_precision) == (0, SummaryPrecision.INT4)
    with Engine(tiny_model, EngineParams(block_tokens=8)) as dense:
        expected = dense.generate(TINY_PROMPT, greedy(12, ignore_eos=True)).token_ids()
    for boxes, precision in ((4, SummaryPrecision.INT8), (0, SummaryPrecision.BF16),
                             (0, SummaryPrecision.INT4)):
        params = dataclasses.replace(OFFLOADED, offload_summary_boxes=boxes,
                                     offload_summary_precision=precision)
        with Engine(tiny_model, params) as offloaded:
            generation = offloaded.generate(TINY_PROMPT, greedy(12, ignore_eos=True))
            assert generation.token_ids() == expected, (boxes, precision)
            assert offloaded.stats().sparse_selections > 0


def test_a_model_over_two_ranks_generates_the_one_rank_tokens(tiny_config, tiny_model):
    params = pulseinfer.ModelParams(random_weights=True, random_seed=7, threads=2,
                                    tensor_parallel_size=2)
    prompt = list(range(3, 40))
    with pulseinfer.Model(tiny_config, params) as split, \
            pulseinfer.Engine(tiny_model) as one_engine, pulseinfer.Engine(split) as two_engine:
        expected = [t.id for t in one_engine.generate(prompt, greedy(8, ignore_eos=True))]
        assert [t.id for t in two_engine.generate(prompt, greedy(8, ignore_eos=True))] == expected
        assert (split.info.tensor_parallel_size, tiny_model.info.tensor_parallel_size) == (2, 1)
    bad = pulseinfer.ModelParams(random_weights=True, threads=1, tensor_parallel_size=3)
    with pytest.raises(pulseinfer.InvalidArgumentError, match="tensor_parallel_size"):
        pulseinfer.Model(tiny_config, bad)
