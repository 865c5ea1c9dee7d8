// The versioned structs: their version-0 layouts are frozen, *_init honours the caller's size,
// and every call reads or writes at most struct_size bytes.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "pulseinfer/pulseinfer.h"
#include "tiny_model.h"

namespace {

// pulse_engine_params as version 0 laid it out (through kv_capacity_tokens).
constexpr size_t kEngineParamsV0 = 32;

using pulse::capi_test::CreateTinyEngine;
using pulse::capi_test::LoadTinyModel;

#define EXPECT_OFFSET(type, field, offset) \
  EXPECT_EQ(offsetof(type, field), size_t{offset}) << #field

// Version 0 as shipped (LP64). A change here breaks every caller built against version 0.
TEST(AbiStructs, Version0LayoutsAreFrozen) {
  EXPECT_OFFSET(pulse_model_params, threads, 4);
  EXPECT_OFFSET(pulse_model_params, backend, 8);
  EXPECT_OFFSET(pulse_model_params, weight_type, 16);
  EXPECT_OFFSET(pulse_model_params, random_seed, 24);
  EXPECT_OFFSET(pulse_model_params, memory_limit_bytes, 32);
  EXPECT_OFFSET(pulse_model_params, random_weights, 40);
  // Version 0's struct was 48 bytes, its last 4 padding.

  EXPECT_OFFSET(pulse_model_info, num_layers, 4);
  EXPECT_OFFSET(pulse_model_info, num_heads, 8);
  EXPECT_OFFSET(pulse_model_info, num_kv_heads, 12);
  EXPECT_OFFSET(pulse_model_info, head_dim, 16);
  EXPECT_OFFSET(pulse_model_info, hidden_size, 20);
  EXPECT_OFFSET(pulse_model_info, intermediate_size, 24);
  EXPECT_OFFSET(pulse_model_info, vocab_size, 28);
  EXPECT_OFFSET(pulse_model_info, context_length, 32);
  EXPECT_OFFSET(pulse_model_info, tie_word_embeddings, 36);
  EXPECT_OFFSET(pulse_model_info, parameter_count, 40);
  EXPECT_OFFSET(pulse_model_info, architecture, 48);
  EXPECT_OFFSET(pulse_model_info, format, 56);
  EXPECT_OFFSET(pulse_model_info, stored_type, 64);
  EXPECT_OFFSET(pulse_model_info, weight_type, 72);
  EXPECT_OFFSET(pulse_model_info, backend, 80);

  EXPECT_OFFSET(pulse_engine_params, max_batch, 4);
  EXPECT_OFFSET(pulse_engine_params, prefill_chunk, 8);
  EXPECT_OFFSET(pulse_engine_params, max_step_tokens, 12);
  EXPECT_OFFSET(pulse_engine_params, block_tokens, 16);
  EXPECT_OFFSET(pulse_engine_params, max_context, 20);
  EXPECT_OFFSET(pulse_engine_params, kv_capacity_tokens, 24);
  EXPECT_EQ(kEngineParamsV0, 32u);

  EXPECT_OFFSET(pulse_step_report, scheduled, 4);
  EXPECT_OFFSET(pulse_step_report, prefill_tokens, 8);
  EXPECT_OFFSET(pulse_step_report, decode_tokens, 12);
  EXPECT_OFFSET(pulse_step_report, pending, 16);
  EXPECT_EQ(sizeof(pulse_step_report), 20u);

  EXPECT_OFFSET(pulse_sampling_params, temperature, 4);
  EXPECT_OFFSET(pulse_sampling_params, top_p, 8);
  EXPECT_OFFSET(pulse_sampling_params, min_p, 12);
  EXPECT_OFFSET(pulse_sampling_params, repetition_penalty, 16);
  EXPECT_OFFSET(pulse_sampling_params, top_k, 20);
  EXPECT_OFFSET(pulse_sampling_params, max_tokens, 24);
  EXPECT_OFFSET(pulse_sampling_params, ignore_eos, 28);
  EXPECT_OFFSET(pulse_sampling_params, seed, 32);
  EXPECT_OFFSET(pulse_sampling_params, stop_token_ids, 40);
  EXPECT_OFFSET(pulse_sampling_params, stop_token_count, 48);

  EXPECT_OFFSET(pulse_token_event, token, 4);
  EXPECT_OFFSET(pulse_token_event, request_id, 8);
  EXPECT_OFFSET(pulse_token_event, index, 16);
  EXPECT_OFFSET(pulse_token_event, finished, 20);
  EXPECT_OFFSET(pulse_token_event, finish_reason, 24);

  EXPECT_OFFSET(pulse_request_stats, state, 4);
  EXPECT_OFFSET(pulse_request_stats, finish_reason, 8);
  EXPECT_OFFSET(pulse_request_stats, prompt_tokens, 12);
  EXPECT_OFFSET(pulse_request_stats, generated_tokens, 16);
  EXPECT_OFFSET(pulse_request_stats, error, 20);
  EXPECT_OFFSET(pulse_request_stats, queue_ms, 24);
  EXPECT_OFFSET(pulse_request_stats, ttft_ms, 32);
  EXPECT_OFFSET(pulse_request_stats, tpot_ms, 40);
  EXPECT_OFFSET(pulse_request_stats, total_ms, 48);
  EXPECT_EQ(sizeof(pulse_request_stats), 56u);

  EXPECT_OFFSET(pulse_engine_stats, steps, 8);
  EXPECT_OFFSET(pulse_engine_stats, prefill_tokens, 16);
  EXPECT_OFFSET(pulse_engine_stats, decode_tokens, 24);
  EXPECT_OFFSET(pulse_engine_stats, generated_tokens, 32);
  EXPECT_OFFSET(pulse_engine_stats, finished_requests, 40);
  EXPECT_OFFSET(pulse_engine_stats, queued, 48);
  EXPECT_OFFSET(pulse_engine_stats, running, 52);
  EXPECT_OFFSET(pulse_engine_stats, kv_blocks, 56);
  EXPECT_OFFSET(pulse_engine_stats, kv_blocks_in_use, 60);
  EXPECT_EQ(offsetof(pulse_engine_stats, kv_blocks_in_use) + sizeof(int32_t), 64u);
}

// Fields appended after version 0, in the order they were added: they only ever extend a
// struct, so the version-0 offsets above never move.
TEST(AbiStructs, FieldsAppendedAfterVersion0) {
  EXPECT_OFFSET(pulse_model_params, tensor_parallel_size, 48);
  EXPECT_EQ(sizeof(pulse_model_params), 56u);
  EXPECT_OFFSET(pulse_model_info, bos_token, 88);
  EXPECT_OFFSET(pulse_model_info, eos_token, 92);
  EXPECT_OFFSET(pulse_model_info, tokenizer, 96);
  EXPECT_OFFSET(pulse_model_info, chat_template, 104);
  EXPECT_OFFSET(pulse_model_info, tensor_parallel_size, 112);
  EXPECT_EQ(sizeof(pulse_model_info), 120u);

  EXPECT_OFFSET(pulse_sampling_params, stop_strings, 56);
  EXPECT_OFFSET(pulse_sampling_params, stop_string_count, 64);

  EXPECT_OFFSET(pulse_token_event, text, 32);
  EXPECT_OFFSET(pulse_token_event, text_len, 40);
  EXPECT_EQ(sizeof(pulse_token_event), 48u);

  EXPECT_OFFSET(pulse_engine_params, offload_mode, 32);
  EXPECT_OFFSET(pulse_engine_params, offload_budget_tokens, 36);
  EXPECT_OFFSET(pulse_engine_params, offload_sink_tokens, 40);
  EXPECT_OFFSET(pulse_engine_params, offload_window_tokens, 44);
  EXPECT_OFFSET(pulse_sampling_params, offload_mode, 72);
  EXPECT_OFFSET(pulse_sampling_params, offload_budget_tokens, 76);
  EXPECT_OFFSET(pulse_sampling_params, offload_sink_tokens, 80);
  EXPECT_OFFSET(pulse_sampling_params, offload_window_tokens, 84);
  EXPECT_EQ(sizeof(pulse_sampling_params), 88u);
  EXPECT_OFFSET(pulse_engine_params, offload_executor, 48);
  EXPECT_OFFSET(pulse_engine_params, offload_eviction, 52);
  EXPECT_OFFSET(pulse_engine_params, offload_host_tokens, 56);
  EXPECT_OFFSET(pulse_engine_params, offload_slot_tokens, 64);
  EXPECT_OFFSET(pulse_engine_params, decode_graphs, 72);
  EXPECT_OFFSET(pulse_engine_params, offload_summary_radius, 80);
  EXPECT_OFFSET(pulse_engine_params, offload_summary_boxes, 88);
  EXPECT_OFFSET(pulse_engine_params, offload_summary_precision, 92);
  EXPECT_OFFSET(pulse_engine_params, offload_admission, 96);
  EXPECT_OFFSET(pulse_engine_params, kv_memory_bytes, 104);
  EXPECT_OFFSET(pulse_engine_params, offload_synthetic_reuse, 112);
  EXPECT_OFFSET(pulse_engine_params, micro_batches, 120);
  EXPECT_OFFSET(pulse_engine_params, offload_fill_free_slots, 124);
  EXPECT_OFFSET(pulse_engine_params, offload_min_budget_tokens, 128);
  EXPECT_OFFSET(pulse_engine_params, offload_host_codec, 132);
  EXPECT_OFFSET(pulse_engine_params, offload_prefix_cache, 136);
  EXPECT_EQ(sizeof(pulse_engine_params), 144u);

  EXPECT_OFFSET(pulse_engine_stats, sparse_selections, 64);
  EXPECT_OFFSET(pulse_engine_stats, sparse_candidate_blocks, 72);
  EXPECT_OFFSET(pulse_engine_stats, sparse_picked_blocks, 80);
  EXPECT_OFFSET(pulse_engine_stats, sparse_reused_blocks, 88);
  EXPECT_OFFSET(pulse_engine_stats, sparse_attended_tokens, 96);
  EXPECT_OFFSET(pulse_engine_stats, sparse_context_tokens, 104);
  EXPECT_OFFSET(pulse_engine_stats, host_blocks, 112);
  EXPECT_OFFSET(pulse_engine_stats, host_blocks_in_use, 116);
  EXPECT_OFFSET(pulse_engine_stats, slot_blocks, 120);
  EXPECT_OFFSET(pulse_engine_stats, slot_blocks_in_use, 124);
  EXPECT_OFFSET(pulse_engine_stats, recall_bytes, 128);
  EXPECT_OFFSET(pulse_engine_stats, recall_transfers, 136);
  EXPECT_OFFSET(pulse_engine_stats, recall_plans, 144);
  EXPECT_OFFSET(pulse_engine_stats, recall_ms, 152);
  EXPECT_OFFSET(pulse_engine_stats, writeback_bytes, 160);
  EXPECT_OFFSET(pulse_engine_stats, slot_hits, 168);
  EXPECT_OFFSET(pulse_engine_stats, slot_misses, 176);
  EXPECT_OFFSET(pulse_engine_stats, slot_evictions, 184);
  EXPECT_OFFSET(pulse_engine_stats, selection_ms, 192);
  EXPECT_OFFSET(pulse_engine_stats, host_waits, 200);
  EXPECT_OFFSET(pulse_engine_stats, admitted_resident, 208);
  EXPECT_OFFSET(pulse_engine_stats, admitted_offloaded, 216);
  EXPECT_OFFSET(pulse_engine_stats, admission_io_waits, 224);
  EXPECT_OFFSET(pulse_engine_stats, link_gb_s, 232);
  EXPECT_OFFSET(pulse_engine_stats, recall_mb_per_row, 240);
  EXPECT_OFFSET(pulse_engine_stats, step_compute_ms, 248);
  EXPECT_OFFSET(pulse_engine_stats, predicted_recall_ms, 256);
  EXPECT_OFFSET(pulse_engine_stats, running_offloaded, 264);
  EXPECT_OFFSET(pulse_engine_stats, kv_memory_bytes, 272);
  EXPECT_OFFSET(pulse_engine_stats, split_steps, 280);
  EXPECT_OFFSET(pulse_engine_stats, probe_steps, 288);
  EXPECT_OFFSET(pulse_engine_stats, micro_batches, 296);
  EXPECT_OFFSET(pulse_engine_stats, demoted_requests, 304);
  EXPECT_OFFSET(pulse_engine_stats, promoted_requests, 312);
  EXPECT_OFFSET(pulse_engine_stats, retried_steps, 320);
  EXPECT_OFFSET(pulse_engine_stats, staged_requests, 328);
  EXPECT_OFFSET(pulse_engine_stats, staged_recall_bytes, 336);
  EXPECT_OFFSET(pulse_engine_stats, lowered_budgets, 344);
  EXPECT_OFFSET(pulse_engine_stats, prefix_hits, 352);
  EXPECT_OFFSET(pulse_engine_stats, prefix_hit_tokens, 360);
  EXPECT_OFFSET(pulse_engine_stats, host_blocks_cached, 368);
  EXPECT_EQ(sizeof(pulse_engine_stats), 376u);
}

TEST(AbiStructs, InitFillsTheDefaults) {
  pulse_sampling_params sampling;
  ASSERT_EQ(pulse_sampling_params_init(&sampling, sizeof(sampling)), PULSE_OK);
  EXPECT_EQ(sampling.struct_size, sizeof(sampling));
  EXPECT_EQ(sampling.temperature, 1.0f);
  EXPECT_EQ(sampling.top_p, 1.0f);
  EXPECT_EQ(sampling.top_k, 0);
  EXPECT_EQ(sampling.max_tokens, 128);
  EXPECT_EQ(sampling.stop_token_ids, nullptr);
  EXPECT_EQ(sampling.stop_token_count, 0u);
  EXPECT_EQ(sampling.offload_mode, PULSE_OFFLOAD_ENGINE);
  EXPECT_EQ(sampling.offload_budget_tokens, 0);
  EXPECT_EQ(sampling.offload_sink_tokens, -1);
  EXPECT_EQ(sampling.offload_window_tokens, -1);

  pulse_engine_params engine;
  ASSERT_EQ(pulse_engine_params_init(&engine, sizeof(engine)), PULSE_OK);
  EXPECT_EQ(engine.max_batch, 16);
  EXPECT_EQ(engine.block_tokens, 0);  // the library's choice
  EXPECT_EQ(engine.offload_budget_tokens, 2048);
  EXPECT_EQ(engine.offload_sink_tokens, 4);
  EXPECT_EQ(engine.offload_window_tokens, 16);
  EXPECT_EQ(engine.kv_capacity_tokens, 0);
  EXPECT_EQ(engine.offload_executor, PULSE_COPY_AUTO);
  EXPECT_EQ(engine.offload_eviction, PULSE_EVICT_LRU);
  EXPECT_EQ(engine.offload_host_tokens, 0);
  EXPECT_EQ(engine.offload_slot_tokens, 0);
  EXPECT_EQ(engine.decode_graphs, 1);
  EXPECT_EQ(engine.micro_batches, 0);
  EXPECT_EQ(engine.offload_summary_radius, 0.0);
  EXPECT_EQ(engine.offload_summary_boxes, 0);
  EXPECT_EQ(engine.offload_summary_precision, PULSE_SUMMARY_INT4);
  EXPECT_EQ(engine.offload_admission, PULSE_ADMIT_IO_ADAPTIVE);
  EXPECT_EQ(engine.kv_memory_bytes, 0);
  EXPECT_EQ(engine.offload_synthetic_reuse, 0.0);
  EXPECT_EQ(engine.offload_min_budget_tokens, 0);
  EXPECT_EQ(engine.offload_host_codec, PULSE_HOST_CODEC_RAW);
  EXPECT_EQ(engine.offload_prefix_cache, 0);

  pulse_model_params model;
  ASSERT_EQ(pulse_model_params_init(&model, sizeof(model)), PULSE_OK);
  EXPECT_STREQ(model.backend, "auto");
  EXPECT_STREQ(model.weight_type, "auto");
  EXPECT_EQ(model.random_weights, 0);
  EXPECT_EQ(model.tensor_parallel_size, 0);
}

TEST(AbiStructs, InitRejectsASizeBelowVersion0AndWritesNothing) {
  for (const size_t size : {size_t{0}, size_t{3}, kEngineParamsV0 - 8}) {
    std::vector<unsigned char> bytes(sizeof(pulse_engine_params), 0xAB);
    auto* params = reinterpret_cast<pulse_engine_params*>(bytes.data());
    EXPECT_EQ(pulse_engine_params_init(params, size), PULSE_INVALID_ARGUMENT) << size;
    EXPECT_NE(std::string(pulse_last_error()).find("struct_size"), std::string::npos)
        << pulse_last_error();
    EXPECT_EQ(bytes, std::vector<unsigned char>(bytes.size(), 0xAB)) << size;
  }
}

TEST(AbiStructs, InitOfALargerStructZeroesTheTail) {
  constexpr size_t kTail = 24;
  std::vector<unsigned char> bytes(sizeof(pulse_sampling_params) + kTail, 0xAB);
  auto* params = reinterpret_cast<pulse_sampling_params*>(bytes.data());
  ASSERT_EQ(pulse_sampling_params_init(params, bytes.size()), PULSE_OK);
  EXPECT_EQ(params->struct_size, bytes.size());
  EXPECT_EQ(params->max_tokens, 128);
  for (size_t i = sizeof(pulse_sampling_params); i < bytes.size(); ++i) EXPECT_EQ(bytes[i], 0);
}

TEST(AbiStructs, InputStructSizeIsChecked) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine_params params;
  ASSERT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
  pulse_engine* engine = nullptr;

  params.struct_size = 0;
  EXPECT_EQ(pulse_engine_create(model, &params, &engine), PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(engine, nullptr);
  EXPECT_NE(std::string(pulse_last_error()).find("pulse_engine_params.struct_size is 0"),
            std::string::npos)
      << pulse_last_error();
  params.struct_size = kEngineParamsV0 - 4;
  EXPECT_EQ(pulse_engine_create(model, &params, &engine), PULSE_INVALID_ARGUMENT);

  // A caller built against a later version: a longer struct with a zero tail.
  struct {
    pulse_engine_params v0;
    int64_t later_fields[4];
  } longer{};
  ASSERT_EQ(pulse_engine_params_init(&longer.v0, sizeof(longer)), PULSE_OK);
  longer.v0.kv_capacity_tokens = 1024;
  EXPECT_EQ(pulse_engine_create(model, &longer.v0, &engine), PULSE_OK) << pulse_last_error();
  EXPECT_NE(engine, nullptr);
  pulse_engine_free(engine);
  pulse_model_free(model);
}

// A caller built before the summary's boxes and precision: the library does not read past its
// struct_size (where these two hold values it would refuse), so they take their defaults.
TEST(AbiStructs, AnOlderCallerGetsTheDefaultsOfLaterFields) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);
  constexpr size_t kBeforeBoxes = offsetof(pulse_engine_params, offload_summary_boxes);
  pulse_engine_params params;
  ASSERT_EQ(pulse_engine_params_init(&params, kBeforeBoxes), PULSE_OK);
  params.block_tokens = 8;
  params.offload_mode = PULSE_OFFLOAD_SOLOHEAD;
  params.offload_host_tokens = 1024;
  params.offload_slot_tokens = 256;
  params.offload_summary_boxes = 5;
  params.offload_summary_precision = 9;
  pulse_engine* engine = nullptr;
  EXPECT_EQ(pulse_engine_create(model, &params, &engine), PULSE_OK) << pulse_last_error();
  EXPECT_NE(engine, nullptr);
  pulse_engine_free(engine);
  engine = nullptr;
  params.struct_size = sizeof(params);
  EXPECT_EQ(pulse_engine_create(model, &params, &engine), PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(engine, nullptr);
  pulse_model_free(model);
}

TEST(AbiStructs, OutputStructsAreWrittenUpToTheirSize) {
  pulse_model* model = LoadTinyModel();
  ASSERT_NE(model, nullptr);

  pulse_model_info info;
  info.struct_size = 2;
  EXPECT_EQ(pulse_model_info_get(model, &info), PULSE_INVALID_ARGUMENT);

  struct {
    pulse_model_info v0;
    unsigned char tail[16];
  } longer;
  std::memset(&longer, 0xAB, sizeof(longer));
  longer.v0.struct_size = sizeof(longer);
  ASSERT_EQ(pulse_model_info_get(model, &longer.v0), PULSE_OK) << pulse_last_error();
  EXPECT_EQ(longer.v0.struct_size, sizeof(longer));
  EXPECT_EQ(longer.v0.num_layers, 2);
  for (const unsigned char byte : longer.tail) EXPECT_EQ(byte, 0xAB);

  pulse_engine* engine = CreateTinyEngine(model);
  ASSERT_NE(engine, nullptr);
  pulse_step_report report;
  report.struct_size = 1;
  EXPECT_EQ(pulse_engine_step(engine, &report), PULSE_INVALID_ARGUMENT);
  report.struct_size = sizeof(report);
  EXPECT_EQ(pulse_engine_step(engine, &report), PULSE_OK);
  EXPECT_EQ(report.pending, 0);
  pulse_engine_free(engine);
  pulse_model_free(model);
}

}  // namespace
