package provider_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/messages"
)

// keyServer is a fake provider at a host no provider owns; it records the
// Authorization header of every request.
func keyServer(t *testing.T) (*openaitest.Server, string) {
	t.Helper()
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Completion(messages.ChatMessage{Content: "ok"}, messages.Usage{PromptTokens: 1, CompletionTokens: 1})
	})
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return srv, u.Host
}

// resolveAndCall is what a node does with its configuration: Load the file, resolve
// the model spec, and call the model once.
func resolveAndCall(t *testing.T, file, spec string, env func(string) string) (why string, err error) {
	t.Helper()
	path := ""
	if file != "" {
		path = writeFile(t, file)
	}
	cfg, err := provider.Load(path, env)
	if err != nil {
		return "", err
	}
	m, why, _, err := provider.FromSpec(deadline(t), spec, cfg, env)
	if err != nil {
		return "", err
	}
	_, err = m.Generate(deadline(t), llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}})
	return why, err
}

// A provider's key goes only to that provider's hosts. A base URL that belongs to no
// provider gets a key only when the user paired the two: LLM_API_KEY with
// LLM_BASE_URL, or llm.api_key_env beside llm.base_url in the config file. Anything
// else is refused with an error that names the variable and the host.
func TestKeyGoesOnlyToItsOwnHostOrWhereTheUserPairedIt(t *testing.T) {
	srv, host := keyServer(t)
	const openaiKey = "sk-openai-0123456789abcdefOPENAI"
	const generic = "generic-key-0123456789abcdef"
	const house = "house-key-0123456789abcdef"

	refused := []struct {
		name, file, spec string
		env              []string
		names            string // the variable the error must name
	}{
		{"config file base_url with model openai", `{"llm": {"base_url": "` + srv.URL + `"}}`, "openai",
			[]string{"OPENAI_API_KEY", openaiKey}, "OPENAI_API_KEY"},
		{"config file provider and base_url", `{"llm": {"provider": "openai", "base_url": "` + srv.URL + `"}}`, "auto",
			[]string{"OPENAI_API_KEY", openaiKey}, "OPENAI_API_KEY"},
		{"provider and base URL from the environment", "", "auto",
			[]string{"TROUPE_LLM_PROVIDER", "openai", "LLM_BASE_URL", srv.URL, "OPENAI_API_KEY", openaiKey}, "OPENAI_API_KEY"},
		{"named provider with a base URL", "", "openai",
			[]string{"LLM_BASE_URL", srv.URL, "OPENAI_API_KEY", openaiKey}, "OPENAI_API_KEY"},
		{"generic key with the config file's base_url", `{"llm": {"base_url": "` + srv.URL + `", "model": "m"}}`, "auto",
			[]string{"LLM_API_KEY", generic}, "LLM_API_KEY"},
		{"api_key_env paired with another base_url", `{"llm": {"base_url": "https://llm.internal.example/v1", "api_key_env": "HOUSE_KEY", "model": "m"}}`, "auto",
			[]string{"LLM_BASE_URL", srv.URL, "HOUSE_KEY", house}, "HOUSE_KEY"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			before := len(srv.Requests())
			_, err := resolveAndCall(t, c.file, c.spec, envOf(c.env...))
			for _, r := range srv.Requests()[before:] {
				if a := r.Header.Get("Authorization"); a != "" {
					t.Fatalf("the foreign host received a key: %q", a)
				}
			}
			if !errors.Is(err, provider.ErrKeyNotPaired) {
				t.Fatalf("want ErrKeyNotPaired, got %v", err)
			}
			for _, want := range []string{c.names, host} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not name %q: %v", want, err)
				}
			}
			for _, v := range []string{openaiKey, generic, house} {
				if strings.Contains(err.Error(), v) {
					t.Fatalf("error carries a key: %v", err)
				}
			}
		})
	}

	paired := []struct {
		name, file, spec string
		env              []string
		key, from        string
	}{
		{"LLM_API_KEY with LLM_BASE_URL", "", "auto",
			[]string{"LLM_API_KEY", generic, "LLM_BASE_URL", srv.URL, "LLM_MODEL", "m", "OPENAI_API_KEY", openaiKey}, generic, "LLM_API_KEY"},
		{"LLM_API_KEY with LLM_BASE_URL for a named provider", "", "openai",
			[]string{"LLM_API_KEY", generic, "LLM_BASE_URL", srv.URL, "OPENAI_API_KEY", openaiKey}, generic, "LLM_API_KEY"},
		{"api_key_env beside base_url", `{"llm": {"base_url": "` + srv.URL + `", "api_key_env": "HOUSE_KEY", "model": "m"}}`, "auto",
			[]string{"HOUSE_KEY", house, "OPENAI_API_KEY", openaiKey}, house, "HOUSE_KEY"},
		{"api_key_env naming a provider's variable", `{"llm": {"provider": "openai", "base_url": "` + srv.URL + `", "api_key_env": "OPENAI_API_KEY"}}`, "auto",
			[]string{"OPENAI_API_KEY", openaiKey}, openaiKey, "OPENAI_API_KEY"},
	}
	for _, c := range paired {
		t.Run(c.name, func(t *testing.T) {
			before := len(srv.Requests())
			why, err := resolveAndCall(t, c.file, c.spec, envOf(c.env...))
			if err != nil {
				t.Fatal(err)
			}
			reqs := srv.Requests()[before:]
			if len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer "+c.key {
				t.Fatalf("the paired host did not receive its key: %d requests", len(reqs))
			}
			// The startup line says which variable goes to which host, never the value.
			if want := c.from + " is sent to " + host; !strings.Contains(why, want) {
				t.Errorf("%q does not say %q", why, want)
			}
			if strings.Contains(why, c.key) {
				t.Fatalf("the reason carries the key: %s", why)
			}
		})
	}
}

// A base URL that belongs to no provider, with no key paired with it, gets no key,
// and the reason says where the provider keys do go.
func TestForeignBaseURLWithoutPairedKeyGetsNone(t *testing.T) {
	srv, host := keyServer(t)
	env := envOf("OPENAI_API_KEY", "sk-openai-0123456789abcdefOPENAI")
	why, err := resolveAndCall(t, `{"llm": {"base_url": "`+srv.URL+`", "model": "m"}}`, "auto", env)
	if err != nil {
		t.Fatal(err)
	}
	if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "" {
		t.Fatalf("want one request without a key: %+v", reqs)
	}
	for _, want := range []string{"no API key is sent to " + host, "OPENAI_API_KEY is only sent to api.openai.com"} {
		if !strings.Contains(why, want) {
			t.Errorf("%q does not say %q", why, want)
		}
	}
}

// A fallback names a provider: it runs at that provider's own URL with that
// provider's own key variable. The primary model's LLM_BASE_URL, LLM_API_KEY and
// LLM_MODEL are not its to use.
func TestFallbackUsesItsOwnProviderAndKey(t *testing.T) {
	srv, host := keyServer(t)
	env := envOf("LLM_API_KEY", "generic-key-0123456789abcdef", "LLM_BASE_URL", srv.URL, "LLM_MODEL", "house",
		"OPENAI_API_KEY", "sk-openai-0123456789abcdefOPENAI", "TROUPE_LLM_PROVIDER", "openai-compatible")
	m, why, key, err := provider.FallbackFromSpec(deadline(t), "openai", env)
	if err != nil {
		t.Fatal(err)
	}
	if key != "sk-openai-0123456789abcdefOPENAI" || m.Name() != "gpt-4o-mini" {
		t.Fatalf("fallback openai: model %s, wrong key", m.Name())
	}
	if !strings.Contains(why, "OPENAI_API_KEY is sent to api.openai.com") || strings.Contains(why, host) {
		t.Fatalf("fallback reason: %s", why)
	}
	// A fallback whose provider's variable is unset does not borrow the primary's key.
	if _, _, _, err := provider.FallbackFromSpec(deadline(t), "deepseek", env); err == nil || !strings.Contains(err.Error(), "DEEPSEEK_API_KEY") {
		t.Fatalf("fallback deepseek without DEEPSEEK_API_KEY: %v", err)
	}
	if len(srv.Requests()) != 0 {
		t.Fatal("a fallback was sent to the primary's host")
	}
}

// Secrets lists every key in the environment, whichever model runs: each provider's
// variable, LLM_API_KEY and the variable llm.api_key_env names, even when
// LLM_API_KEY overrides it.
func TestSecretsListsEveryKeyVariable(t *testing.T) {
	kv := []string{"LLM_API_KEY", "v-generic", "HOUSE_KEY", "v-house", "UNRELATED", "v-unrelated"}
	for _, name := range provider.KeyVars() {
		kv = append(kv, name, "v-"+name)
	}
	env := envOf(kv...)
	cfg, err := provider.Load(writeFile(t, `{"llm": {"api_key_env": "HOUSE_KEY"}}`), env)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(cfg.Secrets(env), " ")
	for i := 1; i < len(kv); i += 2 {
		if want := kv[i] != "v-unrelated"; strings.Contains(got, kv[i]) != want {
			t.Errorf("Secrets() = %s: %s listed: %v", got, kv[i-1], !want)
		}
	}
	if n := len(provider.KeyVars()); n != 7 {
		t.Fatalf("%d key variables: %v", n, provider.KeyVars())
	}
}

// A fallback ends each request when the primary model does: through the primary's
// Config.TimeoutEnv it gets the config file's llm.timeout, or the longer one a node
// put there, and nothing else of the primary's: a fallback of another provider keeps
// its own base URL and key variable, and one without its key gets none.
func TestFallbackTakesThePrimaryTimeoutOnly(t *testing.T) {
	srv, _ := keyServer(t)
	env := envOf("HOUSE_KEY", "house-key-0123456789abcdefHOUSE", "OPENAI_API_KEY", "sk-openai-0123456789abcdefOPENAI")
	cfg, err := provider.Load(writeFile(t, `{"llm": {"provider": "openai-compatible", "base_url": "`+srv.URL+`",
		"model": "house", "api_key_env": "HOUSE_KEY", "timeout": "45s"}}`), env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout != 45*time.Second || cfg.TimeoutSource != "llm.timeout" {
		t.Fatalf("the primary's timeout %s from %q, want 45s from llm.timeout", cfg.Timeout, cfg.TimeoutSource)
	}
	check := func(cfg provider.Config, want time.Duration) {
		t.Helper()
		r, err := provider.ResolveFallback(deadline(t), "openai", cfg.TimeoutEnv(env))
		if err != nil {
			t.Fatal(err)
		}
		if r.Timeout != want || r.BaseURL != "https://api.openai.com/v1" || r.KeySource != "OPENAI_API_KEY" ||
			r.APIKey != "sk-openai-0123456789abcdefOPENAI" || r.Model != "gpt-4o-mini" {
			t.Errorf("fallback openai: %v, timeout %s (key from %s), want %s at its own URL with its own key", r, r.Timeout, r.KeySource, want)
		}
		r, err = provider.ResolveFallback(deadline(t), "ollama:qwen2.5", cfg.TimeoutEnv(env))
		if err != nil {
			t.Fatal(err)
		}
		if r.Timeout != want || r.BaseURL != "http://127.0.0.1:11434/v1" || r.APIKey != "" || r.Model != "qwen2.5" {
			t.Errorf("fallback ollama: %v, timeout %s, want %s at its own URL without a key", r, r.Timeout, want)
		}
	}
	check(cfg, 45*time.Second)
	// A node whose model timeout is longer than the default puts it here.
	raised := provider.DefaultConfig()
	raised.Timeout, raised.TimeoutSource = 10*time.Minute, "the model timeout"
	check(raised, 10*time.Minute)
	// LLM_TIMEOUT is the primary's too.
	cfg, err = provider.Load("", envOf("LLM_TIMEOUT", "20s"))
	if err != nil || cfg.Timeout != 20*time.Second || cfg.TimeoutSource != provider.EnvTimeout {
		t.Fatalf("LLM_TIMEOUT: %s from %q, %v", cfg.Timeout, cfg.TimeoutSource, err)
	}
	check(cfg, 20*time.Second)
	// The default is no source.
	if cfg, err := provider.Load("", envOf()); err != nil || cfg.TimeoutSource != "" {
		t.Fatalf("the default: timeout from %q, %v", cfg.TimeoutSource, err)
	}
	if len(srv.Requests()) != 0 {
		t.Fatal("a fallback was sent to the primary's host")
	}
}

// A fallback (or an agent's model) whose provider's variable is unset is refused
// with an error naming that variable alone: LLM_API_KEY is not its to use, so an
// error that offered it ("neither DEEPSEEK_API_KEY nor LLM_API_KEY holds an API
// key") sent the user to set a variable that changed nothing.
func TestFallbackWithoutItsKeyNamesOnlyItsVariable(t *testing.T) {
	for _, env := range []func(string) string{envOf(), envOf("LLM_API_KEY", "generic-key-0123456789abcdef")} {
		_, _, _, err := provider.FallbackFromSpec(deadline(t), "deepseek", env)
		if err == nil {
			t.Fatal("fallback deepseek without DEEPSEEK_API_KEY: no error")
		}
		if msg := err.Error(); !strings.Contains(msg, "DEEPSEEK_API_KEY") || strings.Contains(msg, "LLM_API_KEY") {
			t.Errorf("fallback deepseek without DEEPSEEK_API_KEY: %q: want DEEPSEEK_API_KEY named, and not LLM_API_KEY", msg)
		}
	}
}
