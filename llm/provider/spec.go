package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/troupe-run/troupe/llm"
)

// FromSpec turns a model spec into a model and a sentence saying why it was chosen:
//
//	auto              provider auto-detection (keys in the environment, a local
//	                  Ollama or vLLM, else the offline model)
//	offline           the offline rule-based planner
//	scripted:FILE     a script of responses
//	PROVIDER[:MODEL]  a named provider (openai, deepseek, qwen, zhipu, moonshot,
//	                  siliconflow, modelscope, ollama, vllm), optionally with a model
//
// It also returns the API key the model uses, so that it can be redacted from events.
func FromSpec(ctx context.Context, spec string, base Config, env func(string) string) (llm.Model, string, string, error) {
	switch {
	case spec == "offline":
		return llm.Offline{}, "the offline rule-based model (--model offline)", "", nil
	case strings.HasPrefix(spec, "scripted:"):
		m, err := llm.FromSpec(spec)
		return m, "a scripted model (" + spec + ")", "", err
	case spec == "" || spec == "auto":
	default:
		name, model, _ := strings.Cut(spec, ":")
		if _, ok := Lookup(name); !ok {
			return nil, "", "", fmt.Errorf("unknown model %q: use auto, offline, scripted:FILE or PROVIDER[:MODEL]", spec)
		}
		base.Provider = name
		if model != "" {
			base.Model = model
		}
	}
	r, err := Detect(ctx, base, env, nil)
	if err != nil {
		return nil, "", "", err
	}
	m, err := r.NewModel()
	if err != nil {
		return nil, "", "", err
	}
	return m, r.Reason, r.APIKey, nil
}
