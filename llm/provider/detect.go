package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
)

// ErrNoEmbedder means the resolved provider offers no embedding model.
var ErrNoEmbedder = errors.New("llm/provider: no embedding model")

// Probe reports whether an OpenAI-compatible server answers at baseURL. It must
// return promptly (well within a second or two) and never block past ctx.
type Probe func(ctx context.Context, baseURL string) bool

// DefaultProbeTimeout bounds one HTTPProbe request.
const DefaultProbeTimeout = time.Second

// HTTPProbe is the default Probe: GET {baseURL}/models must answer 2xx within
// timeout (DefaultProbeTimeout when 0). client is http.DefaultClient when nil.
func HTTPProbe(client *http.Client, timeout time.Duration) Probe {
	if client == nil {
		client = http.DefaultClient
	}
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	return func(ctx context.Context, baseURL string) bool {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/models", nil)
		if err != nil {
			return false
		}
		res, err := client.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
		_ = res.Body.Close()
		return res.StatusCode >= 200 && res.StatusCode < 300
	}
}

// ErrKeyNotPaired means a key would have gone to a base URL the user did not pair it
// with: a provider's key variable with a host that is not that provider's, or
// LLM_API_KEY with a base URL that did not come from LLM_BASE_URL. Detect refuses
// rather than send it.
var ErrKeyNotPaired = errors.New("llm/provider: the API key is not paired with the base URL")

// Resolved is the model configuration Detect settled on, and why. It prints (String,
// every fmt verb, slog, JSON) with the API key redacted.
type Resolved struct {
	// Provider is a known provider's name, OpenAICompatible or Offline.
	Provider       string
	BaseURL        string
	Model          string
	EmbeddingModel string
	// APIKey is never printed.
	APIKey string
	// KeySource names where APIKey came from: a provider's key variable,
	// LLM_API_KEY, the variable llm.api_key_env names, or "llm.api_key".
	KeySource string
	Timeout   time.Duration
	// StreamIdleTimeout is Config.StreamIdleTimeout.
	StreamIdleTimeout time.Duration
	ExtraHeaders      map[string]string
	// Reason says which setting chose the provider, or why none was found.
	Reason string
}

// KeyRoute says which key goes to which host, naming the variable, never the value:
// "OPENAI_API_KEY is sent to api.openai.com", or "no API key is sent to HOST". It is
// empty for the offline model.
func (r Resolved) KeyRoute() string {
	if r.BaseURL == "" {
		return ""
	}
	if r.APIKey == "" {
		return "no API key is sent to " + hostOf(r.BaseURL)
	}
	return sourceName(r.KeySource) + " is sent to " + hostOf(r.BaseURL)
}

// Detect decides which model to run, from cfg and the environment (env wins over
// cfg for the variables Load reads; env is os.Getenv when nil). The first rule that
// applies wins:
//
//  1. an explicit provider (EnvProvider or the config file);
//  2. a provider's own key variable, in the order of Providers (OPENAI_API_KEY,
//     DEEPSEEK_API_KEY, ...); when a base URL is configured, only the key of the
//     provider that URL belongs to counts;
//  3. the user's own key (LLM_API_KEY, or the config file's llm.api_key_env or
//     llm.api_key): with the base URL it is paired with, the provider is inferred from
//     that URL's host, else "openai-compatible" (which needs a model); no base URL
//     means OpenAI;
//  4. a base URL alone: the provider its host (or local port) belongs to, without key;
//  5. a local server that answers probe (nil: HTTPProbe), Ollama then vLLM, unless
//     cfg.DisableProbe;
//  6. the offline model, with a Reason saying what was looked for.
//
// Keys go only where they belong: a provider's key variable to that provider's hosts,
// the user's own key to the base URL it is paired with (Config.APIKeyBaseURL) or,
// with no base URL, to the provider's own. A setting that would send a key anywhere
// else is ErrKeyNotPaired, naming the variable and the host; Resolved.KeyRoute says
// where the key goes. An explicit but unusable setting (a provider with no key, an
// unknown host with no model) is an error rather than a silent fallback.
func Detect(ctx context.Context, cfg Config, env func(string) string, probe Probe) (Resolved, error) {
	if env == nil {
		env = os.Getenv
	}
	if probe == nil {
		probe = HTTPProbe(nil, 0)
	}
	cfg, err := cfg.withEnv(env)
	if err != nil {
		return Resolved{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Resolved{}, err
	}
	resolve := func(p Provider, key, source, reason string) (Resolved, error) {
		r := Resolved{Provider: p.Name, BaseURL: apiBase(cfg.BaseURL, p), Model: first(cfg.Model, p.DefaultModel),
			EmbeddingModel: first(cfg.EmbeddingModel, p.DefaultEmbeddingModel), APIKey: key, Timeout: cfg.Timeout,
			StreamIdleTimeout: cfg.StreamIdleTimeout, ExtraHeaders: maps.Clone(cfg.ExtraHeaders), Reason: reason}
		if key != "" {
			r.KeySource = source
		}
		if r.Model == "" {
			return r, fmt.Errorf("llm/provider: %s: no model configured: set %s to the model to use", reason, EnvModel)
		}
		return r, nil
	}
	compatible := Provider{Name: OpenAICompatible}
	base := cfg.BaseURL
	hostP, hostKnown := ByBaseURL(base)
	// The user's own key may go to the base URL: it is paired with it, or there is none.
	ownKeyFits := cfg.APIKey != "" && (base == "" || sameURL(base, cfg.APIKeyBaseURL))
	ownSource := first(cfg.APIKeySource, "the configured API key")

	// 1. An explicit provider.
	if cfg.Provider != "" {
		reason := fmt.Sprintf("provider %q is configured", cfg.Provider)
		switch strings.ToLower(cfg.Provider) {
		case Offline:
			return offline(reason), nil
		case OpenAICompatible:
			if base == "" {
				return Resolved{}, fmt.Errorf("llm/provider: %s but no base URL: set %s", reason, EnvBaseURL)
			}
			if cfg.APIKey != "" && !ownKeyFits {
				return Resolved{}, notPaired(reason, ownSource, base, nil)
			}
			if !ownKeyFits {
				return resolve(compatible, "", "", reason+"; "+unsentKeys(env, base))
			}
			return resolve(compatible, cfg.APIKey, ownSource, reason)
		}
		p, _ := Lookup(cfg.Provider) // Validate checked the name
		if hostKnown && hostP.Name != p.Name {
			return Resolved{}, fmt.Errorf("llm/provider: %s but the base URL %s belongs to %s", reason, openai.ShownURL(base), hostP.Name)
		}
		own := base == "" || hostKnown // hostKnown means hostP is p
		providerKey := ""
		if p.KeyEnv != "" {
			providerKey = strings.TrimSpace(env(p.KeyEnv))
		}
		switch {
		case ownKeyFits:
			return resolve(p, cfg.APIKey, ownSource, reason)
		case providerKey != "" && own:
			return resolve(p, providerKey, p.KeyEnv, reason)
		case p.KeyEnv == "":
			return resolve(p, "", "", reason) // a local server needs no key
		case providerKey != "":
			return Resolved{}, notPaired(reason, p.KeyEnv, base, p.Hosts)
		case cfg.APIKey != "":
			return Resolved{}, notPaired(reason, ownSource, base, nil)
		}
		return Resolved{}, fmt.Errorf("llm/provider: %s but neither %s nor %s holds an API key", reason, p.KeyEnv, EnvAPIKey)
	}

	// 2. A provider's own key variable.
	for _, p := range Providers() {
		if p.KeyEnv == "" {
			continue
		}
		key := strings.TrimSpace(env(p.KeyEnv))
		if key == "" || (base != "" && (!hostKnown || hostP.Name != p.Name)) {
			continue
		}
		own := ""
		if cfg.APIKey != "" {
			own = sourceName(ownSource)
		}
		return resolve(p, key, p.KeyEnv, p.KeyEnv+" is set"+unusedKeys(env, p.KeyEnv, own))
	}

	// 3. The user's own key.
	if cfg.APIKey != "" {
		switch {
		case base == "":
			p, _ := Lookup(OpenAI)
			return resolve(p, cfg.APIKey, ownSource, fmt.Sprintf("%s is set without a base URL: using OpenAI's API", ownSource))
		case !ownKeyFits:
			return Resolved{}, notPaired(fmt.Sprintf("the base URL is %s", openai.ShownURL(base)), ownSource, base, nil)
		case hostKnown:
			return resolve(hostP, cfg.APIKey, ownSource, fmt.Sprintf("%s is set and the base URL belongs to %s", ownSource, hostP.Name))
		}
		return resolve(compatible, cfg.APIKey, ownSource, fmt.Sprintf("%s is set and the base URL %s belongs to no known provider", ownSource, openai.ShownURL(base)))
	}

	// 4. A base URL alone.
	if base != "" {
		if !hostKnown {
			return resolve(compatible, "", "", fmt.Sprintf("the base URL %s belongs to no known provider; %s", openai.ShownURL(base), unsentKeys(env, base)))
		}
		if hostP.KeyEnv != "" {
			return Resolved{}, fmt.Errorf("llm/provider: the base URL belongs to %s but neither %s nor %s holds an API key",
				hostP.Name, hostP.KeyEnv, EnvAPIKey)
		}
		return resolve(hostP, "", "", fmt.Sprintf("the base URL belongs to %s", hostP.Name))
	}

	// 5. A local server.
	var local []string
	for _, p := range Providers() {
		if !p.Local {
			continue
		}
		local = append(local, fmt.Sprintf("%s (%s)", p.Name, p.BaseURL))
		if cfg.DisableProbe || !probe(ctx, p.BaseURL) {
			continue
		}
		return resolve(p, "", "", fmt.Sprintf("no API key is set and a local %s answered at %s", p.Name, p.BaseURL))
	}

	// 6. Offline.
	localPart := "no local server answered: " + strings.Join(local, ", ")
	if cfg.DisableProbe {
		localPart = "probing for local servers is disabled"
	}
	return offline(fmt.Sprintf("no API key found in %s or %s; %s; using the offline rule-based model",
		strings.Join(KeyVars(), ", "), EnvAPIKey, localPart)), nil
}

// notPaired is the refusal to send the key from source to baseURL; hosts are where
// that key does go (none for the user's own key). It prints baseURL as
// openai.ShownURL does, as every message of Detect does.
func notPaired(reason, source, baseURL string, hosts []string) error {
	where := "it is only sent to the base URL it is paired with"
	if len(hosts) > 0 {
		where = "it is only sent to " + strings.Join(hosts, ", ")
	}
	return fmt.Errorf("%w: %s, but %s is not sent to %s: %s. To send a key there, set %s with %s=%s, "+
		"or name the key's variable in the config file's llm.api_key_env beside llm.base_url",
		ErrKeyNotPaired, reason, sourceName(source), hostOf(baseURL), where, EnvAPIKey, EnvBaseURL, openai.ShownURL(baseURL))
}

// unsentKeys says that no key goes to baseURL, and where the provider keys that are
// set do go.
func unsentKeys(env func(string) string, baseURL string) string {
	s := "no API key is paired with it"
	for _, p := range Providers() {
		if p.KeyEnv != "" && strings.TrimSpace(env(p.KeyEnv)) != "" {
			s += fmt.Sprintf("; %s is only sent to %s", p.KeyEnv, strings.Join(p.Hosts, ", "))
		}
	}
	return s
}

// unusedKeys says which other provider key variables are set and go unused beside
// used, chosen by the order of Providers, and how to choose one of them; "" when
// none is. own names the user's own key when it is set (LLM_API_KEY, ...), unused
// too.
func unusedKeys(env func(string) string, used, own string) string {
	var others []string
	for _, p := range Providers() {
		if p.KeyEnv != "" && p.KeyEnv != used && strings.TrimSpace(env(p.KeyEnv)) != "" {
			others = append(others, p.KeyEnv)
		}
	}
	if own != "" {
		others = append(others, own)
	}
	if len(others) == 0 {
		return ""
	}
	verb := "is"
	if len(others) > 1 {
		verb = "are"
	}
	return fmt.Sprintf("; %s %s set too and not used (keys are tried in the order %s, then %s): to use another, name its provider with --model PROVIDER or %s",
		strings.Join(others, ", "), verb, strings.Join(KeyVars(), ", "), EnvAPIKey, EnvProvider)
}

// apiBase is the base URL of p's API at base: base with p's API path when base is
// one of p's hosts alone (https://dashscope-intl.aliyuncs.com, or a local server's
// http://localhost:11434), the client adding the endpoint's path to it; p.BaseURL
// when there is no base; else base as given.
func apiBase(base string, p Provider) string {
	if base == "" {
		return p.BaseURL
	}
	u, err := url.Parse(base)
	if err != nil || p.BaseURL == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return base
	}
	if host, ok := ByBaseURL(base); !ok || host.Name != p.Name {
		return base // a proxy's, say: its paths are its own
	}
	known, err := url.Parse(p.BaseURL)
	if err != nil {
		return base
	}
	u.Path, u.RawPath = known.Path, ""
	return u.String()
}

// sourceName is how messages name a key's source.
func sourceName(source string) string {
	switch source {
	case "":
		return "the configured API key"
	case "llm.api_key":
		return "the config file's llm.api_key"
	}
	return source
}

// hostOf is the host (and port) of a base URL, or the URL itself if it has none.
func hostOf(baseURL string) string {
	if u, err := url.Parse(baseURL); err == nil && u.Host != "" {
		return u.Host
	}
	return baseURL
}

// sameURL reports whether two base URLs are the same endpoint, ignoring a trailing
// slash and the case of scheme and host.
func sameURL(a, b string) bool {
	ua, errA := url.Parse(strings.TrimRight(a, "/"))
	ub, errB := url.Parse(strings.TrimRight(b, "/"))
	if errA != nil || errB != nil || b == "" {
		return false
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Host, ub.Host) && ua.Path == ub.Path
}

// KeyVars returns the environment variables that may hold an API key: every
// provider's KeyEnv, in the order of Providers.
func KeyVars() []string {
	var keys []string
	for _, p := range Providers() {
		if p.KeyEnv != "" {
			keys = append(keys, p.KeyEnv)
		}
	}
	return keys
}

func offline(reason string) Resolved {
	return Resolved{Provider: Offline, Model: llm.OfflineName, Reason: reason}
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// NewModel builds the resolved chat model: llm.Offline for the offline provider,
// otherwise an *openai.Model (which also streams and reports Capabilities).
func (r Resolved) NewModel() (llm.Model, error) {
	if r.Provider == Offline {
		return llm.NewOffline(), nil
	}
	m, err := openai.New(openai.Config{Provider: r.Provider, BaseURL: r.BaseURL, APIKey: r.APIKey, Model: r.Model,
		Timeout: r.Timeout, StreamIdleTimeout: r.StreamIdleTimeout, ExtraHeaders: r.ExtraHeaders})
	if err != nil {
		return nil, fmt.Errorf("llm/provider: %s: %w", r.Provider, err)
	}
	return m, nil
}

// NewEmbedder builds the resolved provider's embedder: an *openai.Embedder, or
// llm.HashingEmbedder (lexical, not semantic) for the offline provider. A provider
// with no embedding model (none by default and none configured) is ErrNoEmbedder.
func (r Resolved) NewEmbedder() (llm.Embedder, error) {
	if r.Provider == Offline {
		return llm.HashingEmbedder{}, nil
	}
	if r.EmbeddingModel == "" {
		return nil, fmt.Errorf("%w for provider %s: set %s", ErrNoEmbedder, r.Provider, EnvEmbeddingModel)
	}
	e, err := openai.NewEmbedder(openai.EmbedderConfig{Provider: r.Provider, BaseURL: r.BaseURL, APIKey: r.APIKey,
		Model: r.EmbeddingModel, Timeout: r.Timeout, ExtraHeaders: r.ExtraHeaders})
	if err != nil {
		return nil, fmt.Errorf("llm/provider: %s: %w", r.Provider, err)
	}
	return e, nil
}

// String describes the resolution with the key and the values of its base URL's
// query redacted (openai.ShownURL), e.g.
// "provider=deepseek model=deepseek-chat base_url=https://api.deepseek.com/v1
// api_key=[REDACTED] (DEEPSEEK_API_KEY is set)".
func (r Resolved) String() string {
	s := fmt.Sprintf("provider=%s model=%s", r.Provider, r.Model)
	if r.BaseURL != "" {
		s += fmt.Sprintf(" base_url=%s api_key=%s", openai.ShownURL(r.BaseURL), keyState(r.APIKey))
	}
	if r.Reason != "" {
		s += " (" + r.Reason + ")"
	}
	return s
}

// Format makes every fmt verb (%v, %+v, %#v, %s, %q) print String.
func (r Resolved) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		_, _ = fmt.Fprintf(f, "%q", r.String())
		return
	}
	_, _ = fmt.Fprint(f, r.String())
}

// LogValue implements slog.LogValuer without the key.
func (r Resolved) LogValue() slog.Value {
	return slog.GroupValue(slog.String("provider", r.Provider), slog.String("model", r.Model),
		slog.String("base_url", openai.ShownURL(r.BaseURL)), slog.Bool("api_key_set", r.APIKey != ""), slog.String("reason", r.Reason))
}

// MarshalJSON encodes the resolution with the key redacted.
func (r Resolved) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"provider": r.Provider, "model": r.Model, "embedding_model": r.EmbeddingModel,
		"base_url": openai.ShownURL(r.BaseURL), "api_key": keyState(r.APIKey), "timeout": r.Timeout.String(), "reason": r.Reason})
}
