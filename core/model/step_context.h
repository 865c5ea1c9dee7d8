// A step's state apart from the model and its caches. A step runs as one or more micro-batches
// (consecutive sequences of its batch), each a StepContext: the scratch activations its layers
// write, where its uploaded inputs sit, its sparse step (the offload layer's tables, recall
// lists and copy events). The micro-batches share the step's StepOutputs: their logit rows are
// gathered into one matrix, so that the output projection reads its weights once a step, and
// the sampled tokens and the sparse counters come back in one read.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend/backend.h"
#include "core/offload/sparse_step.h"

namespace pulse {

struct StepContext {
  struct Scratch {
    DeviceBuffer inputs;  // int32: the packed micro-batch (ModelRunner::Upload)
    // fp32, or the backend's activation type (act) for the GEMM inputs.
    DeviceBuffer residual;  // [tokens][hidden]
    DeviceBuffer normed;    // act [tokens][hidden]
    DeviceBuffer qkv;       // [tokens][q_dim + 2 * kv_dim] of the rank's heads
    DeviceBuffer attn;      // act [tokens][q_dim]
    DeviceBuffer delta;     // [tokens][hidden]: o projection, then MLP output
    DeviceBuffer gate_up;   // [tokens][2 * intermediate]
    DeviceBuffer act;       // act [tokens][intermediate]
    // A rank's parts of attn, act and delta before they are gathered (tensor parallelism; empty
    // at one rank, whose parts are the wholes).
    DeviceBuffer attn_part;   // act [tokens][q_dim of the rank's heads]
    DeviceBuffer act_part;    // act [tokens][intermediate / ranks]
    DeviceBuffer delta_part;  // [tokens][hidden / ranks]
  };
  // The largest micro-batch the scratch holds.
  struct Limits {
    int32_t tokens = 0;
    int32_t seqs = 0;
    int32_t logit_rows = 0;
  };
  // Where the current micro-batch's inputs sit in Scratch::inputs, and which part of the step
  // it is.
  struct Inputs {
    int32_t first_seq = 0;        // of the step's batch
    int32_t first_logit_row = 0;  // of the step's logit rows
    int32_t num_tokens = 0;
    int32_t num_seqs = 0;
    int32_t num_logit_rows = 0;
    int32_t max_blocks_per_seq = 0;
    int32_t max_q_len = 0;
    int32_t max_kv_len = 0;
    const int32_t* tokens = nullptr;
    const int32_t* positions = nullptr;
    const int32_t* kv_lens = nullptr;
    const int32_t* q_offsets = nullptr;
    const int32_t* block_tables = nullptr;
    const int32_t* logit_rows = nullptr;  // rows of this micro-batch's tokens
  };

  Scratch scratch;
  Limits limits;
  Inputs step;
  std::vector<int32_t> staging;        // the host side of Scratch::inputs
  std::unique_ptr<SparseStep> sparse;  // with sparse attention
  bool sparse_planned = false;         // this step planned sparse rows here
  bool staged = false;                 // a staged prompt chunk (StagedPrefill) planned here
};

struct StepOutputs {
  DeviceBuffer gathered;     // act [logit rows][hidden]
  DeviceBuffer logits;       // [logit rows][vocab]
  DeviceBuffer logits_part;  // [logit rows][vocab / ranks] before the gather (empty at one rank)
  DeviceBuffer sampling;     // TokenSampling [logit rows]
  // int32 tokens [logit rows] (padded to 8 bytes), then the sparse counters, int64
  // [sequences][kSparseCounters]: one read brings both back.
  DeviceBuffer outputs;
  DeviceBuffer penalised_ids;  // int32, grown to the longest list a step was given
  size_t counters_offset = 0;  // bytes from the tokens to the counters in outputs

  int32_t* tokens() const { return outputs.as<int32_t>(); }
  int64_t* counters() const {
    return reinterpret_cast<int64_t*>(outputs.as<char>() + counters_offset);
  }
};

}  // namespace pulse
