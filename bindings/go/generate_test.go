package pulseinfer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

const prompt = "The capital of France is"

func TestStreamMatchesResult(t *testing.T) {
	s := generateText(t, prompt, greedy(12))
	if len(s.tokens) == 0 || !equal(s.ids(), s.result.Tokens) {
		t.Fatalf("streamed ids %v, result %v", s.ids(), s.result.Tokens)
	}
	detokenized, err := model.Detokenize(s.result.Tokens, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.text() != detokenized || s.result.Text != detokenized {
		t.Errorf("streamed text %q, result text %q, detokenized ids %q", s.text(), s.result.Text, detokenized)
	}
	promptTokens, err := model.Tokenize(prompt, pulseinfer.TokenizeDefault)
	if err != nil {
		t.Fatal(err)
	}
	stats := s.result.Stats
	if int(stats.GeneratedTokens) != len(s.tokens) || int(stats.PromptTokens) != len(promptTokens) ||
		(stats.FinishReason != pulseinfer.FinishMaxTokens && stats.FinishReason != pulseinfer.FinishStopToken) ||
		stats.TimeToFirst <= 0 || stats.Total < stats.TimeToFirst {
		t.Errorf("stats %+v", stats)
	}
}

// Greedy decoding gives the same tokens for a text prompt and its tokens, alone or batched with
// other requests.
func TestGreedyIsDeterministic(t *testing.T) {
	want := generateText(t, prompt, greedy(8)).result.Tokens
	promptTokens, err := model.Tokenize(prompt, pulseinfer.TokenizeDefault)
	if err != nil {
		t.Fatal(err)
	}
	var wait sync.WaitGroup
	for i := 0; i < 3; i++ {
		wait.Add(1)
		go func(i int) {
			defer wait.Done()
			var request *pulseinfer.Request
			var err error
			if i == 0 {
				request, err = engine.Generate(context.Background(), promptTokens, greedy(8))
			} else {
				request, err = engine.GenerateText(context.Background(), prompt, pulseinfer.TokenizeDefault, greedy(8))
			}
			if err != nil {
				t.Error(err)
				return
			}
			if s, err := readAll(request); err != nil || !equal(s.result.Tokens, want) {
				t.Errorf("request %d: %v, %v; want %v", i, s.result.Tokens, err, want)
			}
		}(i)
	}
	wait.Wait()
}

func TestConcurrentGenerations(t *testing.T) {
	before, err := engine.Stats()
	if err != nil {
		t.Fatal(err)
	}
	prompts := []string{"Once upon a time", "def fibonacci(n):", "Water boils at", "My favourite colour is"}
	var wait sync.WaitGroup
	for _, p := range prompts {
		wait.Add(1)
		go func(p string) {
			defer wait.Done()
			sampling := greedy(8)
			sampling.IgnoreEOS = true
			request, err := engine.GenerateText(context.Background(), p, pulseinfer.TokenizeDefault, sampling)
			if err != nil {
				t.Error(err)
				return
			}
			s, err := readAll(request)
			if reason := s.result.Stats.FinishReason; err != nil || len(s.tokens) != 8 || reason != pulseinfer.FinishMaxTokens {
				t.Errorf("%q: %d tokens, %v, %v", p, len(s.tokens), reason, err)
			}
		}(p)
	}
	wait.Wait()
	after, err := engine.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if after.FinishedRequests-before.FinishedRequests != 4 || after.GeneratedTokens-before.GeneratedTokens != 32 ||
		after.Running != 0 || after.Queued != 0 || after.KVBlocksInUse != 0 {
		t.Errorf("engine stats before %+v, after %+v", before, after)
	}
	if after.Steps-before.Steps >= 32 {
		t.Errorf("4 requests of 8 tokens took %d steps: they were not batched", after.Steps-before.Steps)
	}
}

func TestSeededSampling(t *testing.T) {
	sampling := pulseinfer.DefaultSamplingParams()
	sampling.Temperature = 0.9
	sampling.TopK = 40
	sampling.TopP = 0.95
	sampling.MinP = 0.02
	sampling.RepetitionPenalty = 1.1
	sampling.Seed = 42
	sampling.MaxTokens = 8
	first := generateText(t, prompt, &sampling).result.Tokens
	second := generateText(t, prompt, &sampling).result.Tokens
	if len(first) == 0 || !equal(first, second) {
		t.Errorf("the same seed gave %v and %v", first, second)
	}
}

func TestStopString(t *testing.T) {
	full := generateText(t, prompt, greedy(16))
	// A stop string from the middle of the greedy text: the same generation stops just before it.
	var stop string
	for _, token := range full.tokens[2:] {
		if stop = strings.TrimSpace(token.Text); stop != "" {
			break
		}
	}
	if stop == "" {
		t.Fatalf("no token to stop at in %q", full.text())
	}
	sampling := greedy(16)
	sampling.StopStrings = []string{stop}
	s := generateText(t, prompt, sampling)
	want := full.text()[:strings.Index(full.text(), stop)]
	if reason := s.result.Stats.FinishReason; s.text() != want || s.result.Text != want || reason != pulseinfer.FinishStopString {
		t.Errorf("stop %q: streamed %q, result %q, finish %v; want %q", stop, s.text(), s.result.Text, reason, want)
	}
}

func TestStopToken(t *testing.T) {
	full := generateText(t, prompt, greedy(8)).result.Tokens
	sampling := greedy(8)
	sampling.StopTokens = []int32{full[3]}
	got := generateText(t, prompt, sampling).result
	want := full[:indexOf(full, full[3])+1]
	if !equal(got.Tokens, want) || got.Stats.FinishReason != pulseinfer.FinishStopToken {
		t.Errorf("stop token %d: %v (%v), want %v", full[3], got.Tokens, got.Stats.FinishReason, want)
	}
}

func indexOf(tokens []int32, token int32) int {
	for i, t := range tokens {
		if t == token {
			return i
		}
	}
	return -1
}

func TestChat(t *testing.T) {
	chat := []pulseinfer.ChatMessage{{Role: "user", Content: "What is the capital of France?"}}
	text, err := model.ApplyChatTemplate(chat, true)
	if err != nil {
		t.Fatal(err)
	}
	request, err := engine.GenerateText(context.Background(), text, pulseinfer.TokenizeParseSpecial, greedy(8))
	if err != nil {
		t.Fatal(err)
	}
	s, err := readAll(request)
	if err != nil || !strings.Contains(s.result.Text, "Paris") {
		t.Errorf("the chat answer is %q (%v), not about Paris", s.result.Text, err)
	}
}

// GenerateChat is ApplyChatTemplate then GenerateText with TokenizeParseSpecial.
func TestGenerateChatIsItsRenderedTemplate(t *testing.T) {
	chat := []pulseinfer.ChatMessage{{Role: "user", Content: "What is the capital of France?"}}
	text, err := model.ApplyChatTemplate(chat, true)
	if err != nil {
		t.Fatal(err)
	}
	byHand, err := engine.GenerateText(context.Background(), text, pulseinfer.TokenizeParseSpecial, greedy(16))
	if err != nil {
		t.Fatal(err)
	}
	want, err := byHand.Wait()
	if err != nil {
		t.Fatal(err)
	}
	request, err := engine.GenerateChat(context.Background(), chat, greedy(16))
	if err != nil {
		t.Fatal(err)
	}
	got, err := request.Wait()
	if err != nil || fmt.Sprint(got.Tokens) != fmt.Sprint(want.Tokens) || !strings.Contains(got.Text, "Paris") {
		t.Errorf("GenerateChat = %v %q (%v); by hand %v", got.Tokens, got.Text, err, want.Tokens)
	}
}

// GenerateBatch gives each prompt what it gives alone, in order; a refused prompt is an error.
func TestGenerateBatch(t *testing.T) {
	prompts := []string{"Once upon a time", "The capital of France is", "def fibonacci(n):"}
	sampling := greedy(6)
	sampling.IgnoreEOS = true
	var alone []string
	for _, p := range prompts {
		request, err := engine.GenerateText(context.Background(), p, pulseinfer.TokenizeDefault, sampling)
		if err != nil {
			t.Fatal(err)
		}
		result, err := request.Wait()
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, fmt.Sprint(result.Tokens))
	}
	results, err := engine.GenerateBatch(context.Background(), prompts, pulseinfer.TokenizeDefault, sampling)
	if err != nil || len(results) != len(prompts) {
		t.Fatalf("GenerateBatch: %d results, %v", len(results), err)
	}
	for i, result := range results {
		if fmt.Sprint(result.Tokens) != alone[i] || result.Stats.GeneratedTokens != 6 {
			t.Errorf("prompt %d: %v, alone %s", i, result.Tokens, alone[i])
		}
	}
	if _, err := engine.GenerateBatch(context.Background(), []string{"fine", ""}, pulseinfer.TokenizeDefault,
		sampling); !errors.Is(err, pulseinfer.ErrInvalidArgument) {
		t.Errorf("an empty prompt in a batch: %v", err)
	}
}

func TestCancelByContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sampling := greedy(500)
	sampling.IgnoreEOS = true
	request, err := engine.GenerateText(ctx, prompt, pulseinfer.TokenizeDefault, sampling)
	if err != nil {
		t.Fatal(err)
	}
	<-request.Tokens()
	cancel()
	s, err := readAll(request)
	if !errors.Is(err, context.Canceled) || s.result.Stats.FinishReason != pulseinfer.FinishCancelled {
		t.Errorf("Wait() after cancel = %v, finish %v", err, s.result.Stats.FinishReason)
	}
	if n := len(s.result.Tokens); n == 0 || n >= 500 || n != int(s.result.Stats.GeneratedTokens) {
		t.Errorf("a cancelled request has %d tokens, stats %+v", n, s.result.Stats)
	}

	if _, err := engine.GenerateText(ctx, prompt, pulseinfer.TokenizeDefault, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("GenerateText with an ended context = %v, want context.Canceled", err)
	}
}

func TestSubmitErrors(t *testing.T) {
	badTopP := greedy(4)
	badTopP.TopP = 0
	for _, test := range []struct {
		name    string
		submit  func() (*pulseinfer.Request, error)
		message string
	}{
		{"top_p 0", func() (*pulseinfer.Request, error) {
			return engine.GenerateText(context.Background(), prompt, pulseinfer.TokenizeDefault, badTopP)
		}, "top_p"},
		{"an empty prompt", func() (*pulseinfer.Request, error) {
			return engine.Generate(context.Background(), nil, greedy(4))
		}, "empty"},
		{"a token outside the vocabulary", func() (*pulseinfer.Request, error) {
			return engine.Generate(context.Background(), []int32{1, 49152}, greedy(4))
		}, "49152"},
	} {
		request, err := test.submit()
		var libraryErr *pulseinfer.Error
		if request != nil || !errors.Is(err, pulseinfer.ErrInvalidArgument) || !errors.As(err, &libraryErr) ||
			!strings.Contains(libraryErr.Message, test.message) {
			t.Errorf("%s: %v, want ErrInvalidArgument with the library's message about %q", test.name, err, test.message)
		}
	}
}

func TestEngineLifetime(t *testing.T) {
	params := pulseinfer.DefaultEngineParams()
	params.MaxContext = 512
	own, err := pulseinfer.NewEngine(model, &params)
	if err != nil {
		t.Fatal(err)
	}
	if stats, err := own.Stats(); err != nil || stats.Steps != 0 || stats.KVBlocks == 0 {
		t.Errorf("a new engine's stats: %+v, %v", stats, err)
	}
	sampling := greedy(500)
	sampling.IgnoreEOS = true
	request, err := own.GenerateText(context.Background(), prompt, pulseinfer.TokenizeDefault, sampling)
	if err != nil {
		t.Fatal(err)
	}
	<-request.Tokens()
	own.Close()
	own.Close()
	if _, err := readAll(request); !errors.Is(err, pulseinfer.ErrEngineClosed) {
		t.Errorf("a request of a closed engine ended with %v, want ErrEngineClosed", err)
	}
	if _, err := own.Stats(); !errors.Is(err, pulseinfer.ErrEngineClosed) {
		t.Errorf("Stats() after Close = %v", err)
	}
	_, err = own.GenerateText(context.Background(), prompt, pulseinfer.TokenizeDefault, nil)
	if !errors.Is(err, pulseinfer.ErrEngineClosed) {
		t.Errorf("GenerateText after Close = %v", err)
	}

	params.MaxContext = 1 << 20
	_, err = pulseinfer.NewEngine(model, &params)
	if !errors.Is(err, pulseinfer.ErrInvalidArgument) || !strings.Contains(err.Error(), "max_context") {
		t.Errorf("NewEngine(max_context beyond the model's) = %v, want ErrInvalidArgument", err)
	}
}

// Sparse decode attention with a budget that covers the context attends to every token: the same
// greedy tokens as dense attention.
func TestOffloadWithABudgetCoveringTheContext(t *testing.T) {
	want := generateText(t, prompt, greedy(8)).result.Tokens
	for _, mode := range []pulseinfer.OffloadMode{pulseinfer.OffloadSoloHead, pulseinfer.OffloadHeadWise} {
		params := pulseinfer.DefaultEngineParams()
		params.MaxContext = 512
		params.OffloadMode = mode
		params.OffloadBudgetTokens = 4096
		params.OffloadAdmission = pulseinfer.AdmissionOffloadEvery
		sparse, err := pulseinfer.NewEngine(model, &params)
		if err != nil {
			t.Fatal(err)
		}
		request, err := sparse.GenerateText(context.Background(), prompt, pulseinfer.TokenizeDefault, greedy(8))
		if err != nil {
			t.Fatal(err)
		}
		s, err := readAll(request)
		if err != nil || !equal(s.result.Tokens, want) {
			t.Errorf("mode %d: %v, %v; want %v", mode, s.result.Tokens, err, want)
		}
		stats, err := sparse.Stats()
		if err != nil || stats.SparseSelections == 0 || stats.SparseAttendedTokens != stats.SparseContextTokens {
			t.Errorf("mode %d: stats %+v, %v", mode, stats, err)
		}
		sparse.Close()
	}
}

// offloadedParams are the offload settings of tests/unit/capi/abi_generation_test.cc: 8-token
// blocks, a budget covering the context, host and slot tiers of 1024 and 256 tokens, and recall
// (the blocks the request stops keeping resident do not fill the free slots).
func offloadedParams() pulseinfer.EngineParams {
	params := pulseinfer.DefaultEngineParams()
	params.BlockTokens = 8
	params.OffloadMode = pulseinfer.OffloadSoloHead
	params.OffloadBudgetTokens = 1 << 20
	params.OffloadSinkTokens = 8
	params.OffloadWindowTokens = 16
	params.OffloadHostTokens = 1024
	params.OffloadSlotTokens = 256
	params.OffloadAdmission = pulseinfer.AdmissionOffloadEvery
	params.NoFillFreeSlots = true
	return params
}

// An offloading engine with the default admission runs a request that fits the KV cache
// resident, and says so; offloading every request gives the same ids.
func TestAdaptiveAdmissionRunsWhatFitsResident(t *testing.T) {
	tiny := loadTinyModel(t)
	defer tiny.Close()
	dense := pulseinfer.DefaultEngineParams()
	dense.BlockTokens = 8
	want, _ := generate150(t, tiny, &dense)
	adaptive := offloadedParams()
	adaptive.OffloadAdmission = pulseinfer.AdmissionIOAdaptive
	ids, stats := generate150(t, tiny, &adaptive)
	if !equal(ids, want) || stats.AdmittedResident != 1 || stats.AdmittedOffloaded != 0 ||
		stats.SparseSelections != 0 || stats.KVMemoryBytes <= 0 {
		t.Errorf("adaptive: %v, %+v; want %v resident", ids, stats, want)
	}
	every := offloadedParams()
	ids, stats = generate150(t, tiny, &every)
	if !equal(ids, want) || stats.AdmittedResident != 0 || stats.AdmittedOffloaded != 1 ||
		stats.LinkGBPerSecond <= 0 || stats.RecallMBPerRow <= 0 {
		t.Errorf("every: %v, %+v; want %v offloaded", ids, stats, want)
	}
	// A least budget to lower to: nothing is lowered for a request that fits.
	adaptive.OffloadMinBudgetTokens = 16
	ids, stats = generate150(t, tiny, &adaptive)
	if !equal(ids, want) || stats.AdmittedResident != 1 || stats.LoweredBudgets != 0 {
		t.Errorf("least budget: %v, %+v; want %v resident, nothing lowered", ids, stats, want)
	}
}

// An fp8 host tier holds and recalls 528 bytes for each 2048-byte f32 block of the tiny model (16
// bytes of scales, a byte a value); a covering budget recalls the same blocks either way.
func TestAnFP8HostTierMovesFewerBytes(t *testing.T) {
	tiny := loadTinyModel(t)
	defer tiny.Close()
	params := offloadedParams()
	params.KVCapacityTokens = 160
	_, raw := generate150(t, tiny, &params)
	params.OffloadHostCodec = pulseinfer.HostCodecFP8
	ids, fp8 := generate150(t, tiny, &params)
	if len(ids) != 12 || raw.RecallBytes <= 0 || raw.RecallBytes*528 != fp8.RecallBytes*2048 ||
		raw.WritebackBytes*528 != fp8.WritebackBytes*2048 {
		t.Errorf("fp8: %d ids, %+v against raw %+v", len(ids), fp8, raw)
	}
}

// generate150 returns 12 greedy ids after a 150-token prompt (or after each of `prompts`, one
// after another in one engine: the last one's), and the engine's stats after them.
func generate150(t *testing.T, tiny *pulseinfer.Model, params *pulseinfer.EngineParams,
	prompts ...[]int32) ([]int32, pulseinfer.EngineStats) {
	t.Helper()
	e, err := pulseinfer.NewEngine(tiny, params)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sampling := greedy(12)
	sampling.IgnoreEOS = true
	if len(prompts) == 0 {
		prompts = [][]int32{prompt150(0)}
	}
	var ids []int32
	for _, prompt := range prompts {
		request, err := e.Generate(context.Background(), prompt, sampling)
		if err != nil {
			t.Fatal(err)
		}
		s, err := readAll(request)
		if err != nil {
			t.Fatal(err)
		}
		ids = s.result.Tokens
	}
	stats, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return ids, stats
}

// A prefix cache: a prompt that starts with a finished one's 18 full blocks shares them, skips
// their prefill and generates the ids it generates without the cache.
func TestAPrefixCacheSharesAFinishedPrompt(t *testing.T) {
	tiny := loadTinyModel(t)
	defer tiny.Close()
	longer := append(prompt150(0), prompt150(0)[:10]...)
	params := offloadedParams()
	params.KVCapacityTokens = 160
	params.OffloadBudgetTokens = 64
	unshared, off := generate150(t, tiny, &params, prompt150(0), longer)
	params.OffloadPrefixCache = true
	shared, on := generate150(t, tiny, &params, prompt150(0), longer)
	if !equal(shared, unshared) || len(shared) != 12 {
		t.Errorf("shared %v, unshared %v", shared, unshared)
	}
	if off.PrefixHits != 0 || on.PrefixHits != 1 || on.PrefixHitTokens != 144 ||
		on.PrefillTokens != off.PrefillTokens-144 {
		t.Errorf("with the cache %+v, without %+v", on, off)
	}
}

// prompt150 is 150 ids of the tiny vocabulary, from the `shift`-th on.
func prompt150(shift int) []int32 {
	prompt := make([]int32, 150)
	for i := range prompt {
		prompt[i] = int32(3 + ((i+shift)*37)%297)
	}
	return prompt
}

// Two offloaded requests at once at a budget that selects, their decode steps split into two
// micro-batches: the ids of one micro-batch, and the stats count the split steps.
func TestMicroBatchesGiveTheIdsOfOne(t *testing.T) {
	tiny := loadTinyModel(t)
	defer tiny.Close()
	run := func(count int32) ([][]int32, pulseinfer.EngineStats) {
		params := offloadedParams()
		params.OffloadBudgetTokens = 48
		params.MicroBatches = count
		e, err := pulseinfer.NewEngine(tiny, &params)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		sampling := greedy(12)
		sampling.IgnoreEOS = true
		var requests []*pulseinfer.Request
		for shift := 0; shift < 2; shift++ {
			request, err := e.Generate(context.Background(), prompt150(shift), sampling)
			if err != nil {
				t.Fatal(err)
			}
			requests = append(requests, request)
		}
		var ids [][]int32
		for _, request := range requests {
			s, err := readAll(request)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, s.result.Tokens)
		}
		stats, err := e.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return ids, stats
	}
	one, oneStats := run(1)
	two, twoStats := run(2)
	for i := range one {
		if !equal(two[i], one[i]) {
			t.Errorf("request %d: %v with two micro-batches, %v with one", i, two[i], one[i])
		}
	}
	if oneStats.SplitSteps != 0 || twoStats.SplitSteps == 0 || twoStats.SparseAttendedTokens >= twoStats.SparseContextTokens {
		t.Errorf("stats: one %+v, two %+v", oneStats, twoStats)
	}
}

// Offloaded KV in a cache smaller than the request, with a budget covering the context, gives the
// dense tokens with every copy executor and eviction policy.
func TestOffloadedKVSmallerThanTheRequest(t *testing.T) {
	tiny := loadTinyModel(t)
	defer tiny.Close()
	dense := pulseinfer.DefaultEngineParams()
	dense.BlockTokens = 8
	want, _ := generate150(t, tiny, &dense)
	for _, executor := range []pulseinfer.CopyExecutor{
		pulseinfer.CopyAuto, pulseinfer.CopyGather, pulseinfer.CopyBatchDMA, pulseinfer.CopyPerChunk,
	} {
		for _, eviction := range []pulseinfer.Eviction{pulseinfer.EvictLRU, pulseinfer.EvictScore} {
			params := offloadedParams()
			params.KVCapacityTokens = 160 // the prompt fits, the 161 tokens of KV it reaches do not
			params.OffloadExecutor = executor
			params.OffloadEviction = eviction
			ids, stats := generate150(t, tiny, &params)
			if len(want) != 12 || !equal(ids, want) {
				t.Errorf("executor %d, eviction %d: %v; want %v", executor, eviction, ids, want)
			}
			if stats.HostBlocks != 1024/8 || stats.SlotBlocks != 256/8 || stats.WritebackBytes == 0 ||
				stats.RecallBytes == 0 || stats.RecallTransfers == 0 || stats.RecallPlans == 0 ||
				stats.SlotHits == 0 || stats.SelectionTime <= 0 || stats.HostBlocksInUse != 0 ||
				stats.SlotBlocksInUse != 0 {
				t.Errorf("executor %d, eviction %d: stats %+v", executor, eviction, stats)
			}
		}
	}
}

// Boxes of 4 tokens rounded to int8, and one box a token rounded to bf16, select blocks too: with
// a budget covering the context, the dense tokens.
func TestEverySummaryEstimatorGenerates(t *testing.T) {
	tiny := loadTinyModel(t)
	defer tiny.Close()
	dense := pulseinfer.DefaultEngineParams()
	dense.BlockTokens = 8
	want, _ := generate150(t, tiny, &dense)
	if defaults := pulseinfer.DefaultEngineParams(); defaults.OffloadSummaryBoxes != 0 ||
		defaults.OffloadSummaryPrecision != pulseinfer.SummaryInt4 {
		t.Errorf("DefaultEngineParams() = %+v, want one box a token at int4", defaults)
	}
	for _, test := range []struct {
		boxes     int32
		precision pulseinfer.SummaryPrecision
	}{{4, pulseinfer.SummaryInt8}, {0, pulseinfer.SummaryBF16}, {0, pulseinfer.SummaryInt4}} {
		params := offloadedParams()
		params.OffloadSummaryBoxes = test.boxes
		params.OffloadSummaryPrecision = test.precision
		ids, stats := generate150(t, tiny, &params)
		if !equal(ids, want) || stats.SparseSelections == 0 {
			t.Errorf("%d boxes, precision %d: %v (%d selections); want %v", test.boxes,
				test.precision, ids, stats.SparseSelections, want)
		}
	}
}

// A request of an offloading engine runs densely, or with its own budget, when it asks; another
// mode than the engine's, or a selection on an engine without offloading, is refused.
func TestARequestChoosesItsOffloadingWithinItsEngines(t *testing.T) {
	tiny := loadTinyModel(t)
	defer tiny.Close()
	dense := pulseinfer.DefaultEngineParams()
	dense.BlockTokens = 8
	want, _ := generate150(t, tiny, &dense)
	params := offloadedParams()
	params.OffloadBudgetTokens = 48
	e, err := pulseinfer.NewEngine(tiny, &params)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	plain, err := pulseinfer.NewEngine(tiny, &dense)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	prompt := make([]int32, 150)
	for i := range prompt {
		prompt[i] = int32(3 + (i*37)%297)
	}
	covering := int32(1 << 20)
	run := func(target *pulseinfer.Engine, offload pulseinfer.RequestOffload,
		budget *int32) ([]int32, error) {
		sampling := greedy(12)
		sampling.IgnoreEOS = true
		sampling.Offload = offload
		sampling.OffloadBudgetTokens = budget
		request, err := target.Generate(context.Background(), prompt, sampling)
		if err != nil {
			return nil, err
		}
		s, err := readAll(request)
		return s.result.Tokens, err
	}
	for _, test := range []struct {
		offload pulseinfer.RequestOffload
		budget  *int32
	}{{pulseinfer.RequestOffloadDense, nil}, {pulseinfer.RequestOffloadEngine, &covering},
		{pulseinfer.RequestOffloadSoloHead, &covering}} {
		if ids, err := run(e, test.offload, test.budget); err != nil || !equal(ids, want) {
			t.Errorf("offload %d: %v, %v; want %v", test.offload, ids, err, want)
		}
	}
	if _, err := run(e, pulseinfer.RequestOffloadHeadWise, nil); !errors.Is(err, pulseinfer.ErrInvalidArgument) {
		t.Errorf("a head-wise request of a solohead engine: %v, want ErrInvalidArgument", err)
	}
	if _, err := run(plain, pulseinfer.RequestOffloadSoloHead, nil); !errors.Is(err, pulseinfer.ErrFailedPrecondition) {
		t.Errorf("an offloaded request of a dense engine: %v, want ErrFailedPrecondition", err)
	}
}

func TestBadOffloadSettingsAreRefusedByName(t *testing.T) {
	tiny := loadTinyModel(t)
	defer tiny.Close()
	for _, test := range []struct {
		field string
		set   func(*pulseinfer.EngineParams)
	}{
		{"offload_executor", func(p *pulseinfer.EngineParams) { p.OffloadExecutor = 9 }},
		{"offload_eviction", func(p *pulseinfer.EngineParams) { p.OffloadEviction = -1 }},
		{"offload_host_tokens", func(p *pulseinfer.EngineParams) { p.OffloadHostTokens = -5 }},
		{"offload_summary_radius", func(p *pulseinfer.EngineParams) { p.OffloadSummaryRadius = 1.5 }},
		{"offload_summary_boxes", func(p *pulseinfer.EngineParams) { p.OffloadSummaryBoxes = 3 }},
		{"offload_summary_boxes", func(p *pulseinfer.EngineParams) { p.OffloadSummaryBoxes = -1 }},
		{"offload_summary_precision", func(p *pulseinfer.EngineParams) { p.OffloadSummaryPrecision = 7 }},
	} {
		params := offloadedParams()
		test.set(&params)
		e, err := pulseinfer.NewEngine(tiny, &params)
		if err == nil {
			e.Close()
		}
		if !errors.Is(err, pulseinfer.ErrInvalidArgument) || !strings.Contains(err.Error(), test.field) {
			t.Errorf("NewEngine(a bad %s) = %v, want ErrInvalidArgument naming it", test.field, err)
		}
	}
}

// Requests submitted while the engine steps with nothing to do (woken by an earlier submit) are
// scheduled by the next step: such a step is no failure. Probabilistic: before the fix, a few of
// these requests failed with "a step scheduled nothing while N requests are pending" in most runs.
func TestSubmitsDuringAnIdleStep(t *testing.T) {
	tiny := loadTinyModel(t)
	defer tiny.Close()
	e, err := pulseinfer.NewEngine(tiny, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var wait sync.WaitGroup
	for g := 0; g < 4; g++ {
		wait.Add(1)
		go func() {
			defer wait.Done()
			sampling := greedy(1)
			sampling.IgnoreEOS = true
			for i := 0; i < 2500; i++ {
				request, err := e.Generate(context.Background(), []int32{5, 6}, sampling)
				if err == nil {
					_, err = request.Wait()
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wait.Wait()
}

// The tiny model split over two ranks gives the one-rank model's ids, offloaded with a budget that
// selects; a rank count the model cannot split is refused.
func TestTwoRanksGiveTheIdsOfOne(t *testing.T) {
	one := loadTinyModel(t)
	defer one.Close()
	split := pulseinfer.DefaultModelParams()
	split.RandomWeights = true
	split.RandomSeed = 7
	split.Threads = 2
	split.TensorParallelSize = 2
	two, err := pulseinfer.LoadModel(tinyConfig, &split)
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	if two.Info().TensorParallelSize != 2 || one.Info().TensorParallelSize != 1 {
		t.Errorf("ranks: %d and %d", two.Info().TensorParallelSize, one.Info().TensorParallelSize)
	}
	run := func(model *pulseinfer.Model) []int32 {
		params := offloadedParams()
		params.OffloadBudgetTokens = 48
		e, err := pulseinfer.NewEngine(model, &params)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		sampling := greedy(12)
		sampling.IgnoreEOS = true
		request, err := e.Generate(context.Background(), prompt150(0), sampling)
		if err != nil {
			t.Fatal(err)
		}
		s, err := readAll(request)
		if err != nil {
			t.Fatal(err)
		}
		return s.result.Tokens
	}
	if ids, want := run(two), run(one); !equal(ids, want) {
		t.Errorf("%v over two ranks, %v over one", ids, want)
	}
	split.TensorParallelSize = 3
	if _, err := pulseinfer.LoadModel(tinyConfig, &split); !errors.Is(err, pulseinfer.ErrInvalidArgument) {
		t.Errorf("three ranks of two KV heads: %v", err)
	}
}
