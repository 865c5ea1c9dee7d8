// The library's defaults for sparse decode attention, which the accuracy tools' flags start from,
// and whether a run used them (its records then carry "default": true).
#pragma once

#include <cstdint>
#include <string>

#include "core/backend/block_estimator.h"
#include "core/offload/offload_config.h"
#include "core/sched/engine.h"

namespace pulse {

struct SelectionDefaults {
  int32_t block = kOffloadBlockTokens;
  int32_t sink = SelectionOptions{}.sink_tokens;
  int32_t window = SelectionOptions{}.window_tokens;
  std::string estimator = EstimatorName(OffloadConfig{}.estimator, block);

  // Whether a run with these settings ran with the defaults (the estimator compared by what it
  // is, not by how it was spelled).
  bool Match(int32_t run_block, int32_t run_sink, int32_t run_window,
             const BlockEstimator& run_estimator) const {
    return run_block == block && run_sink == sink && run_window == window &&
           EstimatorName(run_estimator, run_block) == estimator;
  }
};

}  // namespace pulse
