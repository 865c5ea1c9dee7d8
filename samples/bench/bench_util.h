// What the benchmarks of samples/bench share, all through the public C ABI: failing with a
// message, JSON Lines records, the model's facts (bytes a decode step reads, KV bytes a token),
// random prompts and the engine's statistics.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "pulseinfer/pulseinfer.h"

namespace pulse_bench {

// The program name Fail prints first ("pulseinfer-bench").
void SetProgramName(const char* name);
[[noreturn]] void Fail(const std::string& what);
// Fails with `what` and the library's last error unless `status` is PULSE_OK.
void Check(pulse_status status, const char* what);

// "a,b,c" as its items ("" is one empty item).
std::vector<std::string> SplitList(const std::string& text);
// Each item of a comma list as a positive int32; Fail naming `flag` otherwise.
std::vector<int32_t> ParsePositiveList(const std::string& flag, const std::string& text);
// Each item of a comma list as a micro-batch setting, 0 (the library chooses) to 8; Fail naming
// `flag` otherwise.
std::vector<int32_t> ParseMicroBatches(const std::string& flag, const std::string& text);
// Each item of a comma list as a host codec (raw or fp8: pulse_host_codec_code); Fail naming
// `flag` otherwise.
std::vector<int32_t> ParseHostCodecs(const std::string& flag, const std::string& text);
// What a record's "codec" says of `host_codec`: "fp8", or for the raw host tier the device's own
// KV form, "bf16" on CUDA and "f32" on the CPU (`backend`: pulse_model_info.backend).
std::string CodecName(int32_t host_codec, const std::string& backend);
// argv joined by spaces: the command a record carries.
std::string CommandLine(int argc, char** argv);

std::string JsonString(const std::string& text);
std::string Number(double value);  // %.6g

// Appends one JSON object a line to stdout and, when `path` is not empty, to that file; every
// record starts with its bench, device, commit and command.
class Records {
 public:
  Records(const std::string& path, std::string device, std::string commit, std::string command);
  ~Records();
  Records(const Records&) = delete;
  Records& operator=(const Records&) = delete;
  // `fields`: the record's own fields, already JSON ("\"batch\": 8, ...").
  void Write(const std::string& bench, const std::string& fields);

 private:
  const std::string device_;
  const std::string commit_;
  const std::string command_;
  FILE* file_ = nullptr;
};

// A table on stderr: each row as it comes (the header before the first), and every row again
// under the header at the end, so that the final table is the last thing a run prints.
class LiveTable {
 public:
  // Column headers; each column is as wide as its widest cell.
  explicit LiveTable(std::vector<std::string> headers);
  LiveTable(const LiveTable&) = delete;
  LiveTable& operator=(const LiveTable&) = delete;
  // Prints the table again, unless it has no row.
  ~LiveTable();
  void Row(std::vector<std::string> cells);

 private:
  void Print(const std::vector<std::string>& cells) const;

  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// `value` with `digits` decimals.
std::string Fixed(double value, int digits);

// The model at `path` on `backend` ("auto", "cpu" or "cuda"), with seeded random weights when
// `random_weights` (then `path` is a config.json); Fail when it cannot be loaded. Prints the load
// time on stderr.
pulse_model* LoadModel(const std::string& path, const std::string& backend, bool random_weights,
                       const std::string& weight_type = "auto");

struct ModelFacts {
  pulse_model_info info{};
  double weight_bytes_read = 0;  // a decode step: every weight but the embedding table
  double kv_bytes_per_token = 0;
  double gemm_params = 0;  // multiply-adds per token of the layers' GEMMs
  std::string name;        // the model file's name
};
ModelFacts Describe(pulse_model* model, const std::string& path);

std::vector<int32_t> RandomPrompt(int32_t length, int32_t vocab, uint64_t seed);
int64_t RoundUp(int64_t tokens, int32_t block);
// The KV block size of an engine created with pulse_engine_params.block_tokens `block_tokens`
// (0: the library's choice) and offload on or off.
int32_t EngineBlockTokens(int32_t block_tokens, bool offload);
// PULSE_COPY_* of "auto", "gather", "batch-dma" or "per-chunk"; Fail otherwise.
int32_t CopyExecutor(const std::string& name);
// Greedy sampling of `max_tokens` tokens, end of sequence ignored.
pulse_sampling_params Greedy(int32_t max_tokens);
double Percentile(std::vector<double> values, double fraction);
pulse_engine_stats EngineStats(pulse_engine* engine);

}  // namespace pulse_bench
