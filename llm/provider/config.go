package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/redact"
)

// Environment variables read by Load and Detect (besides each provider's KeyEnv).
const (
	EnvProvider       = "TROUPE_LLM_PROVIDER"
	EnvAPIKey         = "LLM_API_KEY"
	EnvBaseURL        = "LLM_BASE_URL"
	EnvModel          = "LLM_MODEL"
	EnvEmbeddingModel = "LLM_EMBEDDING_MODEL"
	// EnvTimeout is a Go duration, e.g. "45s".
	EnvTimeout = "LLM_TIMEOUT"
	// EnvStreamIdleTimeout is a Go duration, e.g. "2m"; "0" turns the bound off.
	EnvStreamIdleTimeout = "LLM_STREAM_IDLE_TIMEOUT"
)

// DefaultConfigFile is the conventional configuration file name.
const DefaultConfigFile = ".troupe.json"

// Config is what the user configured; empty fields are left to Detect. It prints
// without its API key.
type Config struct {
	// Provider names a known provider (or alias), "openai-compatible" or "offline".
	Provider string
	// APIKey is the user's own key: LLM_API_KEY, the config file's llm.api_key, or
	// the variable its llm.api_key_env names. A provider's own key variable
	// (OPENAI_API_KEY, ...) is not copied here: Detect reads it, for that provider's
	// hosts only.
	APIKey string
	// APIKeySource names where APIKey came from, for messages (never the value):
	// "LLM_API_KEY", the variable llm.api_key_env names, or "llm.api_key".
	APIKeySource string
	// APIKeyBaseURL is the base URL the user paired APIKey with: LLM_BASE_URL set
	// beside LLM_API_KEY, or llm.base_url beside llm.api_key_env (or llm.api_key) in
	// the config file. APIKey goes to BaseURL only when BaseURL is this URL; with no
	// BaseURL it goes to the provider's own.
	APIKeyBaseURL string
	// APIKeyEnv is the variable the config file's llm.api_key_env names; its value is
	// a secret to redact whichever key the model uses.
	APIKeyEnv string
	BaseURL   string
	Model     string
	// EmbeddingModel overrides the provider's default embedding model.
	EmbeddingModel string
	// Timeout bounds each HTTP request to the model (the gateway retries one that
	// runs out).
	Timeout time.Duration
	// TimeoutSource names where Timeout came from, for messages: "llm.timeout" (or
	// "timeout" in a file that is the llm section alone), EnvTimeout, or "" for the
	// default (DefaultConfig). A caller that replaces the
	// default (a node following its longer model timeout) names itself here.
	TimeoutSource string
	// StreamIdleTimeout bounds how long a streamed answer that began may send
	// nothing (openai.Config.StreamIdleTimeout): 0 for the default
	// (openai.DefaultStreamIdleTimeout), openai.StreamIdleOff for none.
	StreamIdleTimeout time.Duration
	// ExtraHeaders are sent with every request.
	ExtraHeaders map[string]string
	// DisableProbe skips looking for a local Ollama or vLLM server.
	DisableProbe bool
}

// DefaultConfig is the configuration before any file or environment variable.
func DefaultConfig() Config { return Config{Timeout: openai.DefaultTimeout} }

// MaxTimeout bounds Config.Timeout.
const MaxTimeout = time.Hour

// Validate reports settings that can never work, each naming the setting (the config
// file's field and the environment variable), the value and what is allowed.
func (c Config) Validate() error {
	var errs []error
	if c.Provider != "" {
		if _, ok := Lookup(c.Provider); !ok && !isPseudo(c.Provider) {
			errs = append(errs, fmt.Errorf("llm/provider: provider (llm.provider, %s) %q is not known: want one of %s", EnvProvider, c.Provider, knownProviders()))
		}
	}
	if c.BaseURL != "" && !isHTTPURL(c.BaseURL) {
		errs = append(errs, fmt.Errorf("llm/provider: base URL (llm.base_url, %s) %q: want an absolute http or https URL, e.g. https://api.example.com/v1", EnvBaseURL, c.BaseURL))
	}
	if c.Timeout < 0 || c.Timeout > MaxTimeout {
		errs = append(errs, fmt.Errorf("llm/provider: timeout (llm.timeout, %s) %s is out of range: want 1s to 1h (0: the default, %s)", EnvTimeout, c.Timeout, openai.DefaultTimeout))
	}
	if d := c.StreamIdleTimeout; d != 0 && d != openai.StreamIdleOff && (d < time.Second || d > MaxTimeout) {
		errs = append(errs, fmt.Errorf("llm/provider: stream idle timeout (llm.stream_idle_timeout, %s) %s is out of range: %s", EnvStreamIdleTimeout, d, streamIdleWant))
	}
	return errors.Join(errs...)
}

func knownProviders() string {
	return strings.Join(append(names(), OpenAICompatible, Offline), ", ")
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func isPseudo(name string) bool {
	n := strings.ToLower(name)
	return n == OpenAICompatible || n == Offline
}

func names() []string {
	var out []string
	for _, p := range Providers() {
		out = append(out, p.Name)
	}
	return out
}

// fileConfig is the JSON form of Config, alone or as the "llm" object of a larger
// file:
//
//	{"llm": {"provider": "deepseek", "model": "deepseek-chat", "timeout": "45s",
//	         "api_key_env": "MY_DEEPSEEK_KEY"}}
type fileConfig struct {
	Provider       string `json:"provider"`
	APIKey         string `json:"api_key"`
	APIKeyEnv      string `json:"api_key_env"`
	BaseURL        string `json:"base_url"`
	Model          string `json:"model"`
	EmbeddingModel string `json:"embedding_model"`
	Timeout        string `json:"timeout"`
	// StreamIdleTimeout is a duration, "0" for none (parseStreamIdle).
	StreamIdleTimeout string            `json:"stream_idle_timeout"`
	ExtraHeaders      map[string]string `json:"extra_headers"`
	DisableProbe      bool              `json:"disable_probe"`
}

var (
	envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// jsonFields lists the JSON names of T's fields.
func jsonFields[T any]() string {
	var names []string
	for f := range reflect.TypeFor[T]().Fields() {
		names = append(names, strings.Split(f.Tag.Get("json"), ",")[0])
	}
	return strings.Join(names, ", ")
}

// validate checks the file's values; prefix ("llm." or "") names the section.
func (f fileConfig) validate(prefix string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf(prefix+field+": "+format, args...))
	}
	if f.Provider != "" {
		if _, ok := Lookup(f.Provider); !ok && !isPseudo(f.Provider) {
			bad("provider", "%q is not known: want one of %s", f.Provider, knownProviders())
		}
	}
	if f.BaseURL != "" && !isHTTPURL(f.BaseURL) {
		bad("base_url", "%q: want an absolute http or https URL, e.g. https://api.example.com/v1", f.BaseURL)
	}
	for field, v := range map[string]string{"model": f.Model, "embedding_model": f.EmbeddingModel, "api_key": f.APIKey} {
		if v != "" && strings.TrimSpace(v) == "" {
			bad(field, "is blank: leave it out, or name a value")
		}
	}
	if f.APIKeyEnv != "" && !envVarName.MatchString(f.APIKeyEnv) {
		bad("api_key_env", "%q is not an environment variable name: want letters, digits and underscores, not starting with a digit", f.APIKeyEnv)
	}
	if f.Timeout != "" {
		d, err := time.ParseDuration(f.Timeout)
		switch {
		case err != nil:
			bad("timeout", "%q is not a duration: want 1s to 1h, e.g. \"45s\"", f.Timeout)
		case d < time.Second || d > MaxTimeout:
			bad("timeout", "%q is out of range: want 1s to 1h", f.Timeout)
		}
	}
	if f.StreamIdleTimeout != "" {
		if _, err := parseStreamIdle(f.StreamIdleTimeout); err != nil {
			bad("stream_idle_timeout", "%w", err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.ExtraHeaders)) {
		switch v := f.ExtraHeaders[name]; {
		case !headerName.MatchString(name):
			bad("extra_headers", "%q is not an HTTP header name: want letters, digits and !#$%%&'*+-.^_`|~", name)
		case strings.ContainsAny(v, "\r\n\x00"):
			bad("extra_headers", "the value of %s holds a line break or NUL: want one line", name)
		}
	}
	return errors.Join(errs...)
}

// Load builds a Config from the defaults, then the JSON file at path (skipped when
// path is empty; a missing file is an error), then the environment: EnvProvider,
// EnvAPIKey, EnvBaseURL, EnvModel, EnvEmbeddingModel and EnvTimeout. A provider's
// own key variable is left to Detect. env is os.Getenv when nil.
func Load(path string, env func(string) string) (Config, error) {
	if env == nil {
		env = os.Getenv
	}
	if path == "" {
		return load("", nil, env)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("llm/provider: read config: %w", err)
	}
	return load(path, b, env)
}

// LoadSection is Load with the "llm" section of a configuration file read already
// (a file that cannot be read twice, such as a pipe: --config <(...)), named name in
// errors. An empty section is no file: the defaults, then the environment.
func LoadSection(name string, section json.RawMessage, env func(string) string) (Config, error) {
	if env == nil {
		env = os.Getenv
	}
	if len(section) == 0 {
		return load("", nil, env)
	}
	b, err := json.Marshal(map[string]json.RawMessage{"llm": section})
	if err != nil {
		return Config{}, fmt.Errorf("llm/provider: config %s: %w", name, err)
	}
	return load(name, b, env)
}

// load builds a Config from the defaults, then file (the bytes of the file named
// path; none when path is empty), then the environment.
func load(path string, file []byte, env func(string) string) (Config, error) {
	cfg := DefaultConfig()
	if path != "" {
		var err error
		if cfg, err = cfg.withFile(file, env); err != nil {
			return Config{}, fmt.Errorf("llm/provider: config %s: %w", path, err)
		}
	}
	cfg, err := cfg.withEnv(env)
	if err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func (c Config) withFile(b []byte, env func(string) string) (Config, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return c, errors.New("the file is empty: want a JSON object")
	}
	var wrapper map[string]json.RawMessage
	if err := json.Unmarshal(b, &wrapper); err != nil {
		return c, err
	}
	prefix := ""
	if section, ok := wrapper["llm"]; ok {
		b, prefix = section, "llm."
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f fileConfig
	if err := dec.Decode(&f); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return c, fmt.Errorf("unknown field \"%s%s\": the fields are %s", prefix, strings.Trim(name, `"`), jsonFields[fileConfig]())
		}
		return c, err
	}
	if err := f.validate(prefix); err != nil {
		return c, err
	}
	set(&c.Provider, f.Provider)
	if f.APIKey != "" {
		c.APIKey, c.APIKeySource, c.APIKeyBaseURL = f.APIKey, "llm.api_key", f.BaseURL
	}
	if f.APIKeyEnv != "" {
		c.APIKeyEnv = f.APIKeyEnv
		if v := strings.TrimSpace(env(f.APIKeyEnv)); v != "" {
			c.APIKey, c.APIKeySource, c.APIKeyBaseURL = v, f.APIKeyEnv, f.BaseURL
		}
	}
	set(&c.BaseURL, f.BaseURL)
	set(&c.Model, f.Model)
	set(&c.EmbeddingModel, f.EmbeddingModel)
	if f.Timeout != "" {
		c.Timeout, _ = time.ParseDuration(f.Timeout) // validate parsed it
		c.TimeoutSource = prefix + "timeout"
	}
	if f.StreamIdleTimeout != "" {
		c.StreamIdleTimeout, _ = parseStreamIdle(f.StreamIdleTimeout) // validate parsed it
	}
	if len(f.ExtraHeaders) > 0 {
		c.ExtraHeaders = maps.Clone(f.ExtraHeaders)
	}
	c.DisableProbe = c.DisableProbe || f.DisableProbe
	return c, nil
}

// withEnv applies the environment over c; it is idempotent.
func (c Config) withEnv(env func(string) string) (Config, error) {
	get := func(k string) string { return strings.TrimSpace(env(k)) }
	set(&c.Provider, get(EnvProvider))
	// LLM_API_KEY is paired with LLM_BASE_URL, and with nothing else. Applying the
	// same key from the same variable again keeps the pairing.
	if k := get(EnvAPIKey); k != "" && (k != c.APIKey || c.APIKeySource != EnvAPIKey) {
		c.APIKey, c.APIKeySource, c.APIKeyBaseURL = k, EnvAPIKey, get(EnvBaseURL)
	}
	set(&c.BaseURL, get(EnvBaseURL))
	set(&c.Model, get(EnvModel))
	set(&c.EmbeddingModel, get(EnvEmbeddingModel))
	if v := get(EnvTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("llm/provider: %s: %w", EnvTimeout, err)
		}
		c.Timeout, c.TimeoutSource = d, EnvTimeout
	}
	if v := get(EnvStreamIdleTimeout); v != "" {
		d, err := parseStreamIdle(v)
		if err != nil {
			return c, fmt.Errorf("llm/provider: %s: %w", EnvStreamIdleTimeout, err)
		}
		c.StreamIdleTimeout = d
	}
	return c, nil
}

// streamIdleWant says which values a stream idle timeout takes.
const streamIdleWant = "want 1s to 1h, e.g. \"2m\", or 0 for no bound"

// parseStreamIdle reads a stream idle timeout: a duration of 1s to 1h, or 0
// (openai.StreamIdleOff: no bound).
func parseStreamIdle(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration: %s", v, streamIdleWant)
	case d == 0:
		return openai.StreamIdleOff, nil
	case d < time.Second || d > MaxTimeout:
		return 0, fmt.Errorf("%q is out of range: %s", v, streamIdleWant)
	}
	return d, nil
}

// TimeoutEnv returns env (os.Getenv when nil) with EnvTimeout giving c.Timeout (when
// not 0), and every other variable as env has it: the env argument of
// FallbackFromSpec (and of nodeconfig's ResolveModels), so that a fallback or an
// agent's model ends each request when the node's own model does, whether the timeout
// came from the config file's llm.timeout, from LLM_TIMEOUT or from the node. Nothing
// else of c is passed: its key, base URL, model and provider stay the node's own.
func (c Config) TimeoutEnv(env func(string) string) func(string) string {
	if env == nil {
		env = os.Getenv
	}
	if c.Timeout == 0 && c.StreamIdleTimeout == 0 {
		return env
	}
	timeout, idle := c.Timeout.String(), c.StreamIdleTimeout.String()
	if c.StreamIdleTimeout == openai.StreamIdleOff {
		idle = "0"
	}
	return func(k string) string {
		switch {
		case k == EnvTimeout && c.Timeout != 0:
			return timeout
		case k == EnvStreamIdleTimeout && c.StreamIdleTimeout != 0:
			return idle
		}
		return env(k)
	}
}

func set(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// String describes the configuration with the key redacted, and the values of its
// base URL's query (openai.ShownURL).
func (c Config) String() string {
	return fmt.Sprintf("provider.Config{Provider:%s BaseURL:%s Model:%s EmbeddingModel:%s APIKey:%s Timeout:%s}",
		c.Provider, openai.ShownURL(c.BaseURL), c.Model, c.EmbeddingModel, keyState(c.APIKey), c.Timeout)
}

// Format makes every fmt verb print String.
func (c Config) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, c.String()) }

// LogValue implements slog.LogValuer without the key.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("provider", c.Provider), slog.String("base_url", openai.ShownURL(c.BaseURL)),
		slog.String("model", c.Model), slog.Bool("api_key_set", c.APIKey != ""), slog.Duration("timeout", c.Timeout))
}

// MarshalJSON encodes the configuration with the key redacted.
func (c Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"provider": c.Provider, "base_url": openai.ShownURL(c.BaseURL), "model": c.Model,
		"embedding_model": c.EmbeddingModel, "api_key": keyState(c.APIKey), "timeout": c.Timeout.String()})
}

func keyState(key string) string {
	if key == "" {
		return "none"
	}
	return redact.Redacted
}

// Secrets returns every API key a node must keep out of its events, logs and output,
// whichever model it runs: the values in env (os.Getenv when nil) of every provider's
// key variable (KeyVars), of EnvAPIKey and of the variable llm.api_key_env names, the
// configured key itself, the values of the llm.extra_headers named like secrets (a
// gateway's key, such as "api-key" or "Helicone-Auth: Bearer ...", which a
// provider's error may echo as well as the key: redact.SecretName; an
// "OpenAI-Organization" or an "X-Title" is no secret) and the credentials in the base URL (a password, an ?api_key=...:
// redact.URLSecrets).
func (c Config) Secrets(env func(string) string) []string {
	if env == nil {
		env = os.Getenv
	}
	vars := append(KeyVars(), EnvAPIKey)
	if c.APIKeyEnv != "" {
		vars = append(vars, c.APIKeyEnv)
	}
	var out []string
	for _, v := range vars {
		if s := strings.TrimSpace(env(v)); s != "" {
			out = append(out, s)
		}
	}
	if c.APIKey != "" {
		out = append(out, c.APIKey)
	}
	for name, v := range c.ExtraHeaders {
		if redact.SecretName(name) {
			out = append(out, redact.HeaderSecrets(v)...)
		}
	}
	out = append(out, redact.URLSecrets(c.BaseURL)...)
	return out
}
