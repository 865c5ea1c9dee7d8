// The text side of the ABI on the real SmolLM2 model: tokenize / detokenize with the size-query
// convention, the chat template, text requests, streamed text pieces and stop strings; and the
// errors of a model without a tokenizer.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "pulseinfer/pulseinfer.h"
#include "tiny_model.h"

namespace {

std::string LastError() { return pulse_last_error(); }

// "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n" in
// SmolLM2's vocabulary, as the PyPI tokenizers package encodes it (see tests/python).
const std::vector<int32_t> kUserTurnIds = {1,    4093, 198, 1780, 314, 260, 3575, 282,
                                           4649, 47,   2,   198,  1,   520, 9531, 198};
constexpr char kUserTurn[] =
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
constexpr char kDefaultSystem[] =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n";

class AbiText : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* root = std::getenv("PULSE_SOURCE_DIR");
    ASSERT_NE(root, nullptr) << "PULSE_SOURCE_DIR is not set (ctest sets it)";
    const std::string path = std::string(root) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    pulse_model_params params;
    ASSERT_EQ(pulse_model_params_init(&params, sizeof(params)), PULSE_OK);
    params.weight_type = "bf16";
    ASSERT_EQ(pulse_model_load(path.c_str(), &params, &model_), PULSE_OK)
        << LastError() << " (scripts/setup fetches the model)";
  }
  static void TearDownTestSuite() {
    pulse_model_free(model_);
    model_ = nullptr;
  }
  void SetUp() override {
    pulse_engine_params params;
    ASSERT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
    params.max_context = 512;
    params.kv_capacity_tokens = 2048;
    ASSERT_EQ(pulse_engine_create(model_, &params, &engine_), PULSE_OK) << LastError();
  }
  void TearDown() override { pulse_engine_free(engine_); }

  static std::vector<int32_t> Tokenize(const std::string& text, uint32_t flags) {
    size_t count = 0;
    EXPECT_EQ(pulse_tokenize(model_, text.data(), text.size(), flags, nullptr, 0, &count),
              PULSE_BUFFER_TOO_SMALL);
    std::vector<int32_t> ids(count);
    EXPECT_EQ(
        pulse_tokenize(model_, text.data(), text.size(), flags, ids.data(), ids.size(), &count),
        PULSE_OK)
        << LastError();
    EXPECT_EQ(count, ids.size());
    return ids;
  }

  static std::string Detokenize(const std::vector<int32_t>& ids, uint32_t flags = 0) {
    size_t len = 0;
    EXPECT_EQ(pulse_detokenize(model_, ids.data(), ids.size(), flags, nullptr, 0, &len),
              PULSE_BUFFER_TOO_SMALL);
    std::string text(len + 1, '\x7f');
    EXPECT_EQ(
        pulse_detokenize(model_, ids.data(), ids.size(), flags, text.data(), text.size(), &len),
        PULSE_OK)
        << LastError();
    EXPECT_EQ(text[len], '\0');
    text.resize(len);
    return text;
  }

  struct Streamed {
    std::string text;
    std::vector<std::string> pieces;
    pulse_finish_reason reason = PULSE_FINISH_NONE;
  };
  static int Record(void* user_data, const pulse_token_event* event) {
    auto* streamed = static_cast<Streamed*>(user_data);
    EXPECT_GE(event->struct_size, sizeof(pulse_token_event));
    EXPECT_NE(event->text, nullptr);
    EXPECT_EQ(event->text[event->text_len], '\0');
    streamed->pieces.emplace_back(event->text, event->text_len);
    streamed->text.append(event->text, event->text_len);
    if (event->finished) streamed->reason = event->finish_reason;
    return 0;
  }

  // Greedy generation of up to `max_tokens` after the chat prompt, with `stop` if given.
  uint64_t Generate(Streamed& streamed, int max_tokens, const char* stop = nullptr) {
    pulse_sampling_params sampling;
    EXPECT_EQ(pulse_sampling_params_init(&sampling, sizeof(sampling)), PULSE_OK);
    sampling.temperature = 0;
    sampling.max_tokens = max_tokens;
    const char* stops[] = {stop};
    if (stop != nullptr) {
      sampling.stop_strings = stops;
      sampling.stop_string_count = 1;
    }
    uint64_t id = 0;
    EXPECT_EQ(
        pulse_request_submit_text(engine_, kUserTurn, sizeof(kUserTurn) - 1,
                                  PULSE_TOKENIZE_PARSE_SPECIAL, &sampling, Record, &streamed, &id),
        PULSE_OK)
        << LastError();
    EXPECT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
    return id;
  }

  std::vector<int32_t> Tokens(uint64_t id) {
    size_t count = 0;
    pulse_request_result(engine_, id, nullptr, 0, &count);
    std::vector<int32_t> tokens(count);
    EXPECT_EQ(pulse_request_result(engine_, id, tokens.data(), tokens.size(), &count), PULSE_OK);
    return tokens;
  }

  static pulse_model* model_;
  pulse_engine* engine_ = nullptr;
};

pulse_model* AbiText::model_ = nullptr;

TEST_F(AbiText, InfoNamesTheTokenizerAndTheTemplate) {
  pulse_model_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(pulse_model_info_get(model_, &info), PULSE_OK);
  EXPECT_STREQ(info.tokenizer, "gpt2");
  EXPECT_STREQ(info.chat_template, "chatml");
  EXPECT_EQ(info.bos_token, 1);
  EXPECT_EQ(info.eos_token, 2);
}

TEST_F(AbiText, TokenizeParsesSpecialTokensOnlyWhenAsked) {
  EXPECT_EQ(Tokenize(kUserTurn, PULSE_TOKENIZE_DEFAULT), kUserTurnIds);
  const std::vector<int32_t> plain = Tokenize(kUserTurn, PULSE_TOKENIZE_ADD_SPECIAL);
  EXPECT_GT(plain.size(), kUserTurnIds.size());
  for (const int32_t id : plain) EXPECT_GT(id, 16) << "a special token from plain text";
  EXPECT_EQ(Detokenize(plain), kUserTurn);
}

TEST_F(AbiText, DetokenizeSkipsControlTokensUnlessRendered) {
  EXPECT_EQ(Detokenize(kUserTurnIds, PULSE_DETOKENIZE_RENDER_SPECIAL), kUserTurn);
  EXPECT_EQ(Detokenize(kUserTurnIds), "user\nWhat is the capital of France?\nassistant\n");
}

TEST_F(AbiText, SizeQueriesWriteNothingIntoATooSmallBuffer) {
  std::vector<int32_t> ids(3, -7);
  size_t count = 0;
  EXPECT_EQ(pulse_tokenize(model_, kUserTurn, sizeof(kUserTurn) - 1, PULSE_TOKENIZE_DEFAULT,
                           ids.data(), ids.size(), &count),
            PULSE_BUFFER_TOO_SMALL);
  EXPECT_EQ(count, kUserTurnIds.size());
  EXPECT_EQ(ids, std::vector<int32_t>(3, -7));
  EXPECT_NE(LastError().find("capacity is 3"), std::string::npos) << LastError();

  // The text needs its NUL: a buffer of exactly the text's length is too small.
  const std::string expected = Detokenize(kUserTurnIds);
  std::string text(expected.size(), 'x');
  size_t len = 0;
  EXPECT_EQ(pulse_detokenize(model_, kUserTurnIds.data(), kUserTurnIds.size(), 0, text.data(),
                             text.size(), &len),
            PULSE_BUFFER_TOO_SMALL);
  EXPECT_EQ(len, expected.size());
  EXPECT_EQ(text, std::string(expected.size(), 'x'));
}

TEST_F(AbiText, TextArgumentsAreChecked) {
  size_t count = 9;
  EXPECT_EQ(pulse_tokenize(model_, nullptr, 3, 0, nullptr, 0, &count), PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(pulse_tokenize(model_, "a", 1, 1u << 7, nullptr, 0, &count), PULSE_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("unknown tokenize flags"), std::string::npos) << LastError();
  EXPECT_EQ(pulse_tokenize(model_, "a", 1, 0, nullptr, 4, &count), PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(pulse_tokenize(nullptr, "a", 1, 0, nullptr, 0, &count), PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(pulse_tokenize(model_, "a", 1, 0, nullptr, 0, nullptr), PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(pulse_tokenize(model_, nullptr, 0, 0, nullptr, 0, &count), PULSE_OK);
  EXPECT_EQ(count, 0u);

  const int32_t outside[] = {5, 49152};
  size_t len = 0;
  EXPECT_EQ(pulse_detokenize(model_, outside, 2, 0, nullptr, 0, &len), PULSE_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("token 49152 at position 1"), std::string::npos) << LastError();
}

TEST_F(AbiText, ChatTemplateRendersSmolLm2sTemplate) {
  const pulse_chat_message messages[] = {{"user", "What is the capital of France?"}};
  size_t len = 0;
  ASSERT_EQ(pulse_chat_apply_template(model_, messages, 1, 1, nullptr, 0, &len),
            PULSE_BUFFER_TOO_SMALL);
  std::string text(len + 1, '\0');
  ASSERT_EQ(pulse_chat_apply_template(model_, messages, 1, 1, text.data(), text.size(), &len),
            PULSE_OK)
      << LastError();
  text.resize(len);
  EXPECT_EQ(text, std::string(kDefaultSystem) + kUserTurn);

  const pulse_chat_message bad[] = {{"user", nullptr}};
  EXPECT_EQ(pulse_chat_apply_template(model_, bad, 1, 1, nullptr, 0, &len), PULSE_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("messages[0] has a NULL content"), std::string::npos);
}

// A conversation submitted as messages is the rendered template submitted as text with its
// markers parsed as special tokens: the same prompt, the same answer.
TEST_F(AbiText, ASubmittedChatIsItsRenderedTemplate) {
  Streamed streamed;
  const std::vector<int32_t> expected = Tokens(Generate(streamed, 48));
  pulse_sampling_params sampling;
  ASSERT_EQ(pulse_sampling_params_init(&sampling, sizeof(sampling)), PULSE_OK);
  sampling.temperature = 0;
  sampling.max_tokens = 48;
  const pulse_chat_message messages[] = {{"user", "What is the capital of France?"}};
  Streamed chat;
  uint64_t id = 0;
  ASSERT_EQ(pulse_request_submit_chat(engine_, messages, 1, &sampling, Record, &chat, &id),
            PULSE_OK)
      << LastError();
  ASSERT_EQ(pulse_engine_run(engine_), PULSE_OK) << LastError();
  EXPECT_EQ(Tokens(id), expected);
  EXPECT_EQ(chat.text, streamed.text);
  pulse_request_stats stats;
  stats.struct_size = sizeof(stats);
  ASSERT_EQ(pulse_request_stats_get(engine_, id, &stats), PULSE_OK);
  EXPECT_EQ(
      stats.prompt_tokens,
      static_cast<int32_t>(
          Tokenize(std::string(kDefaultSystem) + kUserTurn, PULSE_TOKENIZE_PARSE_SPECIAL).size()));

  const pulse_chat_message bad[] = {{nullptr, "x"}};
  EXPECT_EQ(pulse_request_submit_chat(engine_, bad, 1, nullptr, nullptr, nullptr, &id),
            PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(id, 0u);
  EXPECT_NE(LastError().find("messages[0] has a NULL role"), std::string::npos) << LastError();
  EXPECT_EQ(pulse_request_submit_chat(engine_, nullptr, 1, nullptr, nullptr, nullptr, &id),
            PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(pulse_request_submit_chat(engine_, messages, 1, nullptr, nullptr, nullptr, nullptr),
            PULSE_INVALID_ARGUMENT);
}

TEST_F(AbiText, StreamedTextEqualsTheDetokenizedTokens) {
  Streamed streamed;
  const uint64_t id = Generate(streamed, 48);
  EXPECT_EQ(streamed.text, "The capital of France is Paris.");
  EXPECT_EQ(streamed.reason, PULSE_FINISH_STOP_TOKEN);
  EXPECT_EQ(streamed.text, Detokenize(Tokens(id)));
  EXPECT_EQ(streamed.pieces.back(), "") << "<|im_end|> renders nothing";

  size_t len = 0;
  ASSERT_EQ(pulse_request_text(engine_, id, nullptr, 0, &len), PULSE_BUFFER_TOO_SMALL);
  std::string text(len + 1, '\0');
  ASSERT_EQ(pulse_request_text(engine_, id, text.data(), text.size(), &len), PULSE_OK);
  text.resize(len);
  EXPECT_EQ(text, streamed.text);
}

TEST_F(AbiText, AStopStringAcrossTokensEndsTheTextBeforeIt) {
  Streamed streamed;
  const uint64_t id = Generate(streamed, 48, " France is");  // " France" and " is" are two tokens
  EXPECT_EQ(streamed.text, "The capital of");
  EXPECT_EQ(streamed.reason, PULSE_FINISH_STOP_STRING);
  for (const std::string& piece : streamed.pieces) {
    EXPECT_EQ(piece.find("France"), std::string::npos) << "part of the stop string was streamed";
  }
  const std::vector<int32_t> tokens = Tokens(id);
  EXPECT_EQ(Detokenize(tokens), "The capital of France is");  // the tokens include the stop
  pulse_request_stats stats;
  stats.struct_size = sizeof(stats);
  ASSERT_EQ(pulse_request_stats_get(engine_, id, &stats), PULSE_OK);
  EXPECT_EQ(stats.finish_reason, PULSE_FINISH_STOP_STRING);
  EXPECT_STREQ(pulse_finish_reason_string(stats.finish_reason), "stop_string");
}

TEST_F(AbiText, BadStopStringsAreRefused) {
  pulse_sampling_params sampling;
  ASSERT_EQ(pulse_sampling_params_init(&sampling, sizeof(sampling)), PULSE_OK);
  const char* stops[] = {""};
  sampling.stop_strings = stops;
  sampling.stop_string_count = 1;
  uint64_t id = 5;
  EXPECT_EQ(pulse_request_submit_text(engine_, "Hi", 2, PULSE_TOKENIZE_DEFAULT, &sampling, nullptr,
                                      nullptr, &id),
            PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(id, 0u);
  EXPECT_NE(LastError().find("stop string is empty"), std::string::npos) << LastError();
  sampling.stop_strings = nullptr;
  EXPECT_EQ(pulse_request_submit_text(engine_, "Hi", 2, PULSE_TOKENIZE_DEFAULT, &sampling, nullptr,
                                      nullptr, &id),
            PULSE_INVALID_ARGUMENT);
  EXPECT_EQ(pulse_request_submit_text(engine_, "", 0, PULSE_TOKENIZE_PARSE_SPECIAL, nullptr,
                                      nullptr, nullptr, &id),
            PULSE_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("the prompt is empty"), std::string::npos) << LastError();
}

TEST(AbiTextWithoutTokenizer, TextCallsSayTheModelHasNone) {
  pulse_model* model = pulse::capi_test::LoadTinyModel();
  ASSERT_NE(model, nullptr);
  pulse_engine* engine = pulse::capi_test::CreateTinyEngine(model);
  ASSERT_NE(engine, nullptr);
  pulse_model_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(pulse_model_info_get(model, &info), PULSE_OK);
  EXPECT_STREQ(info.tokenizer, "");
  EXPECT_STREQ(info.chat_template, "");
  EXPECT_EQ(info.bos_token, -1);

  size_t count = 0;
  EXPECT_EQ(pulse_tokenize(model, "a", 1, 0, nullptr, 0, &count), PULSE_UNSUPPORTED);
  EXPECT_NE(LastError().find("no tokenizer"), std::string::npos) << LastError();
  const int32_t ids[] = {5};
  EXPECT_EQ(pulse_detokenize(model, ids, 1, 0, nullptr, 0, &count), PULSE_UNSUPPORTED);
  EXPECT_EQ(pulse_chat_apply_template(model, nullptr, 0, 1, nullptr, 0, &count), PULSE_NOT_FOUND);
  uint64_t id = 0;
  EXPECT_EQ(pulse_request_submit_text(engine, "a", 1, 0, nullptr, nullptr, nullptr, &id),
            PULSE_UNSUPPORTED);
  const pulse_chat_message messages[] = {{"user", "a"}};
  EXPECT_EQ(pulse_request_submit_chat(engine, messages, 1, nullptr, nullptr, nullptr, &id),
            PULSE_NOT_FOUND);
  EXPECT_NE(LastError().find("no tokenizer"), std::string::npos) << LastError();

  // Events carry no text, and stop strings cannot be honoured.
  pulse_sampling_params sampling = pulse::capi_test::GreedySampling(2);
  const char* stops[] = {"x"};
  sampling.stop_strings = stops;
  sampling.stop_string_count = 1;
  const std::vector<int32_t> prompt = pulse::capi_test::TinyPrompt(4);
  EXPECT_EQ(
      pulse_request_submit(engine, prompt.data(), prompt.size(), &sampling, nullptr, nullptr, &id),
      PULSE_FAILED_PRECONDITION);
  EXPECT_NE(LastError().find("stop strings need a tokenizer"), std::string::npos);
  pulse_engine_free(engine);
  pulse_model_free(model);
}

}  // namespace
