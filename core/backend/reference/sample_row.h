// sampling.h's algorithm in plain C++: the CPU backend's op, the reference for the CUDA kernel,
// and the host sampler of the engine.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/backend/sampling.h"

namespace pulse::reference {

// Memory reused between rows.
struct SampleScratch {
  struct Candidate {
    uint64_t key;
    uint64_t weight;
  };
  std::vector<float> penalised;
  std::vector<Candidate> candidates;
};

// The token drawn from `logits` as sampling.h says, or -1 when the row cannot be sampled.
// `history` holds the row's distinct penalised ids (ids outside the vocabulary are ignored).
int32_t SampleRow(std::span<const float> logits, const TokenSampling& params,
                  std::span<const int32_t> history, SampleScratch& scratch);

}  // namespace pulse::reference
