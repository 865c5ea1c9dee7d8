package pulseinfer

// #include <pulseinfer/pulseinfer.h>
import "C"

import "runtime"

// TokenizeFlags are the options of Tokenize and Engine.GenerateText.
type TokenizeFlags uint32

const (
	// TokenizeAddSpecial adds BOS (and EOS) as the tokenizer does.
	TokenizeAddSpecial TokenizeFlags = C.PULSE_TOKENIZE_ADD_SPECIAL
	// TokenizeParseSpecial encodes special tokens written in the text ("<|im_start|>") as
	// themselves. Alone, it is the flag for the output of ApplyChatTemplate.
	TokenizeParseSpecial TokenizeFlags = C.PULSE_TOKENIZE_PARSE_SPECIAL
	// TokenizeDefault is the flag for plain text.
	TokenizeDefault TokenizeFlags = C.PULSE_TOKENIZE_DEFAULT
)

// DetokenizeFlags are the options of Detokenize.
type DetokenizeFlags uint32

// DetokenizeRenderSpecial writes control tokens (<|im_end|>, <s>) as their text instead of
// nothing.
const DetokenizeRenderSpecial DetokenizeFlags = C.PULSE_DETOKENIZE_RENDER_SPECIAL

// Tokenize encodes text with the model's tokenizer. Any bytes are accepted; those the
// vocabulary can represent (directly or by byte fallback) come back from Detokenize, others
// are dropped as Hugging Face tokenizers drops them (see pulse_tokenize in pulseinfer.h).
func (m *Model) Tokenize(text string, flags TokenizeFlags) ([]int32, error) {
	defer runtime.KeepAlive(m)
	var memory cMemory
	defer memory.free()
	cText := memory.string(text)
	return readTokens(len(text)+2, func(tokens *C.int32_t, capacity C.size_t, count *C.size_t) C.pulse_status {
		return C.pulse_tokenize(m.model, cText, C.size_t(len(text)), C.uint32_t(flags), tokens, capacity, count)
	})
}

// Detokenize decodes tokens into text.
func (m *Model) Detokenize(tokens []int32, flags DetokenizeFlags) (string, error) {
	defer runtime.KeepAlive(m)
	return readText(8*len(tokens), func(text *C.char, capacity C.size_t, length *C.size_t) C.pulse_status {
		return C.pulse_detokenize(m.model, tokenArray(tokens), C.size_t(len(tokens)), C.uint32_t(flags),
			text, capacity, length)
	})
}

// ChatMessage is one message of a conversation.
type ChatMessage struct {
	Role    string // "system", "user" or "assistant"
	Content string
}

// ApplyChatTemplate formats messages with the model's chat template exactly as the template
// renders them; addGenerationPrompt ends the text with the assistant's header. Generate from it
// with GenerateText and TokenizeParseSpecial. Errors: ErrNotFound (no chat template),
// ErrUnsupported (a template the library does not render), ErrInvalidArgument (a conversation
// the template refuses).
func (m *Model) ApplyChatTemplate(messages []ChatMessage, addGenerationPrompt bool) (string, error) {
	defer runtime.KeepAlive(m)
	var memory cMemory
	defer memory.free()
	cMessages := memory.chatMessages(messages)
	guess := 256
	for _, message := range messages {
		guess += len(message.Content)
	}
	return readText(guess, func(text *C.char, capacity C.size_t, length *C.size_t) C.pulse_status {
		return C.pulse_chat_apply_template(m.model, cMessages, C.size_t(len(messages)),
			C.int32_t(boolInt(addGenerationPrompt)), text, capacity, length)
	})
}
