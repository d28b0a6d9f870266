package nodeconfig

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
	"github.com/troupe-run/troupe/tools/skills"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// File is the node's configuration file (JSON). Every field is optional; the
// environment overrides the file and flags override both. The "llm" section is
// llm/provider's (provider, model, base_url, api_key_env, timeout, …). Load
// refuses an empty file, unknown fields and, through Validate, any value out of its
// range, naming the field, the value and what is allowed.
type File struct {
	Data               string          `json:"data"`
	HTTP               string          `json:"http"`
	Model              string          `json:"model"`
	Fallbacks          []string        `json:"fallbacks"`
	ClickHouse         string          `json:"clickhouse"`
	ClickHouseDatabase string          `json:"clickhouse_database"`
	ClickHouseMaxConns int             `json:"clickhouse_max_conns"`
	Kafka              string          `json:"kafka"`
	Group              string          `json:"group"`
	TopicPrefix        string          `json:"topic_prefix"`
	MilvusPrefix       string          `json:"milvus_prefix"`
	Roles              string          `json:"roles"`
	NodeID             string          `json:"node_id"`
	TopicsFile         string          `json:"topics_file"`
	ReplyTopicsCreate  string          `json:"reply_topics_create"`
	ReplyTopicsMax     *int            `json:"reply_topics_max"`
	StoredRetention    string          `json:"stored_retention"`
	SystemPrompt       string          `json:"system_prompt"`
	MaxSteps           int             `json:"max_steps"`
	IdleTimeout        string          `json:"idle_timeout"`
	ModelTimeout       string          `json:"model_timeout"`  // ParseCallTimeout
	ToolTimeout        string          `json:"tool_timeout"`   // ParseCallTimeout
	EffectReissue      string          `json:"effect_reissue"` // ParseEffectReissue, CheckEffectReissue
	MaxSessions        int             `json:"max_sessions"`
	MaxQueuedTasks     int             `json:"max_queued_tasks"` // node.Config.MaxQueuedTasks; -1: no bound
	Gateway            GatewayFile     `json:"gateway"`
	LLM                json.RawMessage `json:"llm"`
	SkillsDir          string          `json:"skills_dir"`
	Skills             SkillsFile      `json:"skills"`
	Disclosure         string          `json:"disclosure"`
	// DecisionRules is the version of the decision rules the node records new
	// tasks under (node.Config.DecisionRules; absent or 0: the build's own).
	DecisionRules int `json:"decision_rules"`
	// LogFormat is the format of the node's log lines on stderr: text (the
	// default, logfmt-like key=value) or json (one JSON object a line).
	LogFormat string `json:"log_format"`
	// ToolEmbedder ranks search_tools' matches by embedding similarity instead of
	// BM25 (disclosure "search"): hashing (the offline lexical embedder) or llm (the
	// embeddings endpoint of the node's model provider; NewToolEmbedder).
	ToolEmbedder string    `json:"tool_embedder"`
	Tools        ToolsFile `json:"tools"`
	// MCPServers are the MCP servers whose tools the agent gets (mcp.ServerConfig).
	MCPServers map[string]mcp.ServerConfig `json:"mcp_servers"`
	// MCPServer is what `node mcp` and /mcp offer besides the node's tools, skills
	// and its MCP servers' resources and prompts (mcp.ServedConfig).
	MCPServer mcp.ServedConfig `json:"mcp_server"`
	// A2AAgents are remote A2A agents the agent calls as tools a2a__<name>: name →
	// the agent card's URL (a2a.NewTool).
	A2AAgents map[string]string `json:"a2a_agents"`
	// A2A configures the A2A server of node serve (node.A2AConfig).
	A2A *node.A2AConfig `json:"a2a"`
	// Chains are tool chains the agent gets as tools (tools.Chain; node.Config.Chains).
	Chains []tools.Chain `json:"chains"`
	// Memory configures agent memory (MemoryFile).
	Memory *MemoryFile `json:"memory"`
	// Knowledge configures the knowledge bases (KnowledgeFile).
	Knowledge *KnowledgeFile `json:"knowledge"`
	// AgentsFile is the agents file (YAML; LoadAgents) that declares named agents.
	AgentsFile string `json:"agents_file"`
	// ApprovalTimeout is how long a call that needs approval waits for an answer
	// before it is rejected, for the agents whose approval_timeout is not set
	// (node.Config.ApprovalTimeout): a duration; "0" (the default) waits for ever.
	ApprovalTimeout string `json:"approval_timeout"`

	// MaxTokens, LoopRepeats and LoopStaleSteps are the default agent's stop
	// conditions, as an agents file's agent has them (stops.go): absent, the node's
	// defaults; a loop setting of 0 turns that check off.
	MaxTokens      int  `json:"max_tokens"`
	LoopRepeats    *int `json:"loop_repeats"`
	LoopStaleSteps *int `json:"loop_stale_steps"`
	// MaxCostUSD is the default agent's cost budget in US dollars (0 or absent:
	// none), as the price table (Gateway.Prices) costs its model calls.
	MaxCostUSD float64 `json:"max_cost_usd"`
	// Context bounds what the default agent's model calls are sent, and is the
	// default of the named agents' context fields (context.go).
	Context ContextFile `json:"context"`
	// Auth, CORS and HTTPLimits protect node serve's HTTP API (http.go).
	Auth       *AuthFile       `json:"auth"`
	CORS       *CORSFile       `json:"cors"`
	HTTPLimits *HTTPLimitsFile `json:"http_limits"`
	// TrustedProxies are the reverse proxies (CIDR prefixes or addresses) whose
	// X-Forwarded-For names the client (node.HTTPConfig.TrustedProxies).
	TrustedProxies []string `json:"trusted_proxies"`
	// SecretKeyFile is the file of the key that seals the secrets the node keeps in
	// its event log (node.Config.SecretKey; node.ReadSecretKeyFile).
	SecretKeyFile string `json:"secret_key_file"`
}

// SkillsFile is the "skills" section: what the skills of skills_dir may do.
type SkillsFile struct {
	AllowScripts  bool   `json:"allow_scripts"`
	ScriptTimeout string `json:"script_timeout"`
}

// maxScriptTimeout bounds skills.script_timeout.
const maxScriptTimeout = 10 * time.Minute

// validate checks the skills section, naming fields as skills.FIELD.
func (s SkillsFile) validate() []error {
	if s.ScriptTimeout == "" {
		return nil
	}
	if err := checkDuration(s.ScriptTimeout, 100*time.Millisecond, maxScriptTimeout); err != nil {
		return []error{fmt.Errorf("skills.script_timeout: %w", err)}
	}
	return nil
}

type GatewayFile struct {
	Prices      map[string]gateway.Price `json:"prices"`
	Concurrency map[string]int           `json:"concurrency"`
	Quotas      []struct {
		Scope  string `json:"scope"`
		Tokens int64  `json:"tokens"`
		Window string `json:"window"`
	} `json:"quotas"`
	CacheTTL      string `json:"cache_ttl"`
	SemanticCache *struct {
		Threshold float64 `json:"threshold"`
		TTL       string  `json:"ttl"`
	} `json:"semantic_cache"`
}

// Load reads the configuration file at path (none when path is empty): one JSON
// object with only the fields of File, each valid (Validate).
func Load(path string) (File, error) {
	var fc File
	if path == "" {
		return fc, nil
	}
	b, err := readFile(path)
	if err != nil {
		return fc, fmt.Errorf("config: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return fc, fmt.Errorf("config %s is empty: write a JSON object, e.g. {\"model\": \"offline\"}", path)
	}
	if b[0] != '{' {
		return fc, fmt.Errorf("config %s: want a JSON object ({...}), not %s", path, clip(b))
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&fc); err != nil {
		if line := errorLine(b, err); line > 0 {
			return fc, fmt.Errorf("config %s: line %d: %w", path, line, decodeError(b, err))
		}
		return fc, fmt.Errorf("config %s: %w", path, decodeError(b, err))
	}
	if d.InputOffset() != int64(len(b)) {
		return fc, fmt.Errorf("config %s: %s after the JSON object: want one object", path, clip(b[d.InputOffset():]))
	}
	if key, line := repeatedKey(b); key != "" {
		// encoding/json takes the last of them silently: a second "memory" section
		// (or a "model" left below an edited one) would drop the first unsaid.
		return fc, fmt.Errorf("config %s: line %d: %q is given twice: keep one", path, line, key)
	}
	if key, want := miscasedKey(b, reflect.TypeFor[File]()); key != "" {
		// encoding/json takes a key for a field whatever its case.
		return fc, fmt.Errorf("config %s: line %d: %q is not a field; the field is %q (a key's case matters)",
			path, keyLine(b, key[strings.LastIndexAny(key, ".]")+1:]), key, want)
	}
	if err := fc.Validate(); err != nil {
		return fc, fmt.Errorf("config %s: %w", path, err)
	}
	return fc, nil
}

// MaxFileSize bounds the configuration and agents files the loaders read: a path
// to a file that never ends (/dev/zero, a pipe that keeps writing) is refused
// past it rather than read into memory until it runs out.
const MaxFileSize = 32 << 20

// readFile reads the file at path, up to MaxFileSize bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes, the most a configuration file may hold", path, MaxFileSize)
	}
	// An editor may save the file with a byte order mark before its JSON.
	return messages.TrimByteOrderMark(b), nil
}

func clip(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 20 {
		return fmt.Sprintf("%q…", b[:20])
	}
	return fmt.Sprintf("%q", b)
}

// decodeError rephrases encoding/json's errors for a person editing the file: the
// field, what was there and what is wanted, without the Go type names.
func decodeError(file []byte, err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		want := map[string]string{"string": "a string", "int": "an integer", "int64": "an integer", "float64": "a number", "bool": "true or false"}[typeErr.Type.String()]
		if want == "" {
			want = "a " + typeErr.Type.Kind().String()
		}
		if r, ok := fieldRanges[typeErr.Field]; ok {
			want += " from " + r
		}
		return fmt.Errorf("%s: got %s, want %s", typeErr.Field, typeErr.Value, want)
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("not valid JSON at byte %d: %w", syntaxErr.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the file ends inside the JSON object (a closing } or ] or a quote is missing): %w", err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return unknownField(file, strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`))
	}
	return err
}

// errorLine is the line of file (from 1) that a decoding error of it is about, 0 when
// unknown: where the syntax broke, the value of the wrong type, the unknown field's
// key (its first place as a key in the file), the end of a file cut short.
func errorLine(file []byte, err error) int {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &syntaxErr):
		return lineAt(file, syntaxErr.Offset)
	case errors.As(err, &typeErr):
		return lineAt(file, typeErr.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return lineAt(file, int64(len(file)))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return keyLine(file, strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`))
	}
	return 0
}

// lineAt is the line of the byte before offset: the last byte read of a value or a
// token that ends at offset.
func lineAt(file []byte, offset int64) int {
	offset = min(max(offset, 1), int64(len(file)))
	return 1 + bytes.Count(file[:offset-1], []byte("\n"))
}

// keyLine is the line where name first stands as an object's key in file, 0 when it
// does not.
func keyLine(file []byte, name string) int {
	d := json.NewDecoder(bytes.NewReader(file))
	// The open containers, innermost last: whether each is an object, and whether it
	// waits for a key (an object between its members).
	var inObject, wantKey []bool
	for {
		tok, err := d.Token()
		if err != nil {
			return 0
		}
		switch tok {
		case json.Delim('{'):
			inObject, wantKey = append(inObject, true), append(wantKey, true)
			continue
		case json.Delim('['):
			inObject, wantKey = append(inObject, false), append(wantKey, false)
			continue
		case json.Delim('}'), json.Delim(']'):
			inObject, wantKey = inObject[:len(inObject)-1], wantKey[:len(wantKey)-1]
		default:
			if n := len(wantKey); n > 0 && wantKey[n-1] {
				if tok == name {
					return lineAt(file, d.InputOffset())
				}
				wantKey[n-1] = false // its value comes next
				continue
			}
		}
		// A value ended: the object around it waits for its next key.
		if n := len(inObject); n > 0 && inObject[n-1] {
			wantKey[n-1] = true
		}
	}
}

// repeatedKey returns the first key of file (valid JSON) that stands twice in one
// object, as a path ("memory.tool", "mcp_servers[1].name"), and the line of its
// second place; "" when every object's keys are distinct.
func repeatedKey(file []byte) (string, int) {
	d := json.NewDecoder(bytes.NewReader(file))
	type open struct {
		object  bool
		wantKey bool
		seen    map[string]bool
		path    string // the container's own path
		key     string // object: the member being read; array: its index
		index   int
	}
	var stack []*open
	child := func() string { // the path of the value being read
		if len(stack) == 0 {
			return ""
		}
		o := stack[len(stack)-1]
		if o.object {
			if o.path == "" {
				return o.key
			}
			return o.path + "." + o.key
		}
		return fmt.Sprintf("%s[%d]", o.path, o.index)
	}
	valueEnded := func() {
		if n := len(stack); n > 0 {
			if o := stack[n-1]; o.object {
				o.wantKey = true
			} else {
				o.index++
			}
		}
	}
	for {
		tok, err := d.Token()
		if err != nil {
			return "", 0
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &open{object: true, wantKey: true, seen: map[string]bool{}, path: child()})
			continue
		case json.Delim('['):
			stack = append(stack, &open{path: child()})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		default:
			if n := len(stack); n > 0 && stack[n-1].wantKey {
				o := stack[n-1]
				key, _ := tok.(string)
				o.key, o.wantKey = key, false
				if o.seen[key] {
					return child(), lineAt(file, d.InputOffset())
				}
				o.seen[key] = true
				continue
			}
		}
		valueEnded()
	}
}

// unknownField names the unknown field name with the section it is in, and lists
// that section's fields. encoding/json does not say where the field was; the top
// level and the gateway object are looked at, the deeper objects named together.
func unknownField(file []byte, name string) error {
	var top, gw map[string]json.RawMessage
	_ = json.Unmarshal(file, &top)
	if _, ok := top[name]; ok {
		return fmt.Errorf("unknown field %q: the fields are %s", name, jsonFields[File]())
	}
	_ = json.Unmarshal(top["gateway"], &gw)
	if _, ok := gw[name]; ok {
		return fmt.Errorf("unknown field \"gateway.%s\": the gateway fields are %s", name, jsonFields[GatewayFile]())
	}
	if err := unknownHTTPField(top, name); err != nil {
		return err
	}
	if err := unknownToolsField(top["tools"], name); err != nil {
		return err
	}
	var sk map[string]json.RawMessage
	_ = json.Unmarshal(top["skills"], &sk)
	if _, ok := sk[name]; ok {
		return fmt.Errorf("unknown field \"skills.%s\": the skills fields are %s", name, jsonFields[SkillsFile]())
	}
	if err := unknownMCPField(top["mcp_servers"], name); err != nil {
		return err
	}
	if err := unknownServedField(top["mcp_server"], name); err != nil {
		return err
	}
	if err := unknownChainField(top["chains"], name); err != nil {
		return err
	}
	var mem, memEmb, memCons map[string]json.RawMessage
	_ = json.Unmarshal(top["memory"], &mem)
	_ = json.Unmarshal(mem["embedder"], &memEmb)
	_ = json.Unmarshal(mem["consolidator"], &memCons)
	switch {
	case mem[name] != nil:
		return fmt.Errorf("unknown field \"memory.%s\": the memory fields are %s", name, jsonFields[MemoryFile]())
	case memEmb[name] != nil:
		return fmt.Errorf("unknown field \"memory.embedder.%s\": the embedder fields are %s", name, jsonFields[EmbedderFile]())
	case memCons[name] != nil:
		return fmt.Errorf("unknown field \"memory.consolidator.%s\": the consolidator fields are %s", name, jsonFields[ConsolidatorFile]())
	}
	var kb, kbEmb map[string]json.RawMessage
	_ = json.Unmarshal(top["knowledge"], &kb)
	_ = json.Unmarshal(kb["embedder"], &kbEmb)
	switch {
	case kb[name] != nil:
		return fmt.Errorf("unknown field \"knowledge.%s\": the knowledge fields are %s", name, jsonFields[KnowledgeFile]())
	case kbEmb[name] != nil:
		return fmt.Errorf("unknown field \"knowledge.embedder.%s\": the embedder fields are %s", name, jsonFields[EmbedderFile]())
	}
	return fmt.Errorf("unknown field %q in gateway.prices (prompt, completion, cached), gateway.quotas (scope, tokens, window) "+
		"or gateway.semantic_cache (threshold, ttl)", name)
}

// Limits of the file's values.
const (
	maxMaxSteps    = 1000
	MaxMaxSessions = 10_000_000
	maxConcurrency = 10000
	maxPrice       = 10000 // US dollars per million tokens
	maxQuotaTokens = 1_000_000_000_000
	minTTL         = time.Second
	maxTTL         = 720 * time.Hour  // 30 days
	maxQuotaWindow = 8784 * time.Hour // 366 days
)

// MaxMaxQueuedTasks bounds max_queued_tasks (and --max-queued-tasks), the tasks
// waiting their turn in a session, each held in its session's state.
const MaxMaxQueuedTasks = 1_000_000

// MaxClickHouseConns bounds clickhouse_max_conns (and --clickhouse-max-conns), the
// node's connections to ClickHouse (clickhouse.Config.MaxOpenConns).
const MaxClickHouseConns = 1000

// fieldRanges says what each numeric field allows, for Validate and decodeError.
var fieldRanges = map[string]string{
	"max_steps":            fmt.Sprintf("1 to %d (0 or absent: the node's default)", maxMaxSteps),
	"max_sessions":         fmt.Sprintf("1 to %d (0 or absent: the node's default, %d)", MaxMaxSessions, node.DefaultMaxLiveSessions),
	"max_queued_tasks":     fmt.Sprintf("1 to %d, or -1 for no bound (0 or absent: the node's default, %d)", MaxMaxQueuedTasks, node.DefaultMaxQueuedTasks),
	"clickhouse_max_conns": fmt.Sprintf("1 to %d (0 or absent: the default, %d)", MaxClickHouseConns, clickhouse.DefaultMaxOpenConns),
}

// jsonFields lists the JSON names of T's fields.
func jsonFields[T any]() string {
	var names []string
	for f := range reflect.TypeFor[T]().Fields() {
		names = append(names, strings.Split(f.Tag.Get("json"), ",")[0])
	}
	return strings.Join(names, ", ")
}

var (
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// kafkaName is what Kafka allows in topic names; consumer groups and node IDs
	// keep to it too, so that they read well in logs and metadata.
	kafkaName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)
)

// Validate reports every field with a value that cannot work, naming the field, the
// value and what is allowed. The "llm" section is llm/provider's to check (Load).
func (fc File) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf(field+": "+format, args...))
	}
	for field, v := range map[string]string{"data": fc.Data, "topics_file": fc.TopicsFile, "agents_file": fc.AgentsFile, "secret_key_file": fc.SecretKeyFile} {
		if v != "" && strings.TrimSpace(v) == "" || strings.ContainsRune(v, 0) {
			bad(field, "%q is not a usable path: want a directory or file path", v)
		}
	}
	if fc.IdleTimeout != "" {
		if d, err := time.ParseDuration(fc.IdleTimeout); err != nil || d <= 0 {
			bad("idle_timeout", "%q is not a positive duration (e.g. 90s or 5m)", fc.IdleTimeout)
		}
	}
	for field, v := range map[string]string{"model_timeout": fc.ModelTimeout, "tool_timeout": fc.ToolTimeout} {
		if _, err := ParseCallTimeout(v); err != nil {
			bad(field, "%v", err)
		}
	}
	if _, err := ParseEffectReissue(fc.EffectReissue); err != nil {
		bad("effect_reissue", "%v", err)
	}
	if fc.StoredRetention != "" {
		if _, err := ParseStoredRetention(fc.StoredRetention); err != nil {
			bad("stored_retention", "%v", err)
		}
	}
	if fc.ApprovalTimeout != "" {
		if _, err := ParseApprovalTimeout(fc.ApprovalTimeout); err != nil {
			bad("approval_timeout", "%v", err)
		}
	}
	if fc.HTTP != "" {
		if err := checkHostPort(fc.HTTP); err != nil {
			bad("http", "%v (e.g. 127.0.0.1:8080)", err)
		}
	}
	if fc.Model != "" {
		if err := provider.CheckSpec(fc.Model); err != nil {
			bad("model", "%v", err)
		}
	}
	for i, spec := range fc.Fallbacks {
		if spec == "" {
			bad(fmt.Sprintf("fallbacks[%d]", i), `"" is empty: want a model spec (PROVIDER[:MODEL], offline, ...)`)
		} else if err := provider.CheckSpec(spec); err != nil {
			bad(fmt.Sprintf("fallbacks[%d]", i), "%v", err)
		}
	}
	for field, list := range map[string]string{"clickhouse": fc.ClickHouse, "kafka": fc.Kafka} {
		if list == "" {
			continue
		}
		for a := range strings.SplitSeq(list, ",") {
			if err := checkHostPort(strings.TrimSpace(a)); err != nil && strings.Contains(list, ",") {
				bad(field, "in %q: %v; want a comma-separated list of host:port", list, err)
			} else if err != nil {
				bad(field, "%v; want host:port, or a comma-separated list of them", err)
			}
		}
	}
	if fc.ClickHouseDatabase != "" && !identifier.MatchString(fc.ClickHouseDatabase) {
		bad("clickhouse_database", "%q: want letters, digits and underscores, not starting with a digit", fc.ClickHouseDatabase)
	}
	if fc.ClickHouseMaxConns < 0 || fc.ClickHouseMaxConns > MaxClickHouseConns {
		bad("clickhouse_max_conns", "%d is out of range: want %s", fc.ClickHouseMaxConns, fieldRanges["clickhouse_max_conns"])
	}
	if fc.Group != "" && !kafkaName.MatchString(fc.Group) {
		bad("group", "%q: want 1 to 249 letters, digits, '.', '_' and '-'", fc.Group)
	}
	if fc.NodeID != "" && !kafkaName.MatchString(fc.NodeID) {
		bad("node_id", "%q: want 1 to 249 letters, digits, '.', '_' and '-'", fc.NodeID)
	}
	if fc.TopicPrefix != "" {
		if err := (kafka.TopicLayout{Prefix: fc.TopicPrefix}).Validate(); err != nil {
			bad("topic_prefix", "%v", err)
		}
	}
	if err := CheckMilvusPrefix(fc.MilvusPrefix); err != nil {
		bad("milvus_prefix", "%v", err)
	}
	if fc.Roles != "" {
		if _, err := node.ParseRoles(fc.Roles); err != nil {
			bad("roles", "%q: %v", fc.Roles, err)
		}
	}
	if fc.SystemPrompt != "" && strings.TrimSpace(fc.SystemPrompt) == "" {
		bad("system_prompt", "is blank: leave it out for the default prompt, or write one")
	}
	if fc.MaxSteps < 0 || fc.MaxSteps > maxMaxSteps {
		bad("max_steps", "%d is out of range: want %s", fc.MaxSteps, fieldRanges["max_steps"])
	}
	errs = append(errs, fc.validateStops()...)
	errs = append(errs, fc.validateContext()...)
	if fc.MaxSessions < 0 || fc.MaxSessions > MaxMaxSessions {
		bad("max_sessions", "%d is out of range: want %s", fc.MaxSessions, fieldRanges["max_sessions"])
	}
	if fc.MaxQueuedTasks < -1 || fc.MaxQueuedTasks > MaxMaxQueuedTasks {
		bad("max_queued_tasks", "%d is out of range: want %s", fc.MaxQueuedTasks, fieldRanges["max_queued_tasks"])
	}
	errs = append(errs, fc.Gateway.validate()...)
	if fc.SkillsDir != "" && strings.TrimSpace(fc.SkillsDir) == "" || strings.ContainsRune(fc.SkillsDir, 0) {
		bad("skills_dir", "%q is not a usable path: want the directory that holds the skill folders", fc.SkillsDir)
	}
	errs = append(errs, fc.Skills.validate()...)
	if err := actors.CheckRecordRules(fc.DecisionRules); err != nil {
		bad("decision_rules", "%d: this build records tasks under versions %d to %d (absent or 0: %d, its own)", fc.DecisionRules, actors.MinContextRules, actors.ContextRules, actors.ContextRules)
	}
	if fc.LogFormat != "" && fc.LogFormat != "text" && fc.LogFormat != "json" {
		bad("log_format", "%q: want text (key=value lines, the default) or json (one JSON object a line)", fc.LogFormat)
	}
	if _, err := disclosure.ParseStrategy(fc.Disclosure); err != nil {
		bad("disclosure", "%q: want all (every tool schema in every request), catalog or search", fc.Disclosure)
	}
	switch {
	case fc.ToolEmbedder != "" && fc.ToolEmbedder != ToolEmbedderHashing && fc.ToolEmbedder != ToolEmbedderLLM:
		bad("tool_embedder", "%q: want hashing (the offline lexical embedder) or llm (the embeddings endpoint of the llm provider: "+
			"its embedding_model, or LLM_EMBEDDING_MODEL); absent: BM25", fc.ToolEmbedder)
	case fc.ToolEmbedder != "" && fc.Disclosure != "" && fc.Disclosure != string(disclosure.Search):
		bad("tool_embedder", "%q ranks the matches of search_tools: it needs \"disclosure\": \"search\", not %q", fc.ToolEmbedder, fc.Disclosure)
	}
	errs = append(errs, fc.Tools.validate()...)
	errs = append(errs, validateMCPServers(fc.MCPServers)...)
	if err := fc.MCPServer.Validate("mcp_server"); err != nil {
		errs = append(errs, err)
	}
	if err := tools.ValidateChains(fc.Chains); err != nil {
		bad("chains", "%w", err)
	}
	for _, c := range fc.Chains {
		// "<server>__<tool>" is the server's: the catalog would drop its tool of
		// that name for the chain's, saying nothing.
		if server, tool, ok := strings.Cut(c.Name, mcp.Separator); ok && tool != "" {
			if _, configured := fc.MCPServers[server]; configured {
				bad("chains", "chain %q: the name is MCP server %q's to give a tool (\"%s%s<tool>\", mcp_servers), and the chain would hide its tool of that name: name the chain otherwise",
					c.Name, server, server, mcp.Separator)
			}
		}
	}
	// The remote A2A agents' tools are a2a__<name>: a server named a2a would give
	// its tools names of theirs, and one named like an agent would be hidden.
	if server, _, _ := strings.Cut(a2a.ToolPrefix, mcp.Separator); len(fc.A2AAgents) > 0 {
		if _, configured := fc.MCPServers[server]; configured {
			bad("mcp_servers", "the server name %q gives its tools the names of the remote A2A agents' (\"%s<name>\", a2a_agents), and a tool named like one would be hidden: name the server otherwise",
				server, a2a.ToolPrefix)
		}
	}
	errs = append(errs, fc.Memory.validate()...)
	errs = append(errs, fc.Knowledge.validate()...)
	errs = append(errs, fc.validateHTTP()...)
	return errors.Join(errs...)
}

// checkHostPort accepts host:port with a numeric port (the host may be empty: all
// interfaces).
func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil || strings.Contains(s, "://") {
		return fmt.Errorf("%q is not host:port", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("the port %q of %q is out of range: want 0 to 65535", port, s)
	}
	return nil
}

// validate checks the gateway section, naming fields as gateway.FIELD.
func (g GatewayFile) validate() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("gateway."+field+": "+format, args...))
	}
	for _, name := range slices.Sorted(maps.Keys(g.Concurrency)) {
		if n := g.Concurrency[name]; name == "" {
			bad("concurrency", `"" is not a provider name`)
		} else if n < 1 || n > maxConcurrency {
			bad("concurrency."+name, "%d is out of range: want 1 to %d calls in flight (absent: 64)", n, maxConcurrency)
		}
	}
	for _, model := range slices.Sorted(maps.Keys(g.Prices)) {
		if model == "" {
			bad("prices", `"" is not a model name: key each price by the model's name`)
			continue
		}
		p := g.Prices[model]
		for _, f := range []struct {
			name string
			v    float64
		}{{"prompt", p.Prompt}, {"completion", p.Completion}, {"cached", p.Cached}} {
			if !(f.v >= 0 && f.v <= maxPrice) {
				bad("prices."+model+"."+f.name, "%g is out of range: want 0 to %d (US dollars per million tokens)", f.v, maxPrice)
			}
		}
	}
	for i, q := range g.Quotas {
		field := fmt.Sprintf("quotas[%d].", i)
		kind, name, ok := strings.Cut(q.Scope, ":")
		switch {
		case !ok || name == "" || (kind != "agent" && kind != "team" && kind != "key"):
			bad(field+"scope", "%q: want agent:NAME (agent:* for each agent)", q.Scope)
		case kind != "agent":
			// The node's sessions charge each model call to their agent
			// (llm.Scope.Agent) and name no team nor key: such a quota would never
			// refuse a call.
			bad(field+"scope", "%q: the node charges each model call to its agent only, so a %s: quota would never apply: want agent:NAME (agent:* for each agent)", q.Scope, kind)
		}
		if q.Tokens < 1 || q.Tokens > maxQuotaTokens {
			bad(field+"tokens", "%d is out of range: want 1 to %d", q.Tokens, int64(maxQuotaTokens))
		}
		if err := checkDuration(q.Window, time.Second, maxQuotaWindow); err != nil {
			bad(field+"window", "%v", err)
		}
	}
	if g.CacheTTL != "" {
		if err := checkDuration(g.CacheTTL, minTTL, maxTTL); err != nil {
			bad("cache_ttl", "%v", err)
		}
	}
	if s := g.SemanticCache; s != nil {
		if !(s.Threshold > 0 && s.Threshold <= 1) {
			bad("semantic_cache.threshold", "%g is out of range: want above 0 and at most 1 (the cosine similarity of a hit, e.g. 0.95)", s.Threshold)
		}
		if err := checkDuration(s.TTL, minTTL, maxTTL); err != nil {
			bad("semantic_cache.ttl", "%v", err)
		}
	}
	return errs
}

// ParseApprovalTimeout reads the node's approval timeout ("approval_timeout",
// --approval-timeout): a duration from 0 (wait for ever; also "") to 720h.
func ParseApprovalTimeout(s string) (time.Duration, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	if err := checkDuration(s, 0, maxApprovalTimeout); err != nil {
		return 0, err
	}
	return time.ParseDuration(s)
}

// Bounds of the node's call timeouts: model_timeout and tool_timeout (--model-timeout,
// --tool-timeout; node.Config.ModelTimeout and ToolTimeout) from MinCallTimeout to
// MaxCallTimeout, effect_reissue (--effect-reissue) from MinCallTimeout to
// MaxEffectReissue and no shorter than the longer timeout (CheckEffectReissue).
const (
	MinCallTimeout   = 100 * time.Millisecond
	MaxCallTimeout   = time.Hour
	MaxEffectReissue = 2 * time.Hour
)

// ParseCallTimeout reads a model or tool call timeout (model_timeout, tool_timeout):
// a Go duration from MinCallTimeout to MaxCallTimeout; "" is 0, the node's default.
func ParseCallTimeout(s string) (time.Duration, error) {
	return parseBounded(s, MinCallTimeout, MaxCallTimeout)
}

// ParseEffectReissue reads effect_reissue: a Go duration from MinCallTimeout to
// MaxEffectReissue; "" is 0, the node's default (the longer timeout plus 30 s).
func ParseEffectReissue(s string) (time.Duration, error) {
	return parseBounded(s, MinCallTimeout, MaxEffectReissue)
}

// parseBounded reads a positive Go duration from lo to hi; "" is 0. Its errors
// quote at most the head of s (QuoteHead), so that a huge or multi-line value
// cannot swamp or break the message.
func parseBounded(s string, lo, hi time.Duration) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s is not a duration: want %s to %s, e.g. \"90s\" or \"5m\"", QuoteHead(s), shortDuration(lo), shortDuration(hi))
	case d <= 0:
		return 0, fmt.Errorf("%s is not positive: want %s to %s", QuoteHead(s), shortDuration(lo), shortDuration(hi))
	case d < lo || d > hi:
		return 0, fmt.Errorf("%s is out of range: want %s to %s", QuoteHead(s), shortDuration(lo), shortDuration(hi))
	}
	return d, nil
}

// CheckEffectReissue refuses an effect reissue interval (0: the default) shorter
// than the longer of the model and tool timeouts (0: their defaults): a request
// still unanswered after it is published again, and one published while its call
// still runs costs a message for nothing (the performer joins the running call);
// below the timeout every call that runs longer than the interval would be. The
// error says why, after the caller's name and value of the interval.
func CheckEffectReissue(reissue, model, tool time.Duration) error {
	if reissue == 0 {
		return nil
	}
	which, longest := "model", cmp.Or(model, node.DefaultModelTimeout)
	if t := cmp.Or(tool, node.DefaultToolTimeout); t > longest {
		which, longest = "tool", t
	}
	if reissue >= longest {
		return nil
	}
	return fmt.Errorf("shorter than the %s timeout, %s: a request still unanswered after it is published again, "+
		"and one published while its call still runs costs a message for nothing, as every call slower than it would; "+
		"want at least %s, or leave it unset (default: the longer timeout plus %s)",
		which, shortDuration(longest), shortDuration(longest), shortDuration(node.DefaultReissueMargin))
}

// QuoteHead is node.QuoteHead: a value quoted for an error, its head only when
// it is long.
func QuoteHead(s string) string { return node.QuoteHead(s) }

// checkDuration accepts a Go duration from lo to hi.
func checkDuration(s string, lo, hi time.Duration) error {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a duration: want %s to %s, e.g. \"1h\"", s, shortDuration(lo), shortDuration(hi))
	case d < lo || d > hi:
		return fmt.Errorf("%q is out of range: want %s to %s", s, shortDuration(lo), shortDuration(hi))
	}
	return nil
}

// shortDuration prints 720h rather than 720h0m0s, and 10m rather than 10m0s (a
// zero is cut only as a whole unit: 10m is not 1).
func shortDuration(d time.Duration) string {
	s := d.String()
	for _, zero := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, zero) {
			s = strings.TrimSuffix(s, zero[1:])
		}
	}
	return s
}

// LoadSkills loads the skills of dir (none when dir is empty) with the file's skills
// section; a skill folder that is not valid is skipped with a warning naming its file.
func LoadSkills(dir string, s SkillsFile, logger *slog.Logger) (*skills.Set, error) {
	if dir == "" {
		return nil, nil
	}
	cfg := skills.Config{Dir: dir, AllowScripts: s.AllowScripts}
	if s.ScriptTimeout != "" {
		d, err := time.ParseDuration(s.ScriptTimeout)
		if err != nil {
			return nil, fmt.Errorf("skills.script_timeout: %w", err)
		}
		cfg.ScriptTimeout = d
	}
	set, problems, err := skills.Load(cfg)
	if err != nil {
		return nil, fmt.Errorf("--skills %s: %w", dir, err)
	}
	for _, p := range problems {
		logger.Warn("skill skipped", "err", p)
	}
	return set, nil
}

func (g GatewayFile) Config() (gateway.Config, error) {
	cfg := gateway.Config{Prices: g.Prices, Concurrency: g.Concurrency}
	for _, q := range g.Quotas {
		w, err := time.ParseDuration(q.Window)
		if err != nil {
			return cfg, fmt.Errorf("config: quota %s: window: %w", q.Scope, err)
		}
		cfg.Quotas = append(cfg.Quotas, gateway.Quota{Scope: q.Scope, Tokens: q.Tokens, Window: w})
	}
	if g.CacheTTL != "" {
		ttl, err := time.ParseDuration(g.CacheTTL)
		if err != nil {
			return cfg, fmt.Errorf("config: cache_ttl: %w", err)
		}
		cfg.Cache = &gateway.CacheConfig{TTL: ttl}
	}
	if s := g.SemanticCache; s != nil {
		ttl, err := time.ParseDuration(s.TTL)
		if err != nil {
			return cfg, fmt.Errorf("config: semantic_cache.ttl: %w", err)
		}
		// The offline hashing embedder is lexical; a configured embeddings endpoint
		// would make this cache semantic in earnest.
		cfg.Semantic = &gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, Threshold: s.Threshold, TTL: ttl}
	}
	return cfg, nil
}

// ParseStoredRetention parses how long a message too large for the bus stays
// stored for its reference (node.Bus.StoredRetention): a positive Go duration of
// at least an hour, or "forever".
func ParseStoredRetention(v string) (time.Duration, error) {
	if v == "forever" {
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Hour {
		return 0, fmt.Errorf("%q is neither a duration of at least an hour (e.g. 192h) nor forever: a reference on the bus must not outlive its message", v)
	}
	return d, nil
}

// CheckMilvusPrefix accepts a prefix of Milvus collection names: empty (the default,
// "troupe_"), or letters, digits and underscores, starting with a letter or
// underscore, at most 64 bytes (Milvus allows 255 bytes in a whole name; the rest
// is the collection's own name).
func CheckMilvusPrefix(p string) error {
	if p == "" {
		return nil
	}
	if err := (milvus.Config{Prefix: p}).Validate(); err != nil {
		return fmt.Errorf("%q: want letters, digits and underscores, starting with a letter or underscore, at most 64 bytes (Milvus collection names)", p)
	}
	return nil
}
