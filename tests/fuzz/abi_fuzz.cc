// The C ABI driven by the input, as a caller that gets every argument wrong in turn would drive
// it: engine parameters from the first bytes (valid or not), then a program of calls (submit
// with any prompt and sampling, step, run, cancel, poll, result, text, stats, release) on ids
// that exist or not, on a tiny random-weight model. Every call must return a status; an engine
// that was made is freed at the end with its requests.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "pulseinfer/pulseinfer.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

// Reads the input front to back; past its end every read is 0.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  template <typename T>
  T Value() {
    T value{};
    for (size_t i = 0; i < sizeof(T); ++i) {
      reinterpret_cast<uint8_t*>(&value)[i] = Byte();
    }
    return value;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

pulse_model* TinyModel() {
  static pulse_model* const model = [] {
    pulse_model_params params;
    pulse_model_params_init(&params, sizeof(params));
    params.random_weights = 1;
    params.backend = "cpu";
    params.threads = 1;
    // An engine asked for more KV than this gets PULSE_OUT_OF_MEMORY, as on a device.
    params.memory_limit_bytes = size_t{256} << 20;
    pulse_model* loaded = nullptr;
    const std::string path = pulse::fuzz::SourcePath("tests/data/tiny-llama.json");
    if (pulse_model_load(path.c_str(), &params, &loaded) != PULSE_OK) {
      std::fprintf(stderr, "abi_fuzz cannot load %s: %s\n", path.c_str(), pulse_last_error());
      std::exit(1);
    }
    return loaded;
  }();
  return model;
}

// A small value most of the time, any value sometimes: validation sees both.
int32_t Small(Reader& in, int32_t range) {
  const uint8_t choice = in.Byte();
  return choice < 240 ? choice % range : in.Value<int32_t>();
}

// a + b, wrapping as the caller's own arithmetic might.
int32_t Plus(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

void CheckStatus(pulse_status status) {
  if (pulse_status_string(status) == nullptr || pulse_last_error() == nullptr) std::abort();
}

int Callback(void* user_data, const pulse_token_event* event) {
  (void)user_data;
  return event->index >= 3 && (event->token % 5 == 0) ? 1 : 0;  // cancels now and then
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  pulse_model* model = TinyModel();
  pulse_engine_params params;
  pulse_engine_params_init(&params, sizeof(params));
  params.max_batch = Plus(1, Small(in, 6));
  params.block_tokens = 1 << (in.Byte() % 5);
  params.max_step_tokens = Plus(params.max_batch, Small(in, 64));
  params.prefill_chunk = Plus(1, Small(in, 64));
  params.kv_capacity_tokens = in.Byte() < 250 ? 64 * (1 + in.Byte() % 8) : in.Value<int64_t>();
  params.offload_mode = Small(in, 3);
  params.offload_budget_tokens = Small(in, 128);
  params.offload_sink_tokens = Small(in, 16);
  params.offload_window_tokens = Small(in, 32);
  params.offload_admission = Small(in, 2);
  params.micro_batches = Small(in, 4);
  params.offload_host_tokens = in.Byte() < 250 ? 0 : in.Value<int64_t>();
  params.offload_slot_tokens = in.Byte() < 250 ? 0 : in.Value<int64_t>();
  params.offload_min_budget_tokens = Small(in, 130);
  params.offload_host_codec = Small(in, 3);
  params.offload_prefix_cache = Small(in, 3);
  pulse_engine* engine = nullptr;
  const pulse_status created = pulse_engine_create(model, &params, &engine);
  CheckStatus(created);
  if (created != PULSE_OK) {
    if (engine != nullptr) std::abort();  // a failed create leaves no engine
    return 0;
  }
  std::vector<uint64_t> ids = {0, 12345};
  int32_t steps = 0;
  while (!in.done() && steps < 64) {
    const uint64_t id = ids[in.Byte() % ids.size()];
    switch (in.Byte() % 9) {
      case 0: {
        std::vector<int32_t> prompt(static_cast<size_t>(in.Byte() % 48));
        for (int32_t& token : prompt) token = Small(in, 300);
        pulse_sampling_params sampling;
        pulse_sampling_params_init(&sampling, sizeof(sampling));
        sampling.temperature = static_cast<float>(in.Byte()) / 64.0f;
        sampling.top_k = Small(in, 8);
        sampling.max_tokens = Small(in, 12);
        sampling.seed = in.Byte();
        sampling.ignore_eos = in.Byte() % 2;
        sampling.offload_mode = Plus(Small(in, 4), -1);
        sampling.offload_budget_tokens = Small(in, 64);
        uint64_t submitted = 0;
        const pulse_status status =
            pulse_request_submit(engine, prompt.data(), prompt.size(), &sampling,
                                 in.Byte() % 2 ? Callback : nullptr, nullptr, &submitted);
        CheckStatus(status);
        if (status == PULSE_OK) ids.push_back(submitted);
        break;
      }
      case 1:
      case 2: {
        pulse_step_report report;
        report.struct_size = sizeof(report);
        CheckStatus(pulse_engine_step(engine, &report));
        ++steps;
        break;
      }
      case 3:
        CheckStatus(pulse_request_cancel(engine, id));
        break;
      case 4: {
        int32_t tokens[8];
        size_t count = 0;
        pulse_request_state state = 0;
        CheckStatus(pulse_request_poll(engine, id, tokens, in.Byte() % 9, &count, &state));
        break;
      }
      case 5: {
        int32_t tokens[8];
        size_t count = 0;
        CheckStatus(pulse_request_result(engine, id, tokens, in.Byte() % 9, &count));
        break;
      }
      case 6: {
        char text[16];
        size_t length = 0;
        CheckStatus(pulse_request_text(engine, id, text, in.Byte() % 17, &length));
        break;
      }
      case 7: {
        pulse_engine_stats stats;
        std::memset(&stats, 0, sizeof(stats));
        CheckStatus(pulse_engine_stats_get(engine, &stats));  // struct_size 0: refused
        stats.struct_size = in.Byte() % 2 ? sizeof(stats) : in.Byte();
        CheckStatus(pulse_engine_stats_get(engine, &stats));
        break;
      }
      default:
        CheckStatus(pulse_request_release(engine, id));
        break;
    }
  }
  pulse_engine_free(engine);
  return 0;
}
