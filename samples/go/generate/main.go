// Command generate streams the greedy continuation of a prompt, with the command line that every
// sample of this repository shares:
//
//	generate --model PATH --prompt TEXT [--max-tokens N] [--ids]
//
// --ids prints the generated token ids, comma-separated, instead of the text.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	pulseinfer "github.com/libpulseinfer/libpulseinfer/bindings/go"
)

func main() {
	modelPath := flag.String("model", "", "the model: a GGUF file or a Hugging Face directory")
	prompt := flag.String("prompt", "", "the prompt, as plain text")
	maxTokens := flag.Int("max-tokens", 32, "the most tokens to generate")
	printIDs := flag.Bool("ids", false, "print the generated token ids, comma-separated")
	flag.Parse()
	if *modelPath == "" || *prompt == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := generate(ctx, *modelPath, *prompt, int32(*maxTokens), *printIDs); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

func generate(ctx context.Context, modelPath, prompt string, maxTokens int32, printIDs bool) error {
	model, err := pulseinfer.LoadModel(modelPath, nil)
	if err != nil {
		return err
	}
	defer model.Close()
	engine, err := pulseinfer.NewEngine(model, nil)
	if err != nil {
		return err
	}
	defer engine.Close()

	sampling := pulseinfer.DefaultSamplingParams()
	sampling.Temperature = 0
	sampling.MaxTokens = maxTokens
	request, err := engine.GenerateText(ctx, prompt, pulseinfer.TokenizeDefault, &sampling)
	if err != nil {
		return err
	}
	separator := ""
	for token := range request.Tokens() {
		if printIDs {
			fmt.Printf("%s%d", separator, token.ID)
			separator = ","
		} else {
			fmt.Print(token.Text)
		}
	}
	fmt.Println()
	_, err = request.Wait()
	return err
}
