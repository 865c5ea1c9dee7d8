#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

namespace pulse_bench {
namespace {

const char* program_name = "bench";

}  // namespace

void SetProgramName(const char* name) { program_name = name; }

void Fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_name, what.c_str());
  std::exit(1);
}

void Check(pulse_status status, const char* what) {
  if (status != PULSE_OK) Fail(std::string(what) + ": " + pulse_last_error());
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    items.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

std::vector<int32_t> ParsePositiveList(const std::string& flag, const std::string& text) {
  std::vector<int32_t> values;
  for (const std::string& item : SplitList(text)) {
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 1 || value > (1L << 30)) {
      Fail(flag + " expects positive integers separated by commas, got '" + text + "'");
    }
    values.push_back(static_cast<int32_t>(value));
  }
  return values;
}

std::vector<int32_t> ParseMicroBatches(const std::string& flag, const std::string& text) {
  std::vector<int32_t> counts;
  for (const std::string& item : SplitList(text)) {
    char* end = nullptr;
    const long count = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || count < 0 || count > 8) {
      Fail(flag + " expects counts from 0 to 8, got '" + item + "'");
    }
    counts.push_back(static_cast<int32_t>(count));
  }
  return counts;
}

std::vector<int32_t> ParseHostCodecs(const std::string& flag, const std::string& text) {
  std::vector<int32_t> codecs;
  for (const std::string& item : SplitList(text)) {
    if (item != "raw" && item != "fp8") Fail(flag + " expects raw and/or fp8, got '" + item + "'");
    codecs.push_back(item == "fp8" ? PULSE_HOST_CODEC_FP8 : PULSE_HOST_CODEC_RAW);
  }
  return codecs;
}

std::string CodecName(int32_t host_codec, const std::string& backend) {
  if (host_codec == PULSE_HOST_CODEC_FP8) return "fp8";
  return backend == "cuda" ? "bf16" : "f32";
}

std::string CommandLine(int argc, char** argv) {
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) command += ' ';
    command += argv[i];
  }
  return command;
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string Number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.6g", value);
  return buffer;
}

Records::Records(const std::string& path, std::string device, std::string commit,
                 std::string command)
    : device_(std::move(device)), commit_(std::move(commit)), command_(std::move(command)) {
  if (!path.empty()) {
    file_ = std::fopen(path.c_str(), "a");
    if (file_ == nullptr) Fail("cannot open " + path);
  }
}

Records::~Records() {
  if (file_ != nullptr) std::fclose(file_);
}

void Records::Write(const std::string& bench, const std::string& fields) {
  const std::string line = "{\"bench\": " + JsonString(bench) +
                           ", \"device\": " + JsonString(device_) +
                           ", \"commit\": " + JsonString(commit_) +
                           ", \"command\": " + JsonString(command_) + ", " + fields + "}";
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (file_ != nullptr) {
    std::fprintf(file_, "%s\n", line.c_str());
    std::fflush(file_);
  }
}

LiveTable::LiveTable(std::vector<std::string> headers) : headers_(std::move(headers)) {}

LiveTable::~LiveTable() {
  if (rows_.empty()) return;
  std::fprintf(stderr, "\n");
  Print(headers_);
  for (const std::vector<std::string>& row : rows_) Print(row);
}

void LiveTable::Row(std::vector<std::string> cells) {
  if (rows_.empty()) Print(headers_);
  cells.resize(headers_.size());
  Print(cells);
  rows_.push_back(std::move(cells));
}

void LiveTable::Print(const std::vector<std::string>& cells) const {
  std::string line;
  for (size_t c = 0; c < headers_.size(); ++c) {
    size_t width = headers_[c].size();
    for (const std::vector<std::string>& row : rows_) width = std::max(width, row[c].size());
    width = std::max<size_t>(width, 8);
    const std::string& cell = cells[c];
    if (c > 0) line += "  ";
    line += std::string(width > cell.size() ? width - cell.size() : 0, ' ') + cell;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

std::string Fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

pulse_model* LoadModel(const std::string& path, const std::string& backend, bool random_weights,
                       const std::string& weight_type) {
  pulse_model_params params;
  Check(pulse_model_params_init(&params, sizeof(params)), "pulse_model_params_init");
  params.backend = backend.c_str();
  params.weight_type = weight_type.c_str();
  params.random_weights = random_weights ? 1 : 0;
  pulse_model* model = nullptr;
  const auto start = std::chrono::steady_clock::now();
  Check(pulse_model_load(path.c_str(), &params, &model), "pulse_model_load");
  std::fprintf(stderr, "%s: model loaded in %.1f s\n", program_name,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  std::fflush(stderr);
  return model;
}

ModelFacts Describe(pulse_model* model, const std::string& path) {
  ModelFacts facts;
  facts.info.struct_size = sizeof(facts.info);
  Check(pulse_model_info_get(model, &facts.info), "pulse_model_info_get");
  const pulse_model_info& info = facts.info;
  // Kept in blocks, the file's dominant block type's bytes a value (its embedding may differ).
  const double element_bytes = std::strcmp(info.weight_type, "f32") == 0    ? 4.0
                               : std::strcmp(info.weight_type, "bf16") == 0 ? 2.0
                               : std::strcmp(info.stored_type, "Q8_0") == 0 ? 34.0 / 32
                               : std::strcmp(info.stored_type, "Q4_0") == 0 ? 18.0 / 32
                                                                            : 20.0 / 32;
  const double embedding = static_cast<double>(info.vocab_size) * info.hidden_size;
  const double read = info.tie_word_embeddings ? double(info.parameter_count)
                                               : double(info.parameter_count) - embedding;
  facts.weight_bytes_read = read * element_bytes;
  // The CUDA backend caches bf16 keys and values, the CPU backend fp32.
  const double kv_element = std::strcmp(info.backend, "cuda") == 0 ? 2.0 : 4.0;
  facts.kv_bytes_per_token = 2.0 * info.num_layers * info.num_kv_heads * info.head_dim * kv_element;
  const double q = static_cast<double>(info.num_heads) * info.head_dim;
  const double kv = static_cast<double>(info.num_kv_heads) * info.head_dim;
  const double h = info.hidden_size;
  const double inter = info.intermediate_size;
  facts.gemm_params = info.num_layers * (h * (q + 2 * kv) + q * h + 3 * h * inter);
  facts.name = path.substr(path.find_last_of('/') + 1);
  return facts;
}

std::vector<int32_t> RandomPrompt(int32_t length, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<int32_t> prompt(length);
  for (int32_t& id : prompt) id = token(rng);
  return prompt;
}

int64_t RoundUp(int64_t tokens, int32_t block) { return (tokens + block - 1) / block * block; }

int32_t EngineBlockTokens(int32_t block_tokens, bool offload) {
  if (block_tokens != 0) return block_tokens;
  return offload ? PULSE_OFFLOAD_BLOCK_TOKENS : PULSE_DENSE_BLOCK_TOKENS;
}

int32_t CopyExecutor(const std::string& name) {
  if (name == "auto") return PULSE_COPY_AUTO;
  if (name == "gather") return PULSE_COPY_GATHER;
  if (name == "batch-dma") return PULSE_COPY_BATCH_DMA;
  if (name == "per-chunk") return PULSE_COPY_PER_CHUNK;
  Fail("--copy expects auto, gather, batch-dma or per-chunk, got '" + name + "'");
}

pulse_sampling_params Greedy(int32_t max_tokens) {
  pulse_sampling_params sampling;
  Check(pulse_sampling_params_init(&sampling, sizeof(sampling)), "pulse_sampling_params_init");
  sampling.temperature = 0.0f;
  sampling.max_tokens = max_tokens;
  sampling.ignore_eos = 1;
  return sampling;
}

double Percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const size_t index = static_cast<size_t>(fraction * (values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

pulse_engine_stats EngineStats(pulse_engine* engine) {
  pulse_engine_stats stats;
  stats.struct_size = sizeof(stats);
  Check(pulse_engine_stats_get(engine, &stats), "pulse_engine_stats_get");
  return stats;
}

}  // namespace pulse_bench
