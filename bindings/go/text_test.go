package pulseinfer_test

import (
	"errors"
	"strings"
	"testing"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

func TestTokenizeRoundTrip(t *testing.T) {
	for _, text := range []string{
		"",
		"Hello, world! Ça va? 日本語 🙂",
		"invalid UTF-8: \xc3 and \x80, a NUL \x00 inside",
		// Tokens longer than Detokenize's first guess of the text's size.
		strings.Repeat(" ", 64) + "internationalization" + strings.Repeat("=", 24),
	} {
		tokens, err := model.Tokenize(text, pulseinfer.TokenizeDefault)
		if err != nil {
			t.Fatalf("Tokenize(%q): %v", text, err)
		}
		if text != "" && len(tokens) == 0 {
			t.Errorf("Tokenize(%q) has no tokens", text)
		}
		back, err := model.Detokenize(tokens, 0)
		if err != nil || back != text {
			t.Errorf("Detokenize(Tokenize(%q)) = %q, %v", text, back, err)
		}
	}
}

func TestSpecialTokens(t *testing.T) {
	text := "<|im_start|>user"
	parsed, err := model.Tokenize(text, pulseinfer.TokenizeParseSpecial)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := model.Tokenize(text, pulseinfer.TokenizeAddSpecial)
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed) >= len(plain) {
		t.Errorf("<|im_start|> is not one token when parsed: %v vs %v", parsed, plain)
	}
	if hidden, err := model.Detokenize(parsed, 0); err != nil || hidden != "user" {
		t.Errorf("Detokenize without RenderSpecial = %q, %v", hidden, err)
	}
	if rendered, err := model.Detokenize(parsed, pulseinfer.DetokenizeRenderSpecial); err != nil || rendered != text {
		t.Errorf("Detokenize with RenderSpecial = %q, %v", rendered, err)
	}
	if _, err := model.Detokenize([]int32{1 << 20}, 0); !errors.Is(err, pulseinfer.ErrInvalidArgument) {
		t.Errorf("Detokenize(a token outside the vocabulary) = %v, want ErrInvalidArgument", err)
	}
}

func TestApplyChatTemplate(t *testing.T) {
	text, err := model.ApplyChatTemplate([]pulseinfer.ChatMessage{
		{Role: "system", Content: "Answer briefly."},
		{Role: "user", Content: "What is the capital of France?"},
	}, true)
	want := "<|im_start|>system\nAnswer briefly.<|im_end|>\n" +
		"<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
	if err != nil || text != want {
		t.Errorf("ApplyChatTemplate = %q, %v\nwant %q", text, err, want)
	}
}
