#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/cpu_level.h"
#include "core/format/dequant.h"
#include "core/format/gguf_reader.h"
#include "core/kv/kv_cache.h"
#include "core/model/expected_tensors.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "core/model/step_batch.h"
#include "core/model/tensor_source.h"
#include "core/sched/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/random_blocks.h"
#include "tests/unit/format/gguf_writer.h"
#include "tests/unit/format/test_configs.h"

namespace pulse {
namespace {

using ::pulse::testing::GgufWriter;
using ::pulse::testing::RandomBlocks;
using ::pulse::testing::WriteTempFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// llama.cpp's convert_hf_to_gguf.py permute(): rows of each head go from [half 0; half 1] to
// interleaved pairs. w.reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2).
std::vector<float> PermuteLikeConverter(const std::vector<float>& hf, int64_t n_head, int64_t rows,
                                        int64_t cols) {
  std::vector<float> gguf(hf.size());
  const int64_t half = rows / n_head / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t from = (h * 2 + j) * half + i;
        const int64_t to = (h * half + i) * 2 + j;
        std::copy_n(&hf[from * cols], cols, &gguf[to * cols]);
      }
    }
  }
  return gguf;
}

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> values(n);
  std::iota(values.begin(), values.end(), start);
  return values;
}

// hidden 8, 2 heads of 4, 1 KV head, MLP 12, one layer, vocab 6.
struct TinyModel {
  std::vector<float> q = Iota(8 * 8, 100);
  std::vector<float> k = Iota(4 * 8, 200);
  std::vector<float> q_bias = Iota(8, 300);
  std::vector<float> k_bias = Iota(4, 400);

  GgufWriter Writer(std::string_view arch, bool permute, bool with_bias) const {
    GgufWriter w;
    w.AddString("general.architecture", arch);
    const auto key = [arch](std::string_view suffix) {
      return std::string(arch) + "." + std::string(suffix);
    };
    w.AddU32(key("embedding_length"), 8);
    w.AddU32(key("feed_forward_length"), 12);
    w.AddU32(key("block_count"), 1);
    w.AddU32(key("attention.head_count"), 2);
    w.AddU32(key("attention.head_count_kv"), 1);
    w.AddU32(key("context_length"), 64);
    w.AddF32(key("attention.layer_norm_rms_epsilon"), 1e-5f);
    w.AddF32(key("rope.freq_base"), 5000.0f);
    w.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e", "f"});
    w.AddU32("tokenizer.ggml.bos_token_id", 1);
    w.AddU32("tokenizer.ggml.eos_token_id", 2);
    w.AddU32("tokenizer.ggml.eot_token_id", 3);
    const std::vector<float> norm(8, 1.0f);
    w.AddF32Tensor("token_embd.weight", {8, 6}, Iota(48, 0));
    w.AddF32Tensor("blk.0.attn_norm.weight", {8}, norm);
    w.AddF32Tensor("blk.0.attn_q.weight", {8, 8}, permute ? PermuteLikeConverter(q, 2, 8, 8) : q);
    w.AddF32Tensor("blk.0.attn_k.weight", {8, 4}, permute ? PermuteLikeConverter(k, 1, 4, 8) : k);
    w.AddF32Tensor("blk.0.attn_v.weight", {8, 4}, Iota(32, 500));
    if (with_bias) {
      w.AddF32Tensor("blk.0.attn_q.bias", {8},
                     permute ? PermuteLikeConverter(q_bias, 2, 8, 1) : q_bias);
      w.AddF32Tensor("blk.0.attn_k.bias", {4},
                     permute ? PermuteLikeConverter(k_bias, 1, 4, 1) : k_bias);
      w.AddF32Tensor("blk.0.attn_v.bias", {4}, Iota(4, 600));
    }
    w.AddF32Tensor("blk.0.attn_output.weight", {8, 8}, Iota(64, 700));
    w.AddF32Tensor("blk.0.ffn_norm.weight", {8}, norm);
    w.AddF32Tensor("blk.0.ffn_gate.weight", {8, 12}, Iota(96, 800));
    w.AddF32Tensor("blk.0.ffn_up.weight", {8, 12}, Iota(96, 900));
    w.AddF32Tensor("blk.0.ffn_down.weight", {12, 8}, Iota(96, 1000));
    w.AddF32Tensor("output_norm.weight", {8}, norm);
    return w;
  }
};

std::vector<float> ReadAll(const TensorSource& source, std::string_view name) {
  for (const TensorInfo& tensor : source.tensors()) {
    if (tensor.name != name) continue;
    std::vector<float> values(tensor.elements());
    const absl::Status status = source.Read(name, values);
    EXPECT_TRUE(status.ok()) << status;
    return values;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

TEST(GgufSourceTest, LlamaConfigNamesAndUnpermutedRows) {
  const TinyModel model;
  const std::string path =
      WriteTempFile("tiny-llama.gguf", model.Writer("llama", true, true).Bytes());
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenTensorSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  const ModelConfig& config = (*source)->config();
  EXPECT_EQ((*source)->format(), "gguf");
  EXPECT_EQ(config.architecture, Architecture::kLlama);
  EXPECT_EQ(config.hidden_size, 8);
  EXPECT_EQ(config.intermediate_size, 12);
  EXPECT_EQ(config.num_layers, 1);
  EXPECT_EQ(config.num_heads, 2);
  EXPECT_EQ(config.num_kv_heads, 1);
  EXPECT_EQ(config.head_dim, 4);
  EXPECT_EQ(config.vocab_size, 6);
  EXPECT_EQ(config.max_position, 64);
  EXPECT_EQ(config.rope_theta, 5000.0f);
  EXPECT_TRUE(config.tie_word_embeddings);
  EXPECT_TRUE(config.attention_bias);
  EXPECT_EQ(config.bos_token_id, 1);
  EXPECT_THAT(config.eos_token_ids, ElementsAre(2, 3));
  EXPECT_TRUE(CheckTensors(**source).ok()) << CheckTensors(**source);

  EXPECT_EQ((*source)->tensors()[0].name, "model.embed_tokens.weight");
  EXPECT_THAT((*source)->tensors()[0].shape, ElementsAre(6, 8));
  EXPECT_EQ((*source)->tensors()[0].stored_type, "F32");
  EXPECT_EQ(ReadAll(**source, "model.layers.0.self_attn.q_proj.weight"), model.q);
  EXPECT_EQ(ReadAll(**source, "model.layers.0.self_attn.k_proj.weight"), model.k);
  EXPECT_EQ(ReadAll(**source, "model.layers.0.self_attn.q_proj.bias"), model.q_bias);
  EXPECT_EQ(ReadAll(**source, "model.layers.0.self_attn.k_proj.bias"), model.k_bias);
  EXPECT_EQ(ReadAll(**source, "model.layers.0.self_attn.v_proj.weight"), Iota(32, 500));
  EXPECT_EQ(ReadAll(**source, "model.layers.0.mlp.down_proj.weight"), Iota(96, 1000));

  EXPECT_EQ((*source)->metadata().at("general.architecture"), "llama");
  EXPECT_EQ((*source)->metadata().at("llama.block_count"), "1");
  EXPECT_EQ((*source)->metadata().at("tokenizer.ggml.tokens"),
            "[\"a\", \"b\", \"c\", \"d\", \"e\", \"f\"]");

  std::vector<float> wrong(3);
  EXPECT_THAT((*source)->Read("model.norm.weight", wrong).message(), HasSubstr("output holds 3"));
  EXPECT_EQ((*source)->Read("lm_head.weight", wrong).code(), absl::StatusCode::kNotFound);
}

TEST(GgufSourceTest, Qwen2RowsAreNotPermuted) {
  const TinyModel model;
  const std::string path =
      WriteTempFile("tiny-qwen2.gguf", model.Writer("qwen2", false, true).Bytes());
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenTensorSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->config().architecture, Architecture::kQwen2);
  EXPECT_TRUE((*source)->config().attention_bias);
  EXPECT_EQ(ReadAll(**source, "model.layers.0.self_attn.q_proj.weight"), model.q);
  EXPECT_EQ(ReadAll(**source, "model.layers.0.self_attn.k_proj.bias"), model.k_bias);
}

TEST(GgufSourceTest, RopeFreqsAndOutputWeight) {
  GgufWriter writer = TinyModel().Writer("llama", true, false);
  const std::vector<float> factors = {1.0f, 4.0f};
  writer.AddF32Tensor("rope_freqs.weight", {2}, factors);
  writer.AddF32Tensor("output.weight", {8, 6}, Iota(48, 2000));
  absl::StatusOr<std::unique_ptr<TensorSource>> source =
      OpenTensorSource(WriteTempFile("rope-freqs.gguf", writer.Bytes()));
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT((*source)->config().rope_freq_factors, ElementsAre(1.0f, 4.0f));
  EXPECT_FALSE((*source)->config().tie_word_embeddings);
  EXPECT_FALSE((*source)->config().attention_bias);
  EXPECT_EQ(ReadAll(**source, "lm_head.weight"), Iota(48, 2000));
  for (const TensorInfo& tensor : (*source)->tensors()) EXPECT_NE(tensor.name, "rope_freqs.weight");
  EXPECT_TRUE(CheckTensors(**source).ok()) << CheckTensors(**source);
}

std::string OpenError(const GgufWriter& writer) {
  const absl::StatusOr<std::unique_ptr<TensorSource>> source =
      OpenTensorSource(WriteTempFile("bad-model.gguf", writer.Bytes()));
  EXPECT_FALSE(source.ok());
  return std::string(source.status().message());
}

TEST(GgufSourceTest, MetadataErrorsAreNamed) {
  GgufWriter duplicate = TinyModel().Writer("llama", true, false);
  duplicate.AddString("llama.attention.head_count", "9");
  EXPECT_THAT(OpenError(duplicate), HasSubstr("duplicate metadata key"));

  GgufWriter string_heads;
  string_heads.AddString("general.architecture", "llama");
  string_heads.AddU32("llama.embedding_length", 8);
  string_heads.AddU32("llama.feed_forward_length", 12);
  string_heads.AddU32("llama.block_count", 1);
  string_heads.AddString("llama.attention.head_count", "2");
  EXPECT_THAT(OpenError(string_heads),
              HasSubstr("'llama.attention.head_count' is string, expected an integer"));

  // A key the model needs is missing: an invalid model (not "not found", which the ABI reports
  // for a path with no model at all).
  GgufWriter missing;
  missing.AddString("general.architecture", "llama");
  EXPECT_THAT(OpenError(missing), HasSubstr("no metadata key 'llama.embedding_length'"));
  EXPECT_EQ(OpenTensorSource(WriteTempFile("missing.gguf", missing.Bytes())).status().code(),
            absl::StatusCode::kInvalidArgument);

  GgufWriter unknown;
  unknown.AddString("general.architecture", "gemma2");
  EXPECT_THAT(OpenError(unknown), HasSubstr("unsupported architecture 'gemma2'"));

  GgufWriter no_arch;
  EXPECT_THAT(OpenError(no_arch), HasSubstr("general.architecture"));

  GgufWriter extra = TinyModel().Writer("llama", true, false);
  extra.AddF32Tensor("blk.0.attn_q_norm.weight", {4}, Iota(4, 0));
  EXPECT_THAT(OpenError(extra), HasSubstr("unexpected tensor 'blk.0.attn_q_norm.weight'"));

  GgufWriter huge = TinyModel().Writer("llama", true, false);
  huge.AddU64("llama.vocab_size", uint64_t{1} << 40);
  EXPECT_THAT(OpenError(huge), HasSubstr("'llama.vocab_size' = 1099511627776 does not fit"));

  GgufWriter yarn = TinyModel().Writer("llama", true, false);
  yarn.AddString("llama.rope.scaling.type", "yarn");
  EXPECT_THAT(OpenError(yarn), HasSubstr("'yarn' is not supported"));
}

// --- the real SmolLM2 asset -----------------------------------------------------------------

std::string SmolLm2Path() {
  const char* root = std::getenv("PULSE_SOURCE_DIR");
  return std::string(root == nullptr ? "." : root) +
         "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The model at `path` on a CPU backend of `threads` threads and the kernels of `level`, its
// matrices as f32 or kept in their blocks.
std::shared_ptr<const Model> LoadOnCpu(const std::string& path, bool keep_blocks, int32_t threads,
                                       cpu::CpuLevel level = cpu::CpuLevel::kBest) {
  absl::StatusOr<std::shared_ptr<Backend>> backend =
      CreateCpuBackend({.threads = threads, .kernel_level = level});
  EXPECT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenTensorSource(path);
  EXPECT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::shared_ptr<const Model>> model =
      Model::Load(*backend, **source, {.weight_type = DType::kF32, .keep_blocks = keep_blocks});
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

TEST(SmolLm2Test, OpensWithTheKnownConfig) {
  const std::string path = SmolLm2Path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent: run scripts/setup";
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenTensorSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  const double open_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const ModelConfig& config = (*source)->config();
  const ModelConfig expected = ::pulse::testing::SmolLm2Config();
  EXPECT_EQ(config.architecture, Architecture::kLlama);
  EXPECT_EQ(config.num_layers, expected.num_layers);
  EXPECT_EQ(config.hidden_size, expected.hidden_size);
  EXPECT_EQ(config.num_heads, expected.num_heads);
  EXPECT_EQ(config.num_kv_heads, expected.num_kv_heads);
  EXPECT_EQ(config.head_dim, expected.head_dim);
  EXPECT_EQ(config.intermediate_size, expected.intermediate_size);
  EXPECT_EQ(config.vocab_size, expected.vocab_size);
  EXPECT_EQ(config.rope_theta, expected.rope_theta);
  EXPECT_TRUE(config.tie_word_embeddings);
  EXPECT_FALSE(config.attention_bias);
  EXPECT_EQ(config.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_TRUE(config.rope_freq_factors.empty());
  EXPECT_EQ(config.bos_token_id, 1);
  EXPECT_THAT(config.eos_token_ids, ElementsAre(2));
  EXPECT_EQ(ParameterCount(config), 134'515'008);
  EXPECT_TRUE(CheckTensors(**source).ok()) << CheckTensors(**source);
  EXPECT_EQ((*source)->tensors().size(), 272u);
  EXPECT_EQ((*source)->metadata().at("tokenizer.ggml.tokens"), "[array of 49152 string]");
  EXPECT_EQ((*source)->metadata().at("tokenizer.ggml.model"), "gpt2");
  RecordProperty("open_ms", std::to_string(open_ms));

  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const absl::StatusOr<std::vector<std::string>> tokens =
      file->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->size(), 49152u);
  EXPECT_EQ(file->GetStringArray("tokenizer.ggml.merges")->size(), 48900u);
  EXPECT_EQ(file->GetIntArray("tokenizer.ggml.token_type")->size(), 49152u);
}

// The loader maps the file while it loads and reads it no more once the model is loaded: a file
// truncated afterwards (or replaced) changes nothing, and the model still generates.
TEST(SmolLm2Test, AFileTruncatedAfterTheLoadIsNotReadAgain) {
  const std::string path = SmolLm2Path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent: run scripts/setup";
  const auto generate = [](const std::string& file, bool truncate_after_load) {
    const std::shared_ptr<const Model> model = LoadOnCpu(file, false, 1);
    if (truncate_after_load) std::filesystem::resize_file(file, 0);
    std::unique_ptr<Engine> engine = *Engine::Create(model, {.max_context = 64});
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.max_tokens = 4;
    const RequestId id = *engine->Submit({1, 504, 3458, 282}, greedy, nullptr);
    while (engine->pending() > 0) EXPECT_TRUE(engine->Step().ok());
    return engine->Snapshot(id)->tokens;
  };
  const std::string copy = (std::filesystem::temp_directory_path() /
                            ("pulse-truncated-" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
  const std::vector<int32_t> truncated = generate(copy, true);
  std::filesystem::remove(copy);
  EXPECT_EQ(truncated.size(), 4u);
  EXPECT_EQ(truncated, generate(path, false));
}

TEST(SmolLm2Test, QkUnpermutationRoundTrips) {
  const std::string path = SmolLm2Path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent: run scripts/setup";
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenTensorSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  for (const int layer : {0, 29}) {
    for (const auto& [gguf_name, hf_name, heads, rows] :
         {std::tuple{"attn_q", "q_proj", 9, 576}, std::tuple{"attn_k", "k_proj", 3, 192}}) {
      const GgufTensorInfo* raw =
          file->FindTensor(absl::StrCat("blk.", layer, ".", gguf_name, ".weight"));
      ASSERT_NE(raw, nullptr);
      EXPECT_EQ(raw->type, GgmlType::kQ4_1);
      std::vector<float> gguf(raw->elements);
      ASSERT_TRUE(Dequantize(raw->type, file->TensorData(*raw), gguf).ok());
      const std::vector<float> hf = ReadAll(
          **source, absl::StrCat("model.layers.", layer, ".self_attn.", hf_name, ".weight"));
      EXPECT_NE(hf, gguf);
      EXPECT_EQ(PermuteLikeConverter(hf, heads, rows, 576), gguf) << layer << " " << gguf_name;
    }
  }
}

// Matrices read in their blocks decode to the values Read gives, permuted q and k rows included;
// other tensors are not offered in blocks.
TEST(SmolLm2Test, BlocksReadAsStoredDecodeToTheValues) {
  const std::string path = SmolLm2Path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent: run scripts/setup";
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenTensorSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  for (const auto& [name, type] :
       {std::pair{"model.layers.0.self_attn.q_proj.weight", GgmlType::kQ4_1},
        std::pair{"model.layers.29.self_attn.k_proj.weight", GgmlType::kQ4_1},
        std::pair{"model.layers.7.mlp.down_proj.weight", GgmlType::kQ4_1},
        std::pair{"model.embed_tokens.weight", GgmlType::kQ8_0}}) {
    std::vector<std::byte> blocks;
    const absl::StatusOr<DType> kept = (*source)->ReadBlocks(name, blocks);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(*kept, type == GgmlType::kQ4_1 ? DType::kQ4_1 : DType::kQ8_0);
    const std::vector<float> values = ReadAll(**source, name);
    std::vector<float> decoded(values.size());
    ASSERT_TRUE(Dequantize(type, blocks, decoded).ok());
    EXPECT_EQ(decoded, values) << name;
  }
  std::vector<std::byte> blocks;
  EXPECT_EQ((*source)->ReadBlocks("model.norm.weight", blocks).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*source)->ReadBlocks("no.such.tensor", blocks).status().code(),
            absl::StatusCode::kNotFound);
}

// Kept in their blocks on the CPU backend (the activations quantized to 8 bits a block of 32 for
// the integer products), the logits of every position of a generated text stay close to the f32
// weights'. Measured here: 31 of 32 positions keep their top token (the other is a near tie of a
// 135M model on its own greedy text; with the lanes summed in another order 27 did) and the worst
// position's largest error is 0.76 of its logits' standard deviation. The bounds guard against a
// regression; they are no accuracy claim (that is the float64 comparison against llama.cpp's the
// CPU issue asks for).
// The largest |got - want| of a position's logits, in units of want's standard deviation.
double LargestErrorInStddevs(std::span<const float> want, std::span<const float> got) {
  double mean = 0;
  for (const float v : want) mean += v;
  mean /= static_cast<double>(want.size());
  double variance = 0;
  double largest_error = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    variance += (want[i] - mean) * (want[i] - mean);
    largest_error = std::max(largest_error, std::abs(double{got[i]} - want[i]));
  }
  return largest_error / std::sqrt(variance / static_cast<double>(want.size()));
}

// The logits of every position of `text`, in one prefill.
std::vector<float> AllLogits(const std::shared_ptr<const Model>& model,
                             const std::vector<int32_t>& text) {
  const ModelConfig& config = model->config();
  const PagedKvLayout layout{.block_tokens = 32,
                             .num_kv_heads = config.num_kv_heads,
                             .head_dim = config.head_dim,
                             .type = model->backend().kv_type()};
  const auto tokens = static_cast<int32_t>(text.size());
  const int32_t blocks = (tokens + 31) / 32;
  KvCache cache = *KvCache::Create(model->backend(), layout, config.num_layers, blocks);
  ModelRunner runner = *ModelRunner::Create(model, std::move(cache),
                                            {.max_step_tokens = tokens,
                                             .max_seqs = 1,
                                             .max_blocks_per_seq = blocks,
                                             .max_logit_rows = tokens});
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  StepBatch batch;
  batch.AddSequence(text, 0, table, LogitRows::kAll);
  std::vector<float> out(text.size() * static_cast<size_t>(config.vocab_size));
  EXPECT_TRUE(runner.Forward(batch, out).ok());
  return out;
}

TEST(SmolLm2Test, WeightsKeptInBlocksGiveTheF32Logits) {
  const std::string path = SmolLm2Path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent: run scripts/setup";
  const std::shared_ptr<const Model> f32 = LoadOnCpu(path, false, 2);
  const std::shared_ptr<const Model> kept = LoadOnCpu(path, true, 2);
  EXPECT_FALSE(f32->weights_in_blocks());
  EXPECT_TRUE(kept->weights_in_blocks());
  EXPECT_EQ(kept->weights().layers[3].gate_up.type, DType::kQ4_1);
  EXPECT_EQ(kept->weights().embed.type, DType::kQ8_0);

  // A text: the prompt and the f32 model's greedy continuation.
  std::vector<int32_t> text = {1, 504, 3458, 282};
  {
    std::unique_ptr<Engine> engine = *Engine::Create(f32, {.max_context = 64});
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.max_tokens = 28;
    const RequestId id = *engine->Submit(text, greedy, nullptr);
    while (engine->pending() > 0) ASSERT_TRUE(engine->Step().ok());
    const std::vector<int32_t> generated = engine->Snapshot(id)->tokens;
    text.insert(text.end(), generated.begin(), generated.end());
  }
  // The blocks decode to the reader's values and the same fp32 kernels multiply them.
  const std::vector<float> reference = AllLogits(f32, text);
  const std::vector<float> actual = AllLogits(kept, text);
  ASSERT_EQ(actual.size(), reference.size());
  EXPECT_EQ(std::memcmp(actual.data(), reference.data(), actual.size() * sizeof(float)), 0);
}

// The logits at every kernel level this CPU runs against the best level's: the same bits where
// both levels fuse multiply-adds; the generic level rounds each multiply-add twice and stays
// within 1e-4 of a position's logit standard deviation, f32 weights or kept in blocks.
TEST(SmolLm2Test, EveryKernelLevelGivesTheLogitsOfTheBest) {
  const std::string path = SmolLm2Path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent: run scripts/setup";
  const std::vector<int32_t> text = {1, 504, 3458, 282, 253, 1345, 28, 3575, 30, 2055};
  const cpu::CpuLevel best = cpu::ResolveCpuLevel(cpu::CpuLevel::kBest);
  for (const bool keep_blocks : {false, true}) {
    const std::vector<float> reference = AllLogits(LoadOnCpu(path, keep_blocks, 2, best), text);
    const size_t vocab = reference.size() / text.size();
    for (const cpu::CpuLevel level :
         {cpu::CpuLevel::kGeneric, cpu::CpuLevel::kAvx2, cpu::CpuLevel::kAvx512}) {
      if (level == best || !cpu::CpuLevelSupported(level)) continue;
      SCOPED_TRACE(::testing::Message()
                   << cpu::CpuLevelName(level) << (keep_blocks ? " kept" : " f32"));
      const std::vector<float> logits = AllLogits(LoadOnCpu(path, keep_blocks, 2, level), text);
      ASSERT_EQ(logits.size(), reference.size());
      if (level != cpu::CpuLevel::kGeneric) {
        EXPECT_EQ(std::memcmp(logits.data(), reference.data(), logits.size() * sizeof(float)), 0);
        continue;
      }
      for (size_t p = 0; p < text.size(); ++p) {
        EXPECT_LE(LargestErrorInStddevs({reference.data() + p * vocab, vocab},
                                        {logits.data() + p * vocab, vocab}),
                  1e-4)
            << "position " << p;
      }
    }
  }
}

// Requests decoding together (greedy, sampled, greedy) give the tokens each gives alone.
void ExpectBatchedAsAlone(const std::shared_ptr<const Model>& model,
                          const std::vector<std::vector<int32_t>>& prompts) {
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 10;
  SamplingParams sampled = greedy;
  sampled.temperature = 0.8f;
  sampled.seed = 5;
  const std::vector<SamplingParams> params = {greedy, sampled, greedy};
  const auto run = [&](const std::vector<size_t>& which, int32_t prefill_chunk) {
    std::unique_ptr<Engine> engine =
        *Engine::Create(model, {.prefill_chunk = prefill_chunk, .max_context = 64});
    std::vector<RequestId> ids;
    for (const size_t i : which) ids.push_back(*engine->Submit(prompts[i], params[i], nullptr));
    while (engine->pending() > 0) EXPECT_TRUE(engine->Step().ok());
    std::vector<std::vector<int32_t>> tokens;
    for (const RequestId id : ids) tokens.push_back(engine->Snapshot(id)->tokens);
    return tokens;
  };
  const std::vector<std::vector<int32_t>> together = run({0, 1, 2}, 3);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i], run({i}, 64)[0]) << "request " << i;
  }
}

// Kept in their blocks, requests decoding together give the tokens each gives alone: a row of
// activations is quantized and multiplied on its own, whatever else the step holds.
TEST(SmolLm2Test, WeightsKeptInBlocksBatchAsTheyRunAlone) {
  const std::string path = SmolLm2Path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent: run scripts/setup";
  ExpectBatchedAsAlone(
      LoadOnCpu(path, true, 2),
      {{1, 504, 3458, 282}, {1, 2683, 314, 253, 1345, 28, 3575, 30, 2055}, {1, 4115}});
}

// --- K-quants ---------------------------------------------------------------------------------

// A two-layer llama of random Q4_K and Q6_K matrices at the smallest widths whose rows are whole
// 256-value super-blocks: hidden 256 (2 heads of 128, 1 KV head), MLP 512, vocab 32. Layer 0's v
// is Q6_K, as a Q4_K_M file's often is (its fused qkv then mixes types and loads as f32), layer
// 1's Q4_K; ffn_down, the token embedding and the output are Q6_K.
// Random Q4_K blocks whose values are centred: each sub-block's minimum equals its scale and
// dmin = 8 d, so a value is d * sc * (q - 8). (Random minima give every row of a matrix one large
// offset, and the model one token whatever its input.)
std::vector<std::byte> CenteredQ4_KBlocks(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<std::byte> blocks = RandomBlocks(DType::kQ4_K, rows, cols, seed, false);
  for (size_t b = 0; b < blocks.size(); b += kQ4_KBlockBytes) {
    std::byte* block = &blocks[b];
    uint16_t d;
    std::memcpy(&d, block, 2);
    const auto dmin = static_cast<uint16_t>(d + (3 << 10));  // 8 d: the exponent plus 3
    std::memcpy(block + 2, &dmin, 2);
    std::byte* scales = block + 4;
    for (int i = 0; i < 4; ++i) {
      scales[i + 4] = scales[i];
      scales[i + 8] = (scales[i + 8] & std::byte{0x0F}) | (scales[i + 8] << 4);
    }
  }
  return blocks;
}

std::string WriteKQuantModel() {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.embedding_length", 256);
  w.AddU32("llama.feed_forward_length", 512);
  w.AddU32("llama.block_count", 2);
  w.AddU32("llama.attention.head_count", 2);
  w.AddU32("llama.attention.head_count_kv", 1);
  w.AddU32("llama.context_length", 64);
  w.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddU32("llama.vocab_size", 32);
  w.AddU32("tokenizer.ggml.bos_token_id", 1);
  uint32_t seed = 0;
  const auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, DType type) {
    ++seed;
    if (type == DType::kQ4_K) {
      w.AddTensor(name, {cols, rows}, GgmlType::kQ4_K, CenteredQ4_KBlocks(rows, cols, seed));
    } else {
      w.AddTensor(name, {cols, rows}, GgmlType::kQ6_K, RandomBlocks(type, rows, cols, seed, false));
    }
  };
  const std::vector<float> norm(256, 1.0f);
  matrix("token_embd.weight", 32, 256, DType::kQ6_K);
  for (int layer = 0; layer < 2; ++layer) {
    const std::string blk = absl::StrCat("blk.", layer, ".");
    w.AddF32Tensor(blk + "attn_norm.weight", {256}, norm);
    matrix(blk + "attn_q.weight", 256, 256, DType::kQ4_K);
    matrix(blk + "attn_k.weight", 128, 256, DType::kQ4_K);
    matrix(blk + "attn_v.weight", 128, 256, layer == 0 ? DType::kQ6_K : DType::kQ4_K);
    matrix(blk + "attn_output.weight", 256, 256, DType::kQ4_K);
    w.AddF32Tensor(blk + "ffn_norm.weight", {256}, norm);
    matrix(blk + "ffn_gate.weight", 512, 256, DType::kQ4_K);
    matrix(blk + "ffn_up.weight", 512, 256, DType::kQ4_K);
    matrix(blk + "ffn_down.weight", 256, 512, DType::kQ6_K);
  }
  w.AddF32Tensor("output_norm.weight", {256}, norm);
  matrix("output.weight", 32, 256, DType::kQ6_K);
  return WriteTempFile("tiny-kquant.gguf", w.Bytes());
}

// Q4_K and Q6_K matrices read in their blocks decode to the values Read gives, the permuted q and
// k rows (whole super-blocks each) included.
TEST(GgufSourceTest, KQuantBlocksReadAsStoredDecodeToTheValues) {
  const std::string path = WriteKQuantModel();
  absl::StatusOr<std::unique_ptr<TensorSource>> source = OpenTensorSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  for (const auto& [name, type] :
       {std::pair{"model.layers.0.self_attn.q_proj.weight", GgmlType::kQ4_K},
        std::pair{"model.layers.1.self_attn.k_proj.weight", GgmlType::kQ4_K},
        std::pair{"model.layers.0.self_attn.v_proj.weight", GgmlType::kQ6_K},
        std::pair{"model.layers.1.mlp.down_proj.weight", GgmlType::kQ6_K},
        std::pair{"model.embed_tokens.weight", GgmlType::kQ6_K}}) {
    std::vector<std::byte> blocks;
    const absl::StatusOr<DType> kept = (*source)->ReadBlocks(name, blocks);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(*kept, type == GgmlType::kQ4_K ? DType::kQ4_K : DType::kQ6_K);
    const std::vector<float> values = ReadAll(**source, name);
    std::vector<float> decoded(values.size());
    ASSERT_TRUE(Dequantize(type, blocks, decoded).ok());
    EXPECT_EQ(decoded, values) << name;
  }
}

// On the CPU backend the K-quant matrices stay in their blocks (a fused matrix whose parts differ
// in type loads as f32), and requests batch as they run alone.
TEST(GgufSourceTest, KQuantModelKeptInBlocksBatchesAsItRunsAlone) {
  const std::shared_ptr<const Model> model = LoadOnCpu(WriteKQuantModel(), true, 2);
  ASSERT_TRUE(model->weights_in_blocks());
  const ModelWeights& weights = model->weights();
  EXPECT_EQ(weights.embed.type, DType::kQ6_K);
  EXPECT_EQ(weights.layers[0].qkv.type, DType::kF32);
  EXPECT_EQ(weights.layers[1].qkv.type, DType::kQ4_K);
  EXPECT_EQ(weights.layers[1].o.type, DType::kQ4_K);
  EXPECT_EQ(weights.layers[1].gate_up.type, DType::kQ4_K);
  EXPECT_EQ(weights.layers[1].down.type, DType::kQ6_K);
  EXPECT_EQ(weights.output().type, DType::kQ6_K);
  ExpectBatchedAsAlone(model, {{1, 5, 9, 30}, {1, 17, 2, 8, 8, 3, 21, 12, 4}, {1, 26}});
}

}  // namespace
}  // namespace pulse
