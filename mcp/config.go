package mcp

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/redact"
)

// ServerConfig declares one MCP server: a command the node starts and talks to over
// its stdin and stdout (stdio), or the URL of a Streamable HTTP endpoint. It is the
// value of each entry of the node configuration's "mcp_servers" object.
type ServerConfig struct {
	// Command and Args start a stdio server, and Dir is its working directory
	// (default the node's). Its environment is not the node's, which holds the
	// node's API tokens, secret key and model keys: it is the variables of
	// DefaultEnv the node has, those PassEnv passes, and Env, which adds to (or
	// replaces in) them (Environ). It runs in a process group of its own (on Unix),
	// killed when its connection closes: its children do not outlive it.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// PassEnv names the other variables of the node's environment the server gets:
	// names ("GITHUB_TOKEN") or path.Match globs ("GITHUB_*"); ["*"] passes the
	// node's whole environment, as every stdio server got before PassEnv.
	PassEnv []string `json:"pass_env,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	// URL is a Streamable HTTP endpoint (http or https); Headers are sent with every
	// request to it (e.g. Authorization): to its scheme and host only, not to
	// another host it redirects to.
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Allow, when not empty, keeps only the server's tools whose name matches one of
	// its patterns; Deny then removes those matching one of its. Patterns are
	// path.Match globs ("get-*") over the server's own tool names, and over the
	// names "read_resource", "list_resources" and "get_prompt" of the tools that
	// reach its resources and prompts.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// OAuth, for a "url" server, authorizes the node with OAuth 2.1 (the MCP
	// authorization specification) when the server answers 401 or 403: see
	// OAuthConfig. It replaces an "Authorization" header.
	OAuth *OAuthConfig `json:"oauth,omitempty"`
	// Elicitation is how the node answers a server's request for input
	// (elicitation/create): ElicitDecline (the default: the node advertises no
	// elicitation capability), or ElicitDefaults (it advertises it, and accepts a
	// form with the default values of its schema when every required field has
	// one, SEP-1034; else it declines).
	Elicitation string `json:"elicitation,omitempty"`
	// Transport, instead of Command or URL, reaches a server in the same process
	// (one embedding Troupe, a test, a benchmark): it is called for each connection
	// and returns a new client transport, such as one end of the go-sdk's
	// NewInMemoryTransports whose other end a server is serving. It has no JSON
	// form.
	Transport func() sdk.Transport `json:"-"`
}

// Stdio reports whether the server is started as a command (else it is a URL).
func (s ServerConfig) Stdio() bool { return s.Command != "" }

// DefaultEnv are the variables of the node's environment every stdio server gets,
// those the official MCP SDKs' stdio clients pass (TypeScript's
// getDefaultEnvironment, Python's get_default_environment): on Windows, what a
// program needs to start and find its folders; elsewhere sudo's list.
func DefaultEnv() []string {
	if runtime.GOOS == "windows" {
		return []string{"APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT", "PROCESSOR_ARCHITECTURE",
			"PROGRAMFILES", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "USERNAME", "USERPROFILE"}
	}
	return []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
}

// Environ is the environment of the stdio server, from environ, the node's
// ("NAME=value" entries, as os.Environ): its variables named by DefaultEnv (but a
// value starting with "()", a shell function, as the SDKs skip it) and those
// PassEnv passes, then Env's, which replace them. It is never nil: a nil
// exec.Cmd.Env would be the node's whole environment.
func (s ServerConfig) Environ(environ []string) []string {
	defaults := DefaultEnv()
	env := make([]string, 0, len(defaults)+len(s.Env))
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		if s.passes(name) || slices.ContainsFunc(defaults, func(d string) bool { return sameEnvName(d, name) }) && !strings.HasPrefix(value, "()") {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		env = append(env, k+"="+s.Env[k])
	}
	return env
}

// Passed are the entries of environ that PassEnv passes to the stdio server (not
// those of DefaultEnv alone), which the node treats as its configuration's values:
// a secret-named one is redacted like Env's (nodeconfig.MCPSecrets).
func (s ServerConfig) Passed(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if name, _, ok := strings.Cut(kv, "="); ok && s.passes(name) {
			out = append(out, kv)
		}
	}
	return out
}

// passes reports whether a pattern of PassEnv matches the variable named name
// (without regard to case on Windows, where names have none).
func (s ServerConfig) passes(name string) bool {
	if runtime.GOOS == "windows" {
		name = strings.ToUpper(name)
	}
	for _, p := range s.PassEnv {
		if runtime.GOOS == "windows" {
			p = strings.ToUpper(p)
		}
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

func sameEnvName(a, b string) bool {
	if runtime.GOOS == "windows" {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// serverName is what a server may be called: its name prefixes its tools' names.
var serverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$`)

// ServerNameRule says which names ValidServerName accepts, for error messages.
const ServerNameRule = `1 to 32 letters, digits, '_' and '-', starting with a letter or digit, without "__"`

// ValidServerName reports whether name can name a server (ServerNameRule): "__"
// separates a server's name from its tools' names, so a name may not hold it.
func ValidServerName(name string) bool {
	return serverName.MatchString(name) && !strings.Contains(name, "__") && !strings.HasSuffix(name, "_")
}

// Validate reports every field of the server named name that cannot work, each error
// naming the field as mcp_servers.NAME.FIELD, its value and what is allowed.
func (s ServerConfig) Validate(name string) error {
	var errs []error
	field := "mcp_servers." + name
	bad := func(f, format string, args ...any) {
		errs = append(errs, fmt.Errorf(field+f+": "+format, args...))
	}
	if !ValidServerName(name) {
		errs = append(errs, fmt.Errorf("mcp_servers: the server name %q is not usable: want %s", name, ServerNameRule))
	}
	switch {
	case s.Transport != nil && (s.Command != "" || s.URL != ""):
		bad("", `has an in-process transport and a "command" or "url": give one`)
	case s.Transport != nil:
	case s.Command == "" && s.URL == "":
		bad("", `has neither "command" (a stdio server) nor "url" (a Streamable HTTP server): give one`)
	case s.Command != "" && s.URL != "":
		bad("", `has both "command" and "url": give one (a stdio server, or a Streamable HTTP server)`)
	}
	if s.Command != "" && strings.TrimSpace(s.Command) != s.Command || strings.ContainsRune(s.Command, 0) {
		bad(".command", "%q has surrounding white space or a NUL: want the program's name or path", s.Command)
	}
	for i, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			bad(fmt.Sprintf(".args[%d]", i), "%q holds a NUL character", a)
		}
	}
	if s.URL == "" {
		if len(s.Args) > 0 && s.Command == "" {
			bad(".args", "are given without a command")
		}
		if len(s.Headers) > 0 {
			bad(".headers", `are for a "url" server; a stdio server gets settings through "env"`)
		}
	}
	if s.Command == "" {
		if len(s.Env) > 0 {
			bad(".env", `is for a "command" server; a "url" server gets settings through "headers"`)
		}
		if s.Dir != "" {
			bad(".dir", `is for a "command" server`)
		}
		if len(s.PassEnv) > 0 {
			bad(".pass_env", `is for a "command" server`)
		}
	}
	for i, p := range s.PassEnv {
		if _, err := path.Match(p, ""); err != nil || p == "" || strings.ContainsAny(p, "=\x00") || strings.TrimSpace(p) != p {
			bad(fmt.Sprintf(".pass_env[%d]", i), "%q is not a variable name or glob: want a name such as \"GITHUB_TOKEN\", a glob such as \"GITHUB_*\", or \"*\" for the node's whole environment", p)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			bad(".env", "%q is not a variable name: want a name without '=' or NUL", k)
		} else if strings.ContainsRune(s.Env[k], 0) {
			bad(".env."+k, "holds a NUL character")
		}
	}
	if s.Dir != "" && (strings.TrimSpace(s.Dir) == "" || strings.ContainsRune(s.Dir, 0)) {
		bad(".dir", "%q is not a usable directory path", s.Dir)
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		switch {
		case err != nil:
			bad(".url", "%q is not a URL: %v", s.URL, err)
		case u.Scheme != "http" && u.Scheme != "https":
			bad(".url", "%q: want an http:// or https:// URL of a Streamable HTTP endpoint", s.URL)
		case u.Host == "":
			bad(".url", "%q has no host", s.URL)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		if !validHeaderName(k) {
			bad(".headers", "%q is not an HTTP header name", k)
		} else if strings.ContainsAny(s.Headers[k], "\r\n\x00") {
			bad(".headers."+k, "holds a line break or NUL, which HTTP headers cannot carry")
		} else if reserved[http.CanonicalHeaderKey(k)] {
			bad(".headers", "%q is set by the MCP transport itself", k)
		}
	}
	if s.OAuth != nil {
		if s.URL == "" {
			bad(".oauth", `is for a "url" server`)
		}
		if slices.ContainsFunc(slices.Collect(maps.Keys(s.Headers)), func(k string) bool { return http.CanonicalHeaderKey(k) == "Authorization" }) {
			bad(".headers", `"Authorization" is set by "oauth": give one`)
		}
		errs = append(errs, s.OAuth.validate(field+".oauth")...)
	}
	switch s.Elicitation {
	case "", ElicitDecline, ElicitDefaults:
	default:
		bad(".elicitation", "%q: want %q or %q", s.Elicitation, ElicitDecline, ElicitDefaults)
	}
	for list, patterns := range map[string][]string{".allow": s.Allow, ".deny": s.Deny} {
		for i, p := range patterns {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				bad(fmt.Sprintf("%s[%d]", list, i), "%q is not a pattern: want a tool name or a glob such as \"get-*\"", p)
			}
		}
	}
	return errors.Join(errs...)
}

// reserved are the headers the Streamable HTTP transport sets.
var reserved = map[string]bool{"Mcp-Session-Id": true, "Mcp-Protocol-Version": true, "Content-Type": true, "Accept": true, "Content-Length": true, "Host": true}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// allowed reports whether the tool named name (the server's own name for it) passes
// the allow and deny lists. The patterns are valid (Validate).
func (s ServerConfig) allowed(name string) bool {
	match := func(patterns []string) bool {
		for _, p := range patterns {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
		return false
	}
	if len(s.Allow) > 0 && !match(s.Allow) {
		return false
	}
	return !match(s.Deny)
}

// DefaultRelistInterval is the default of ClientConfig.RelistInterval.
const DefaultRelistInterval = time.Second

// ClientConfig configures a Client.
type ClientConfig struct {
	// Servers are the servers to connect to, by name (ServerNameRule).
	Servers map[string]ServerConfig
	// ConnectTimeout bounds connecting to a server and listing its tools, resources
	// and prompts (default 30 s).
	ConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts to reconnect to a
	// server that is down: it starts at MinBackoff (default 500 ms) and doubles up to
	// MaxBackoff (default 30 s); a connection that lasted a minute starts it over.
	MinBackoff, MaxBackoff time.Duration
	// CallWait bounds how long a call waits for a server that is reconnecting before
	// it fails (default 10 s); it never waits past the call's own context.
	CallWait time.Duration
	// PingInterval is how often a connected server is pinged (default 30 s): one that
	// misses two pings in a row is taken for down and reconnected.
	PingInterval time.Duration
	// MaxResultBytes bounds the text of one result handed to the model (default
	// 256 KiB): a longer one is cut, with a note saying how much was cut.
	MaxResultBytes int
	// MaxTools bounds the tools taken from one server (default 1000); the others are
	// reported as skipped.
	MaxTools int
	// RelistInterval is the least time between two listings of a server's tools,
	// resources and prompts on its list_changed notifications (default 1 s): the
	// notifications that come meanwhile are followed by one listing at its end. A
	// server that sends them without pause (a tool that comes and goes, a
	// notification at each call) otherwise had its whole offer listed and
	// checked again back to back, most of a core for a thousand tools, and each
	// change passed on to the node's own MCP clients as it came.
	RelistInterval time.Duration
	// Logger receives connections, disconnections, skipped tools and the lines a
	// stdio server writes to its stderr (at debug level).
	Logger *slog.Logger
	// Redactor learns the secrets the client obtains at run time: an OAuth server's
	// access and refresh tokens, as they are issued and refreshed, and the client
	// secret of a dynamic registration. A server that echoes its Authorization
	// header (in a result, an error or its log) then leaks no token to the events
	// and logs that the same Redactor keeps (node.Config.Redactor, the log's
	// redact.Handler). Nil: they are not registered anywhere.
	Redactor *redact.Redactor
}

// Validate reports every server that cannot work (ServerConfig.Validate) and
// negative limits.
func (c ClientConfig) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.Servers)) {
		if err := c.Servers[name].Validate(name); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ConnectTimeout < 0 || c.MinBackoff < 0 || c.MaxBackoff < 0 || c.CallWait < 0 || c.PingInterval < 0 || c.MaxResultBytes < 0 || c.MaxTools < 0 || c.RelistInterval < 0 {
		errs = append(errs, errors.New("mcp: timeouts and limits must not be negative"))
	}
	return errors.Join(errs...)
}

func (c *ClientConfig) setDefaults() {
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 30 * time.Second
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 500 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = c.MinBackoff
	}
	if c.CallWait == 0 {
		c.CallWait = 10 * time.Second
	}
	if c.PingInterval == 0 {
		c.PingInterval = 30 * time.Second
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = 256 << 10
	}
	if c.MaxTools == 0 {
		c.MaxTools = 1000
	}
	if c.RelistInterval == 0 {
		c.RelistInterval = DefaultRelistInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}
