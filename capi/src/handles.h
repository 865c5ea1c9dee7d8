// What the ABI's opaque handles are. A handle is created with std::make_unique and released
// into the caller's pointer; its *_free takes it back into a unique_ptr.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/chat/chat_template.h"
#include "core/model/model.h"
#include "core/sched/engine.h"
#include "core/tokenizer/tokenizer.h"
#include "pulseinfer/pulseinfer.h"

struct pulse_model {
  pulse::ShardedModel model;  // one shard unless loaded with tensor_parallel_size > 1
  // NUL-terminated copies of what pulse_model_info points at.
  std::string architecture;
  std::string format;
  std::string stored_type;
  std::string weight_type;
  std::string backend;
  std::shared_ptr<const pulse::Tokenizer> tokenizer;  // null when the model has none
  std::string tokenizer_name;                         // "" without a tokenizer
  // The recognised chat template, or why there is none (NotFound, Unimplemented).
  absl::StatusOr<std::shared_ptr<const pulse::ChatTemplate>> chat_template =
      absl::NotFoundError("the model has no tokenizer");
  std::string chat_template_family;  // "" without a recognised template
  std::atomic<int64_t> references{1};
};

struct pulse_engine {
  std::unique_ptr<pulse::Engine> engine;
  // Its model's (pulse_request_submit_chat).
  absl::StatusOr<std::shared_ptr<const pulse::ChatTemplate>> chat_template;
  // Serializes polls so that concurrent polls of a request read distinct tokens.
  absl::Mutex poll_mutex;
  // Per request, how many of its tokens pulse_request_poll has returned.
  absl::flat_hash_map<uint64_t, size_t> polled ABSL_GUARDED_BY(poll_mutex);
};
