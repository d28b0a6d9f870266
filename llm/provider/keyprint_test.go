package provider_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/messages"
)

// A distinctive key: if it shows up anywhere below, it leaked.
const secret = "sk-troupe-LEAK-CANARY-5b1e0c9d7a"

func TestKeyNeverPrinted(t *testing.T) {
	// A provider that echoes the key in its errors.
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Error(401, "Incorrect API key provided: "+secret+" (Bearer "+secret+")")
	})
	var out bytes.Buffer
	text := slog.New(slog.NewTextHandler(&out, nil))
	jsonLog := slog.New(slog.NewJSONHandler(&out, nil))

	cfg, err := provider.Load("", envOf("LLM_API_KEY", secret, "LLM_BASE_URL", srv.URL, "LLM_MODEL", "m", "LLM_EMBEDDING_MODEL", "e"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := provider.Detect(deadline(t), cfg, envOf("LLM_API_KEY", secret), noLocal())
	if err != nil {
		t.Fatal(err)
	}
	if r.APIKey != secret {
		t.Fatal("the key must still be usable")
	}
	m, err := r.NewModel()
	if err != nil {
		t.Fatal(err)
	}
	_, genErr := m.Generate(deadline(t), llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}})
	if genErr == nil {
		t.Fatal("expected a 401")
	}
	e, err := r.NewEmbedder()
	if err != nil {
		t.Fatal(err)
	}
	_, embErr := e.Embed(deadline(t), []string{"x"})

	// Detection errors must not carry the key either.
	_, detErr := provider.Detect(deadline(t), provider.DefaultConfig(),
		envOf("LLM_API_KEY", secret, "LLM_BASE_URL", "https://llm.internal.example/v1"), noLocal())
	if detErr == nil {
		t.Fatal("expected an error: no model for an unknown host")
	}

	values := []any{r, &r, cfg, &cfg, m, e, genErr, embErr, detErr, []provider.Resolved{r}, struct{ R provider.Resolved }{r}}
	for _, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
		text.Info("value", "v", v)
		jsonLog.Info("value", "v", v)
		b, _ := json.Marshal(v)
		out.Write(b)
	}
	out.WriteString(r.String() + cfg.String() + genErr.Error() + embErr.Error() + detErr.Error())
	if strings.Contains(out.String(), secret) {
		t.Fatalf("the key leaked:\n%s", out.String())
	}
	for _, want := range []string{"[REDACTED]", "api_key_set=true", "provider=openai-compatible"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
