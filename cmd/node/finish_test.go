package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// An answer the provider cut at its output limit fails node run (exit 1) with
// output_truncated, streamed or not: the finish reason goes through the provider
// client, the gateway and the effect path to the decision. Before, the task
// completed with the cut text and exit 0.
func TestRunFailsACutAnswer(t *testing.T) {
	for _, stream := range []string{"on", "off"} {
		t.Run("stream "+stream, func(t *testing.T) {
			srv := openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
				u := messages.Usage{PromptTokens: 30, CompletionTokens: 16}
				if stream == "on" {
					return openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("Twelve times twelve is one hun"),
						openaitest.FinishChunk("length"), openaitest.UsageChunk(u), openaitest.Done)
				}
				body := openaitest.CompletionJSON(messages.ChatMessage{Content: "Twelve times twelve is one hun"}, u)
				return openaitest.Reply{Body: strings.Replace(body, `"finish_reason":"stop"`, `"finish_reason":"length"`, 1)}
			})
			for _, v := range []string{"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "DASHSCOPE_API_KEY", "ZHIPU_API_KEY", "MOONSHOT_API_KEY", "SILICONFLOW_API_KEY", "MODELSCOPE_API_KEY", "TROUPE_LLM_PROVIDER", "TROUPE_STREAM"} {
				t.Setenv(v, "")
			}
			t.Setenv("LLM_API_KEY", "sk-troupe-test-finish")
			t.Setenv("LLM_BASE_URL", srv.URL+"/v1")
			t.Setenv("LLM_MODEL", "fake-model")
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--stream", stream, "What is 12*12?"}, &out, &errb, options{})
			if code != 1 || !strings.Contains(out.String(), "failed (output_truncated): the model's answer reached its output token limit and was cut after 30 characters") {
				t.Fatalf("run: exit %d\n%s\n%s", code, out.String(), errb.String())
			}
		})
	}
}

// An answer a provider ended with a word of its own (Gemini's safety, recitation,
// malformed_function_call through its OpenAI-compatible endpoint, in capitals
// as its own API says them) fails node run (exit 1), streamed or not: a filter's
// word with content_filter, another with answer_unfinished. "STOP" is a whole
// answer, in whatever case.
func TestRunFailsAnAnswerTheProviderEnded(t *testing.T) {
	for _, c := range []struct{ finish, content, want string }{
		{"safety", "", `failed (content_filter): the provider's content filter stopped the model's answer (finish_reason "safety")`},
		{"RECITATION", "It was the best of times", `failed (content_filter): the provider's content filter stopped the model's answer (finish_reason "RECITATION"): It was the best of times`},
		{"malformed_function_call", "", `failed (answer_unfinished): the provider ended the model's answer before it was finished (finish_reason "malformed_function_call")`},
		{"STOP", "144", "144"},
	} {
		for _, stream := range []string{"on", "off"} {
			t.Run(c.finish+" stream "+stream, func(t *testing.T) {
				srv := openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
					u := messages.Usage{PromptTokens: 30, CompletionTokens: 16}
					if stream == "on" {
						chunks := []string{openaitest.RoleChunk()}
						if c.content != "" {
							chunks = append(chunks, openaitest.ContentChunk(c.content))
						}
						return openaitest.Stream(append(chunks, openaitest.FinishChunk(c.finish), openaitest.UsageChunk(u), openaitest.Done)...)
					}
					body := openaitest.CompletionJSON(messages.ChatMessage{Content: c.content}, u)
					return openaitest.Reply{Body: strings.Replace(body, `"finish_reason":"stop"`, `"finish_reason":"`+c.finish+`"`, 1)}
				})
				for _, v := range []string{"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "DASHSCOPE_API_KEY", "ZHIPU_API_KEY", "MOONSHOT_API_KEY", "SILICONFLOW_API_KEY", "MODELSCOPE_API_KEY", "TROUPE_LLM_PROVIDER", "TROUPE_STREAM"} {
					t.Setenv(v, "")
				}
				t.Setenv("LLM_API_KEY", "sk-troupe-test-finish")
				t.Setenv("LLM_BASE_URL", srv.URL+"/v1")
				t.Setenv("LLM_MODEL", "fake-model")
				var out, errb bytes.Buffer
				code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--stream", stream, "Tell me a story."}, &out, &errb, options{})
				wantCode := 1
				if c.finish == "STOP" {
					wantCode = 0
				}
				if code != wantCode || !strings.Contains(out.String(), c.want) {
					t.Fatalf("run: exit %d, want %d saying %q\n%s\n%s", code, wantCode, c.want, out.String(), errb.String())
				}
			})
		}
	}
}
