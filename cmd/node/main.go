package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	// Zone data in the binary: the clock tool answers for any IANA zone, even in bare containers.
	_ "time/tzdata"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/internal/cliflags"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/telemetry"
	"github.com/troupe-run/troupe/tools"
)

func main() {
	ctx, stop := signalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, options{})
	stop()
	os.Exit(code)
}

// signalContext is the context a command runs under: SIGINT or SIGTERM ends it,
// and the command stops cleanly (a node hands its sessions over, its calls in
// flight given their grace). A second signal meanwhile ends the process at once,
// the signals' default action restored once the first came: a user who presses
// Ctrl-C again, or a supervisor that signals again, asks not to wait.
//
// The default action is restored before the context ends, so that nothing the
// first signal sets going (the "shutting down" line, the node's stop) comes
// before a second signal would end the process: restored after it, as a
// function run once the context ended, a second signal sent as the stop began
// was still caught, and ignored.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-sigs:
		case <-ctx.Done():
		}
		signal.Stop(sigs) // the last relay of these signals: their default action again
		cancel()
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel()
	}
}

// options lets tests add tools and wrap the model of a real node process.
type options struct {
	extraTools []tools.Tool
	wrapModel  func(llm.Model) llm.Model
	stdin      io.Reader // node tools call - and node mcp's input; nil: os.Stdin
	// terminal, when set, says whether stdin is a terminal (node run asks it for
	// approvals); nil: ask os.Stdin.
	terminal *bool
	// streamText, with --stream auto, prints streamed answers as a terminal's stdout would.
	streamText bool
}

// commandsUsage is the head of usage: the commands. After a usage error it is printed
// alone, below the error, so that the error does not scroll away above the flags.
const commandsUsage = `usage:
  node run [flags] "<task>"
  node serve [flags]
  node mcp [flags]   (an MCP server on stdin and stdout)
  node tools list|call ...   (node tools for its usage)
  node memory add|search|import|consolidate|history ...   (node memory for its usage)
  node rag add|search|ask|list|remove ...   (knowledge bases; node rag for its usage)
  node agents list [--json] [--config FILE] [--agents FILE]   (node agents for its usage)
`

// shortUsage follows a usage error of run, serve or mcp.
const shortUsage = commandsUsage + "\nnode --help lists every flag.\n"

const usage = commandsUsage + `
flags:
  --config FILE          JSON configuration (default .troupe.json when present)
  --data DIR             data directory of the embedded event log (TROUPE_DATA, "data",
                         default .troupe)
  --http ADDR            HTTP listen address for serve (TROUPE_HTTP_ADDR, "http",
                         default 127.0.0.1:8080)
  --http-max-conns N     connections the HTTP server serves at once; more wait to be
                         accepted (TROUPE_HTTP_MAX_CONNS, "http_limits": {"max_conns"},
                         default 4096)
  --auth-token TOKEN     serve: a bearer token that may call the HTTP API (repeatable;
                         TROUPE_AUTH_TOKENS=tok1,tok2; "auth": {"tokens"}). With any
                         token every route but /healthz, /livez, the A2A agent cards and
                         the dashboard's files and login needs Authorization: Bearer
                         TOKEN. A flag shows in ps: prefer the
                         environment or a tokens file
  --auth-tokens-file F   serve: more tokens, one a line, # comments (TROUPE_AUTH_TOKENS_FILE,
                         "auth": {"tokens_file"}); read again on SIGHUP
  --http-rate R          serve: requests a second per token, or per client IP without
                         tokens (TROUPE_HTTP_RATE, "auth": {"rate"}; default 0: no limit);
                         past it 429 with Retry-After
  --http-burst N         serve: requests at once above the rate (TROUPE_HTTP_BURST,
                         "auth": {"burst"}; default twice the rate)
  --http-max-body N      serve: request body bound in bytes of the routes without one of
                         their own (TROUPE_HTTP_MAX_BODY, "http_limits": {"max_body"};
                         default 1048576); past it 413
  --cors-origin ORIGIN   serve: an origin whose pages may call the API (repeatable;
                         TROUPE_CORS_ORIGINS, "cors": {"origins"}; default none)
  --trusted-proxy CIDR   serve: a reverse proxy in front of the node (CIDR or address,
                         repeatable; TROUPE_TRUSTED_PROXIES=10.0.0.0/8,192.0.2.7;
                         "trusted_proxies"; default none). A request from one is
                         counted for the login and rate limits as its client's: the
                         rightmost X-Forwarded-For address that is no trusted proxy.
                         From any other peer X-Forwarded-For is ignored
  --model SPEC           auto | offline | scripted:FILE | PROVIDER[:MODEL] (TROUPE_MODEL, default auto)
  --fallback SPECS       comma-separated models tried when the first fails (TROUPE_FALLBACK);
                         each at its provider's own URL with its own key variable, with
                         the node's per-request timeout (LLM_TIMEOUT, "llm": {"timeout"})
  --kafka HOST:PORT,...  join the cluster on Kafka instead of the in-process bus (TROUPE_KAFKA):
                         tasks from troupe.tasks, results to troupe.results, events to
                         troupe.events; sessions are spread over the nodes by partition.
                         The nodes share one event log: ClickHouse (--clickhouse), or on
                         one host the same --data directory. "run --kafka" only submits
                         the task and follows it: the serving nodes run it
  --group NAME           with --kafka: the consumer group of the cluster's nodes
                         (TROUPE_KAFKA_GROUP, default troupe)
  --topic-prefix P       with --kafka: put P before every topic name on the wire
                         (TROUPE_KAFKA_TOPIC_PREFIX, default none): with prod.,
                         troupe.tasks is prod.troupe.tasks, so clusters or test runs
                         that share a Kafka do not see each other's records (give
                         each its own --group too: groups are not prefixed)
  --roles LIST           with --kafka: sessions, tools, models or all (TROUPE_ROLES,
                         default all); a node without tools or models asks the nodes
                         that have the role, over troupe.tool.requests/model.requests
  --topics FILE          with --kafka: partitions, replication and retention of the topics
                         the node creates, in the format of deploy/kafka/topics.txt
                         (TROUPE_KAFKA_TOPICS; default 12 partitions, 1 replica)
  --reply-topics-create P
                         with --kafka: the reply topics (a task's reply_topic) the
                         node creates when missing: names starting with one of the
                         comma-separated prefixes P, * for any, or none
                         (TROUPE_REPLY_TOPICS_CREATE, "reply_topics_create", default
                         replies.); another is published to only if it exists, else
                         its result is dropped with a warning (it is on troupe.results)
  --reply-topics-max N   with --kafka: reply topics one node process creates at most
                         (TROUPE_REPLY_TOPICS_MAX, "reply_topics_max", default 100;
                         0: none)
  --stored-retention D   with --kafka: how long a message too large for a Kafka
                         record stays in the log for the reference the record
                         carries, at least 1h, or forever (TROUPE_STORED_RETENTION,
                         "stored_retention", default 192h: Kafka's default retention
                         and a day); keep it above the retention of --topics
  --node-id ID           with --kafka: this node's name, unique in the cluster
                         (TROUPE_NODE_ID, default host-pid)
  --sink HOST:PORT       with --kafka: also copy every event of troupe.events into the
                         ClickHouse log at HOST:PORT (consumer group GROUP-sink: with
                         the default --group, troupe-sink)
  --clickhouse HOST:PORT write the event log to ClickHouse (TROUPE_CLICKHOUSE;
                         database TROUPE_CLICKHOUSE_DATABASE, default troupe).
                         Without --kafka, serve and mcp own the log: a node started
                         on it later takes it over, and this one refuses work
  --clickhouse-max-conns N
                         connections to ClickHouse at most, 1 to 1000, shared by the
                         log's writer, the sessions' reads and the API's
                         (TROUPE_CLICKHOUSE_MAX_CONNS, "clickhouse_max_conns", default
                         8); sessions resume half as many at a time. Raise it when
                         the log says "connections to ClickHouse were busy"
  --agents FILE          the agents file (YAML; TROUPE_AGENTS, "agents_file"): named
                         agents a task may run ("agent"; node agents for its usage)
  --agent NAME           run: the agent of the file that runs the task (default: the
                         node's own, "default")
  --max-tokens N         run: the task's token budget, prompt and completion tokens
                         together (default: the agent's "max_tokens", else none); a
                         task that uses it up fails with reason token_budget
  --max-cost-usd X       run: the task's cost budget in US dollars, by the price table
                         ("prices"; a model without a price costs 0) (default: the
                         agent's "max_cost_usd", else none); a task that spends it
                         fails with reason cost_budget
  --approval-timeout D   reject a call of a tool that needs approval ("approval: required"
                         in the agents file) after it has waited this long; 0 waits for
                         ever (TROUPE_APPROVAL_TIMEOUT, "approval_timeout", default 0); an
                         agent's own approval_timeout wins. node run asks the terminal;
                         without one it rejects the call, as it serves no API
  --stream-unwatched     stream every model call of node serve's sessions, watched or
                         not, so that a client that comes mid-call gets its text so
                         far (TROUPE_STREAM_UNWATCHED=true); it costs each call the
                         provider's stream. Default: a call streams when watched
  --idle-timeout D       stop a session's actor after it has been idle this long, a
                         positive Go duration such as 90s or 5m (TROUPE_IDLE_TIMEOUT,
                         "idle_timeout", default 1m); its next task folds it back from
                         the log
  --model-timeout D      fail a model call that has not answered after D, 100ms to 1h
                         (TROUPE_MODEL_TIMEOUT, "model_timeout", default 2m): raise it
                         for a slow model (a local one on CPU, a reasoning model).
                         The provider's own per-request timeout (LLM_TIMEOUT,
                         "llm": {"timeout"}, default 2m; retried within D) follows a
                         longer D unless set; it bounds the fallbacks and the
                         agents' models too. A streamed answer that began and
                         then sends nothing for LLM_STREAM_IDLE_TIMEOUT
                         ("llm": {"stream_idle_timeout"}, default 1m, 0 for none)
                         fails and is retried; the silence before it begins is
                         bounded by the per-request timeout alone
  --tool-timeout D       fail a tool call that has not answered after D, 100ms to 1h
                         (TROUPE_TOOL_TIMEOUT, "tool_timeout", default 30s), for the
                         tools without a timeout of their own: http_fetch keeps its
                         "tools": {"http_fetch": {"timeout"}} (default 30s)
  --effect-reissue D     with --kafka, on a node without the tools or models role:
                         publish a call's request again after D unanswered (a reply
                         can be lost), at least the longer of the two timeouts, at
                         most 2h (TROUPE_EFFECT_REISSUE, "effect_reissue", default
                         that timeout plus 30s); a call of a tool with a longer
                         timeout of its own (http_fetch's) waits that plus 30s first
  --skills DIR           load the Agent Skills of DIR, one folder with a SKILL.md each
                         (TROUPE_SKILLS, "skills_dir"; scripts run only with
                         "skills": {"allow_scripts": true})
  --disclosure S         how tools reach the model: all, catalog or search
                         (TROUPE_DISCLOSURE, "disclosure", default all)
  --max-sessions N       keep at most N session actors alive, 1 to 10000000
                         (TROUPE_MAX_SESSIONS, "max_sessions", default 10000): past it the least recently used idle ones
                         are stopped before their idle timeout; a session with a
                         running task never is, so with all busy the node runs more
  --max-queued-tasks N   let at most N tasks wait their turn behind a session's running
                         one, 1 to 1000000, or -1 for no bound (TROUPE_MAX_QUEUED_TASKS,
                         "max_queued_tasks", default 1000): one more is refused, not
                         recorded (429 over HTTP, a rejected result on troupe.tasks)
  --decision-rules N     record new tasks under version N of the decision rules
                         (TROUPE_DECISION_RULES, "decision_rules", default the build's
                         own): during a rolling upgrade, pin it to the newest version of
                         the oldest build still running, so that any node can go on
                         with the tasks
  --secret-key-file F    the key that seals the secrets the node keeps in its event log
                         (A2A push configs' tokens): 64 hex digits (openssl rand -hex 32)
                         or base64 (TROUPE_SECRET_KEY_FILE, "secret_key_file"; the key
                         itself: TROUPE_SECRET_KEY). Every node of a cluster needs the
                         same key; default: the file secret.key of --data, made at
                         first need (mode 0600)
  --milvus HOST:PORT     keep the memories' and knowledge bases' vectors in Milvus
                         (TROUPE_MILVUS, "memory"/"knowledge": {"milvus"}) instead of the
                         embedded indexes in the data directory
  --milvus-prefix P      put P before the name of every Milvus collection the node makes or
                         uses (TROUPE_MILVUS_PREFIX, "milvus_prefix", default troupe_), so
                         that deployments sharing one Milvus keep apart: letters, digits
                         and underscores, starting with a letter or underscore, at most
                         64 bytes
  --stream auto|on|off   node run: print the model's answers as they stream (auto: when
                         stdout is a terminal; TROUPE_STREAM, default auto)
  --log-format F         format of the log lines on stderr: text, one key=value line
                         each, or json, one object a line with time, level, msg and
                         the line's fields, redacted alike (TROUPE_LOG_FORMAT,
                         "log_format", default text)
  -v                     log at debug level

node mcp [flags] serves the agent's tools and run_task to one MCP client on stdin and
stdout (IDEs, other agents); node serve serves them over Streamable HTTP at /mcp, both
with the resources and prompts of the skills, of the MCP servers and of the
configuration file's "mcp_server". The configuration file's "mcp_servers" give the
agent the tools of MCP servers (stdio commands or Streamable HTTP URLs).

node serve serves the agents over A2A (0.3 and 1.0) too: the card at
/.well-known/agent-card.json, JSON-RPC at /a2a (and /a2a/{agent}); the configuration
file's "a2a": {"public_url", "push_allow"} sets the card's base URL and the webhooks
allowed on private addresses. Its "a2a_agents" ({"name": "card URL"}) give the agent
remote A2A agents as tools a2a__<name>.

Traces (OpenTelemetry) are off unless the standard OTEL_* variables name an
exporter: OTEL_TRACES_EXPORTER=otlp (or console), or OTEL_EXPORTER_OTLP_ENDPOINT
(http://localhost:4318; OTEL_EXPORTER_OTLP_PROTOCOL=grpc for :4317), with
OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER as usual.
`

// runArgsError says what is wrong with node run's arguments after its flags, args,
// which are not one task: none, a flag after the task (the flag package stops at
// the task and leaves it unread), or a task in several arguments.
func runArgsError(args []string) string {
	if len(args) == 0 {
		return `node run has no task: give it as one argument after the flags, node run [flags] "<task>"`
	}
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			return fmt.Sprintf("node run's flags go before the task: %q comes after it", a)
		}
	}
	return fmt.Sprintf(`node run takes one task, in quotes, and got %d arguments after the flags`, len(args))
}

// strayArgsError says what is wrong with the arguments (args) left after the flags of
// node serve or node mcp, which take none.
func strayArgsError(cmd string, args []string) string {
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			return fmt.Sprintf("node %s takes no arguments, got %q (so the flags after it, from %q, were not read)", cmd, args[0], a)
		}
	}
	return fmt.Sprintf("node %s takes no arguments, got %q", cmd, args)
}

// helpArg reports whether arg, in a command's place, asks for its usage.
func helpArg(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// flagsFailed is the exit code of a command whose flags did not parse (err), after
// its usage (text): asked for (-h, --help), on stdout, and 0, so that
// "node serve --help | less" shows it; a bad flag (the flag package has said which
// on stderr), on stderr, and 2.
func flagsFailed(err error, stdout, stderr io.Writer, text string) int {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, text)
		return 0
	}
	fmt.Fprint(stderr, text)
	return 2
}

// secretKey is the node's secret key (node.Config.SecretKey): the file of
// --secret-key-file when the flag is given, else TROUPE_SECRET_KEY's, else the file
// of TROUPE_SECRET_KEY_FILE or "secret_key_file" (file); none: nil.
func secretKey(fs *flag.FlagSet, file string) ([]byte, error) {
	flagged := false
	fs.Visit(func(f *flag.Flag) { flagged = flagged || f.Name == "secret-key-file" })
	if v := os.Getenv("TROUPE_SECRET_KEY"); v != "" && !flagged {
		key, err := node.ParseSecretKey(v)
		if err != nil {
			return nil, fmt.Errorf("TROUPE_SECRET_KEY: %w", err)
		}
		return key, nil
	}
	if file == "" {
		return nil, nil
	}
	return node.ReadSecretKeyFile(file)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, opt options) int {
	// The node's goroutines and the MCP client's log to stderr while run writes its
	// own messages there.
	stdout, stderr = cliflags.Serialize(stdout, stderr)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if helpArg(args[0]) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd := args[0]
	if cmd == "tools" {
		return toolsCmd(ctx, args[1:], stdout, stderr, opt)
	}
	if cmd == "memory" {
		return memoryCmd(ctx, args[1:], stdout, stderr)
	}
	if cmd == "rag" {
		return ragCmd(ctx, args[1:], stdout, stderr)
	}
	if cmd == "agents" {
		return agentsCmd(ctx, args[1:], stdout, stderr, opt)
	}
	if cmd != "run" && cmd != "serve" && cmd != "mcp" {
		fmt.Fprintf(stderr, "error: unknown command %q: want run, serve, mcp, tools, memory, rag or agents\n%s", cmd, shortUsage)
		return 2
	}
	if cmd == "mcp" {
		askForSIGPIPE()
	}
	var hup chan os.Signal
	if cmd == "serve" {
		// From here on a SIGHUP never ends node serve (notifyHUP).
		var stopHUP func()
		hup, stopHUP = notifyHUP()
		defer stopHUP()
	}
	// The configuration file sits below the environment and the flags, so it is read first.
	configPath := ""
	for i, a := range args[1:] {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			configPath = v
		} else if v, ok := strings.CutPrefix(a, "-config="); ok {
			configPath = v
		} else if (a == "--config" || a == "-config") && i+2 < len(args) {
			configPath = args[i+2]
		}
	}
	autoLoaded := false
	if configPath == "" {
		if _, err := os.Stat(provider.DefaultConfigFile); err == nil {
			configPath, autoLoaded = provider.DefaultConfigFile, true
		}
	}
	fc, err := nodeconfig.Load(configPath)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	if autoLoaded {
		// A .troupe.json comes with whatever directory the node runs in (a cloned
		// repository): it may not pick an environment variable to send to its base URL.
		var llmSection struct {
			APIKeyEnv string `json:"api_key_env"`
		}
		if json.Unmarshal(fc.LLM, &llmSection) == nil && llmSection.APIKeyEnv != "" {
			fmt.Fprintf(stderr, "error: %s was loaded because it is in the working directory, and it names llm.api_key_env %q: "+
				"a key variable is paired with a base URL only from a file given with --config, or with LLM_API_KEY and LLM_BASE_URL\n",
				provider.DefaultConfigFile, llmSection.APIKeyEnv)
			return 2
		}
	}
	or := func(key, file, def string) string {
		if v := os.Getenv(key); v != "" {
			return v
		}
		if file != "" {
			return file
		}
		return def
	}
	fs := flag.NewFlagSet("node "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag's error is printed below, with shortUsage
	fs.Usage = func() {}
	fs.String("config", configPath, "configuration file")
	data := fs.String("data", or("TROUPE_DATA", fc.Data, ".troupe"), "data directory of the embedded event log")
	addr := fs.String("http", or("TROUPE_HTTP_ADDR", fc.HTTP, "127.0.0.1:8080"), "HTTP listen address (serve)")
	fileHTTP := fc.HTTPConfig()
	maxConns := fs.Int("http-max-conns", cmp.Or(fileHTTP.MaxConnections, node.DefaultMaxConnections), "connections the HTTP server serves at once (serve)")
	if v := os.Getenv("TROUPE_HTTP_MAX_CONNS"); v != "" {
		if err := fs.Set("http-max-conns", v); err != nil {
			fmt.Fprintln(stderr, "error: TROUPE_HTTP_MAX_CONNS:", err)
			return 2
		}
	}
	// The HTTP API's protection (serve): the file's "auth", "cors" and "http_limits",
	// under the environment and the flags.
	var tokenFlags, corsFlags, proxyFlags []string
	fs.Func("auth-token", "a bearer token that may call the HTTP API (repeatable; serve)", func(v string) error {
		tokenFlags = append(tokenFlags, v)
		return nil
	})
	fs.Func("cors-origin", "an origin whose web pages may call the HTTP API (repeatable; serve)", func(v string) error {
		corsFlags = append(corsFlags, v)
		return nil
	})
	fs.Func("trusted-proxy", "a reverse proxy (CIDR or address) whose X-Forwarded-For names the client (repeatable; serve)", func(v string) error {
		proxyFlags = append(proxyFlags, v)
		return nil
	})
	tokensFile := fs.String("auth-tokens-file", or("TROUPE_AUTH_TOKENS_FILE", fileHTTP.Auth.TokensFile, ""), "file of bearer tokens, one a line (serve)")
	rateFlag := fs.Float64("http-rate", fileHTTP.Auth.Rate, "requests a second per token or client IP; 0: no limit (serve)")
	burstFlag := fs.Int("http-burst", fileHTTP.Auth.Burst, "requests at once above --http-rate (serve; default twice the rate)")
	maxBodyFlag := fs.Int64("http-max-body", cmp.Or(fileHTTP.MaxBody, node.DefaultMaxBody), "request body bound in bytes of the routes without their own (serve)")
	for env, flagName := range map[string]string{"TROUPE_HTTP_RATE": "http-rate", "TROUPE_HTTP_BURST": "http-burst", "TROUPE_HTTP_MAX_BODY": "http-max-body"} {
		if v := os.Getenv(env); v != "" {
			if err := fs.Set(flagName, v); err != nil {
				fmt.Fprintf(stderr, "error: %s: %v\n", env, err)
				return 2
			}
		}
	}
	modelFlag := fs.String("model", or("TROUPE_MODEL", fc.Model, "auto"), "model spec")
	fallbacks := fs.String("fallback", or("TROUPE_FALLBACK", strings.Join(fc.Fallbacks, ","), ""), "fallback model specs, comma-separated")
	chAddr := fs.String("clickhouse", or("TROUPE_CLICKHOUSE", fc.ClickHouse, ""), "ClickHouse native address for the event log")
	chConnsFlag := fs.String("clickhouse-max-conns", or("TROUPE_CLICKHOUSE_MAX_CONNS", strconv.Itoa(cmp.Or(fc.ClickHouseMaxConns, clickhouse.DefaultMaxOpenConns)), ""),
		"connections to ClickHouse at most (the event log's, and the sink's)")
	kafkaAddr := fs.String("kafka", or("TROUPE_KAFKA", fc.Kafka, ""), "Kafka brokers")
	sinkAddr := fs.String("sink", or("TROUPE_SINK_CLICKHOUSE", "", ""), "ClickHouse the event sink writes to (with --kafka)")
	group := fs.String("group", or("TROUPE_KAFKA_GROUP", fc.Group, "troupe"), "consumer group of the cluster's nodes (with --kafka)")
	topicPrefix := fs.String("topic-prefix", or("TROUPE_KAFKA_TOPIC_PREFIX", fc.TopicPrefix, ""), "prefix of every Kafka topic name (with --kafka)")
	rolesFlag := fs.String("roles", or("TROUPE_ROLES", fc.Roles, "all"), "roles of this node (with --kafka)")
	nodeID := fs.String("node-id", or("TROUPE_NODE_ID", fc.NodeID, ""), "this node's name in the cluster (with --kafka)")
	topicsFile := fs.String("topics", or("TROUPE_KAFKA_TOPICS", fc.TopicsFile, ""), "topic layout file, as deploy/kafka/topics.txt (with --kafka)")
	replyCreate := fs.String("reply-topics-create", or("TROUPE_REPLY_TOPICS_CREATE", fc.ReplyTopicsCreate, strings.Join(node.DefaultReplyTopicPrefixes, ",")),
		"prefixes of the reply topics the node creates when missing, comma-separated, * for any, or none (with --kafka)")
	replyMaxDefault := node.DefaultMaxReplyTopics
	if fc.ReplyTopicsMax != nil {
		replyMaxDefault = *fc.ReplyTopicsMax
	}
	replyMax := fs.String("reply-topics-max", or("TROUPE_REPLY_TOPICS_MAX", "", strconv.Itoa(replyMaxDefault)), "reply topics one node process creates at most (with --kafka)")
	storedFlag := fs.String("stored-retention", or("TROUPE_STORED_RETENTION", fc.StoredRetention, ""), "how long a message too large for the bus stays stored (with --kafka)")
	streamUnwatched := fs.Bool("stream-unwatched", false, "stream every model call, watched or not, so that a client that comes mid-call gets its text so far")
	if v := os.Getenv("TROUPE_STREAM_UNWATCHED"); v != "" {
		// A boolean as the flag's (1, t, true, 0, f, false, …): another is refused.
		if err := fs.Set("stream-unwatched", v); err != nil {
			fmt.Fprintf(stderr, "error: TROUPE_STREAM_UNWATCHED=%q: want true or false\n", v)
			return 2
		}
	}
	idleFlag := fs.String("idle-timeout", or("TROUPE_IDLE_TIMEOUT", fc.IdleTimeout, ""), "passivate a session's actor after this long idle")
	fs.String("model-timeout", or("TROUPE_MODEL_TIMEOUT", fc.ModelTimeout, ""), "fail a model call that has not answered after this long (default 2m)")
	fs.String("tool-timeout", or("TROUPE_TOOL_TIMEOUT", fc.ToolTimeout, ""), "fail a tool call that has not answered after this long (default 30s)")
	fs.String("effect-reissue", or("TROUPE_EFFECT_REISSUE", fc.EffectReissue, ""), "publish a remote call's request again after this long unanswered (with --kafka)")
	approvalFlag := fs.String("approval-timeout", or("TROUPE_APPROVAL_TIMEOUT", fc.ApprovalTimeout, ""), "reject a call waiting for approval after this long (0: wait for ever)")
	skillsDir := fs.String("skills", or("TROUPE_SKILLS", fc.SkillsDir, ""), "directory of Agent Skills")
	disclosureFlag := fs.String("disclosure", or("TROUPE_DISCLOSURE", fc.Disclosure, "all"), "tool disclosure: all, catalog or search")
	maxSessions := fs.Int("max-sessions", cmp.Or(fc.MaxSessions, node.DefaultMaxLiveSessions), "session actors kept alive at most")
	if v := os.Getenv("TROUPE_MAX_SESSIONS"); v != "" {
		if err := fs.Set("max-sessions", v); err != nil {
			fmt.Fprintln(stderr, "error: TROUPE_MAX_SESSIONS:", err)
			return 2
		}
	}
	maxQueued := fs.Int("max-queued-tasks", cmp.Or(fc.MaxQueuedTasks, node.DefaultMaxQueuedTasks), "tasks waiting their turn in a session at most (-1: no bound)")
	if v := os.Getenv("TROUPE_MAX_QUEUED_TASKS"); v != "" {
		if err := fs.Set("max-queued-tasks", v); err != nil {
			fmt.Fprintln(stderr, "error: TROUPE_MAX_QUEUED_TASKS:", err)
			return 2
		}
	}
	decisionRules := fs.Int("decision-rules", fc.DecisionRules, "record new tasks under this version of the decision rules (default: the build's own; pin it to the oldest build's during a rolling upgrade)")
	if v := os.Getenv("TROUPE_DECISION_RULES"); v != "" {
		if err := fs.Set("decision-rules", v); err != nil {
			fmt.Fprintln(stderr, "error: TROUPE_DECISION_RULES:", err)
			return 2
		}
	}
	secretKeyFile := fs.String("secret-key-file", or("TROUPE_SECRET_KEY_FILE", fc.SecretKeyFile, ""), "file of the secret key that seals the secrets kept in the event log")
	milvusAddr := fs.String("milvus", os.Getenv("TROUPE_MILVUS"), "Milvus server for the memories' vectors")
	milvusPrefix := fs.String("milvus-prefix", or("TROUPE_MILVUS_PREFIX", fc.MilvusPrefix, ""), "prefix of every Milvus collection name (default troupe_)")
	agentsFlag := fs.String("agents", or("TROUPE_AGENTS", fc.AgentsFile, ""), "agents file (YAML)")
	agentName := fs.String("agent", "", "the agent that runs the task (run; default: the node's own)")
	maxTokens := fs.Int("max-tokens", 0, "the task's token budget (run; default: the agent's)")
	maxCost := fs.Float64("max-cost-usd", 0, "the task's cost budget in US dollars (run; default: the agent's)")
	verbose := fs.Bool("v", false, "log at debug level")
	logFormat := fs.String("log-format", or("TROUPE_LOG_FORMAT", fc.LogFormat, "text"), "format of the log lines on stderr: text or json")
	streamFlag := fs.String("stream", or("TROUPE_STREAM", "", "auto"), "print streamed answers (run): auto, on or off")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "error: node %s: %v\n%s", cmd, err, shortUsage)
		return 2
	}
	if parsed := fs.Lookup("config").Value.String(); parsed != configPath && (parsed != "" || !autoLoaded) {
		// The flags' defaults came from another file than the flag names (or none):
		// never run without the file given. (An empty --config leaves .troupe.json
		// read, as it always did.)
		fmt.Fprintf(stderr, "error: --config %q was not read before the other flags: give it as --config FILE or --config=FILE\n", parsed)
		return 2
	}
	var streamText bool
	switch *streamFlag {
	case "auto":
		streamText = opt.streamText
		if f, ok := stdout.(*os.File); ok && !streamText {
			streamText = cliflags.IsTerminal(f)
		}
	case "on":
		streamText = true
	case "off":
	default:
		fmt.Fprintf(stderr, "error: --stream %q: want auto, on or off\n", *streamFlag)
		return 2
	}
	// The agents file is read before anything starts: a bad one changes nothing.
	var agentsFile nodeconfig.AgentsFile
	if *agentsFlag != "" {
		if agentsFile, err = nodeconfig.LoadAgents(*agentsFlag); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
	}
	if *agentName != "" && cmd != "run" {
		fmt.Fprintf(stderr, "error: --agent is node run's: tasks to node %s name their agent themselves (\"agent\")\n", cmd)
		return 2
	}
	if *maxTokens != 0 && cmd != "run" {
		fmt.Fprintf(stderr, "error: --max-tokens is node run's: tasks to node %s set their budget themselves (\"max_tokens\")\n", cmd)
		return 2
	}
	if *maxCost != 0 && cmd != "run" {
		fmt.Fprintf(stderr, "error: --max-cost-usd is node run's: tasks to node %s set their budget themselves (\"max_cost_usd\")\n", cmd)
		return 2
	}
	task := node.Task{Input: fs.Arg(0), Agent: *agentName, MaxTokens: *maxTokens, MaxCostUSD: *maxCost}
	if *maxConns < 1 {
		fmt.Fprintln(stderr, "error: --http-max-conns must be at least 1")
		return 2
	}
	httpCfg, err := httpConfig(fileHTTP, tokenFlags, corsFlags, proxyFlags, *tokensFile, *rateFlag, *burstFlag, *maxBodyFlag, cmd == "serve")
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	if cmd == "serve" {
		if err := checkListenAddr(*addr); err != nil {
			fmt.Fprintln(stderr, "error: --http:", err)
			return 2
		}
	}
	httpCfg.MaxConnections = *maxConns
	if cmd != "serve" {
		// Only serve serves the HTTP API: run and mcp need no tokens file.
		httpCfg.Auth, httpCfg.CORS = node.AuthConfig{}, node.CORSConfig{}
	}
	chConns, err := parseMaxConns("--clickhouse-max-conns (TROUPE_CLICKHOUSE_MAX_CONNS, \"clickhouse_max_conns\")", *chConnsFlag)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	if *maxSessions < 1 || *maxSessions > nodeconfig.MaxMaxSessions {
		fmt.Fprintf(stderr, "error: --max-sessions %d is out of range: want 1 to %d\n", *maxSessions, nodeconfig.MaxMaxSessions)
		return 2
	}
	if *maxQueued != -1 && (*maxQueued < 1 || *maxQueued > nodeconfig.MaxMaxQueuedTasks) {
		fmt.Fprintf(stderr, "error: --max-queued-tasks %d is out of range: want 1 to %d, or -1 for no bound\n", *maxQueued, nodeconfig.MaxMaxQueuedTasks)
		return 2
	}
	if cmd == "run" {
		// The task is checked before anything starts, so that a bad one leaves nothing
		// behind: no data directory, no session ID printed for a session that never runs.
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "error:", runArgsError(fs.Args()))
			fmt.Fprint(stderr, shortUsage)
			return 2
		}
		if err := task.Validate(); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
		if !agentsFile.Has(*agentName) && *agentName != "" && *agentName != "default" {
			fmt.Fprintf(stderr, "error: unknown agent %q: %s\n", *agentName, agentsFile.Known())
			return 2
		}
	}
	idle, err := parseIdleTimeout(*idleFlag)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	modelTimeout, toolTimeout, effectReissue, err := callTimeouts(fs)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	approvalTimeout, err := nodeconfig.ParseApprovalTimeout(*approvalFlag)
	if err != nil {
		fmt.Fprintln(stderr, "error: --approval-timeout:", err)
		return 2
	}
	var storedRetention time.Duration // 0: node.DefaultStoredRetention
	if *storedFlag != "" {
		if storedRetention, err = nodeconfig.ParseStoredRetention(*storedFlag); err != nil {
			fmt.Fprintln(stderr, "error: --stored-retention:", err)
			return 2
		}
	}
	if err := nodeconfig.CheckMilvusPrefix(*milvusPrefix); err != nil {
		fmt.Fprintln(stderr, "error: --milvus-prefix:", err)
		return 2
	}
	fc.MilvusPrefix = *milvusPrefix
	// Like --group, the prefix means nothing without --kafka.
	topics := kafka.TopicLayout{Prefix: *topicPrefix, InitializeTopics: true}
	if err := topics.Validate(); err != nil && *kafkaAddr != "" {
		fmt.Fprintln(stderr, "error: --topic-prefix:", err)
		return 2
	}
	// Reply topics (a task's reply_topic, named by any client) are created only
	// when the operator allows their names, and up to a count.
	replyTopics := &node.ReplyTopics{}
	if replyTopics.Create, err = node.ParseReplyTopicPrefixes(*replyCreate); err != nil && *kafkaAddr != "" {
		fmt.Fprintln(stderr, "error: --reply-topics-create (TROUPE_REPLY_TOPICS_CREATE, \"reply_topics_create\"):", err)
		return 2
	}
	if replyTopics.Max, err = strconv.Atoi(strings.TrimSpace(*replyMax)); (err != nil || replyTopics.Max < 0 || replyTopics.Max > node.MaxReplyTopicsMax) && *kafkaAddr != "" {
		fmt.Fprintf(stderr, "error: --reply-topics-max (TROUPE_REPLY_TOPICS_MAX, \"reply_topics_max\") %q: want a count of topics from 0 to %d (default %d)\n", *replyMax, node.MaxReplyTopicsMax, node.DefaultMaxReplyTopics)
		return 2
	}
	err = nil
	topics.Creatable, topics.Settled = replyTopics.Creatable, replyTopics.Settled
	if *topicsFile != "" && *kafkaAddr != "" {
		// Topics the node creates get the file's partitions, replication and
		// retention; the others (and every topic without a file) get 12 partitions,
		// one replica.
		f, err := os.Open(*topicsFile)
		if err != nil {
			fmt.Fprintln(stderr, "error: --topics:", err)
			return 2
		}
		topics.Topics, err = kafka.ParseTopics(f)
		f.Close()
		replyTopics.Listed = slices.Collect(maps.Keys(topics.Topics))
		if err == nil {
			err = topics.Validate()
		}
		if err == nil {
			err = node.CheckLayoutTopics(slices.Collect(maps.Keys(topics.Topics)))
		}
		if err != nil {
			fmt.Fprintf(stderr, "error: --topics %s: %v\n", *topicsFile, err)
			return 2
		}
		if msg := storedOutlived(topics.Topics, cmp.Or(storedRetention, node.DefaultStoredRetention)); msg != "" {
			fmt.Fprintf(stderr, "error: --topics %s: %s\n", *topicsFile, msg)
			return 2
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	if cmd == "run" && !*verbose {
		level = slog.LevelWarn
	}
	// The file's "llm" section as read above: the file may be a pipe, read once.
	llmBase, err := provider.LoadSection(configPath, fc.LLM, nil)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	// Every secret the node is given: the events keep them out (node.Config.Secrets),
	// and so do the node's log lines, which carry text the node does not write itself
	// (a stdio MCP server's stderr, a server's error naming its URL).
	// One Redactor for both: it learns the secrets found below (the models' keys) when
	// the node is made (node.Config.Redactor), and those the node obtains at run time
	// (a reloaded tokens file's, an MCP server's OAuth tokens).
	secrets := slices.Concat(llmBase.Secrets(nil), nodeconfig.MCPSecrets(fc.MCPServers), nodeconfig.A2ASecrets(fc.A2AAgents), authSecrets(httpCfg.Auth))
	red := redact.New(append(secrets, telemetry.EnvSecrets()...)...)
	var lines slog.Handler
	switch *logFormat {
	case "text":
		lines = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	case "json":
		lines = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	default:
		fmt.Fprintf(stderr, "error: --log-format %q: want text or json\n", *logFormat)
		return 2
	}
	logger := slog.New(redact.NewHandler(lines, red))
	// OpenTelemetry's errors and its own log lines (a malformed OTEL_* setting,
	// with a header's value) go to the node's log, redacted, instead of the
	// standard log package.
	telemetry.LogErrors(logger)
	if *kafkaAddr != "" && *topicPrefix != "" {
		// Log lines name topics as the README does (troupe.tasks, troupe.poison); the
		// prefix on every line says which Kafka topics those are.
		logger = logger.With("topic_prefix", *topicPrefix)
	}

	if modelTimeout > llmBase.Timeout && llmBase.TimeoutSource == "" {
		// The provider's client ends each request at its own timeout, and the
		// gateway retries it: left at its default, it would cut (and pay again for)
		// every call of a model the user gave longer. It follows the model timeout,
		// for every model of the node: fallbacks and the agents' models take it below
		// (TimeoutEnv). One set on purpose is kept: a shorter one is retried within
		// the model timeout.
		llmBase.Timeout, llmBase.TimeoutSource = min(modelTimeout, provider.MaxTimeout), "--model-timeout"
		if (*modelFlag != "offline" && !strings.HasPrefix(*modelFlag, "scripted:")) || *fallbacks != "" || len(agentsFile.Agents) > 0 {
			logger.Info(fmt.Sprintf("the provider's per-request timeout (\"llm\": {\"timeout\"}, %s) is not set: it follows the model timeout (--model-timeout), %s, instead of its default %s",
				provider.EnvTimeout, llmBase.Timeout, openai.DefaultTimeout))
		}
	}
	model, why, key, err := provider.FromSpec(ctx, *modelFlag, llmBase, nil)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	secrets = append(secrets, key)
	var fallback []llm.Model
	for _, spec := range nonEmpty(strings.Split(*fallbacks, ",")) {
		m, fwhy, fkey, err := provider.FallbackFromSpec(ctx, spec, llmBase.TimeoutEnv(nil))
		if err != nil {
			fmt.Fprintf(stderr, "error: fallback %s: %v\n", spec, err)
			return 2
		}
		why += "; fallback " + spec + ": " + fwhy
		fallback = append(fallback, m)
		secrets = append(secrets, fkey)
	}
	if opt.wrapModel != nil {
		model = opt.wrapModel(model)
	}
	if len(agentsFile.Agents) > 0 {
		// The agents' own models, before anything starts: one that cannot be reached
		// exits 2 with its line. A spec the node runs already is that model.
		known := map[string]llm.Model{*modelFlag: model}
		for i, spec := range nonEmpty(strings.Split(*fallbacks, ",")) {
			known[spec] = fallback[i]
		}
		keys, err := agentsFile.ResolveModels(ctx, known, llmBase.TimeoutEnv(nil))
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
		secrets = append(secrets, keys...)
	}
	gw, err := fc.Gateway.Config()
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	cfg := node.Config{DataDir: *data, LockWait: node.DataLockWait, Model: model, Fallbacks: fallback, Gateway: gw, Logger: logger, Secrets: secrets, Redactor: red,
		IdleTimeout: idle, MaxLiveSessions: *maxSessions, MaxQueuedTasks: *maxQueued, StreamUnwatched: *streamUnwatched,
		ModelTimeout: modelTimeout, ToolTimeout: toolTimeout, EffectReissue: effectReissue, DecisionRules: *decisionRules}
	if err := actors.CheckRecordRules(cfg.DecisionRules); err != nil {
		fmt.Fprintln(stderr, "error: --decision-rules:", err)
		return 2
	}
	if cfg.SecretKey, err = secretKey(fs, *secretKeyFile); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	cfg.HTTP = httpCfg
	// The agent is the file's (internal/nodeconfig), as replay verify rebuilds it.
	// The files tool does not touch the node's own files when its root holds them.
	protect := nodeconfig.Protected(*data, fs.Lookup("config").Value.String(), *agentsFlag, *tokensFile, *secretKeyFile, *topicsFile)
	agent, err := fc.Agent(nodeconfig.AgentOptions{SkillsDir: *skillsDir, Disclosure: *disclosureFlag, ExtraTools: opt.extraTools, Logger: logger,
		Protect: protect})
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	agent.Apply(&cfg)
	cfg.ApprovalTimeout = approvalTimeout // the file's, unless the environment or a flag says otherwise
	embedder, embedderKey, err := fc.NewToolEmbedder(ctx, *modelFlag, llmBase)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	cfg.ToolEmbedder, cfg.Secrets = embedder, append(cfg.Secrets, embedderKey)
	// Agent memory: node serve always serves /v1/memories (embedded defaults); the
	// agent gets the memory tool when the "memory" section says "tool": true.
	if cmd != "run" || fc.Memory != nil {
		memCfg, closeVectors, memKey, err := fc.MemoryConfig(ctx, *milvusAddr)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return configOrFault(err)
		}
		defer closeVectors()
		cfg.Memory, cfg.Secrets = &memCfg, append(cfg.Secrets, memKey)
		cfg.MemoryWriteAfterTask = cfg.MemoryTool != nil && fc.Memory.WriteAfterTask
		cfg.Consolidation = consolidation(fc.Memory, cmd == "serve")
	}
	// Knowledge bases: node serve always serves /v1/kb; the agent gets the rag tool
	// when the "knowledge" section says "tool": true.
	if cmd != "run" || fc.Knowledge != nil {
		kbCfg, closeVectors, kbKey, err := fc.KnowledgeConfig(ctx, *milvusAddr)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return configOrFault(err)
		}
		defer closeVectors()
		cfg.Knowledge, cfg.Secrets = &kbCfg, append(cfg.Secrets, kbKey) // the rag tool: agent.Apply
	}
	log, err := openLog(ctx, *chAddr, or("TROUPE_CLICKHOUSE_DATABASE", fc.ClickHouseDatabase, "troupe"), chConns)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if log != nil {
		cfg.Log = log
		defer log.Close()
		// Resuming sessions reads their logs: leave half the connections to the
		// writer and the API.
		cfg.ResumeConcurrency = max(1, chConns/2)
	}
	// The MCP servers' tools join the agent's (cmd/node/mcp.go).
	_, stopMCP, err := startMCP(ctx, fc.MCPServers, &cfg, logger)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	defer stopMCP()
	if len(agentsFile.Agents) > 0 {
		// The agents' tools are the node's, as the MCP servers' catalog leaves them.
		if err := agentsFile.CheckNodeTools(cfg); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
		cfg.Agents = agentsFile.NodeAgents()
	}
	if len(cfg.Chains) > 0 {
		// A chain whose step calls a tool the agent does not have is a configuration
		// error, said before the node starts.
		if err := cfg.Validate(); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
	}
	roles, err := node.ParseRoles(*rolesFlag)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	attach := func(*node.Node) {}
	if *kafkaAddr != "" {
		clients, err := kafka.DialNode(strings.Split(*kafkaAddr, ","), *group, topics, node.NewBusLogger(logger))
		if err != nil {
			fmt.Fprintln(stderr, "error: kafka:", err)
			return 1
		}
		defer func() {
			// Close waits for the consumers to settle and the publisher to flush,
			// within the clients' close timeouts; what it could not finish is said.
			if err := clients.Close(); err != nil {
				logger.Warn("kafka: closing the node's clients", "err", err)
			}
		}()
		cfg.Bus = &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: clients.Live,
			Tools: clients.Tools, Models: clients.Models, Sharded: true, Partition: kafka.PartitionOf, StoredRetention: storedRetention,
			TopicPrefix: topics.Prefix}
		cfg.NodeID, cfg.Roles = *nodeID, roles
		attach = func(n *node.Node) { clients.SetOwner(n) }
		if cfg.Log == nil {
			// Nodes on one host share the data directory's log; on several hosts,
			// they share ClickHouse.
			l, err := sqlite.Open(ctx, sqlite.Config{Dir: *data, Shared: true, LockWait: node.DataLockWait})
			if err != nil {
				return startFailed(ctx, err, logger, stderr)
			}
			defer l.Close()
			cfg.Log = l
		}
		if *sinkAddr != "" {
			stopSink, err := startSink(ctx, strings.Split(*kafkaAddr, ","), topics, *group, *sinkAddr,
				or("TROUPE_CLICKHOUSE_DATABASE", fc.ClickHouseDatabase, "troupe"), chConns, logger)
			if err != nil {
				fmt.Fprintln(stderr, "error: sink:", err)
				return 1
			}
			defer stopSink()
		}
	} else if *sinkAddr != "" {
		fmt.Fprintln(stderr, "error: --sink needs --kafka: it copies troupe.events")
		return 2
	} else if roles != node.RoleAll {
		fmt.Fprintln(stderr, "error: --roles needs --kafka: an embedded node does everything")
		return 2
	}
	switch cmd {
	case "run":
		in, terminal := opt.stdin, opt.terminal
		if in == nil {
			in = os.Stdin
		}
		if terminal == nil {
			t := cliflags.IsTerminal(os.Stdin)
			terminal = &t
		}
		return runTask(ctx, cfg, attach, task, why, in, *terminal, streamText, stdout, stderr)
	case "mcp":
		if fs.NArg() != 0 {
			fmt.Fprintf(stderr, "error: %s\n%s", strayArgsError(cmd, fs.Args()), shortUsage)
			return 2
		}
		logger.Info("model", "name", model.Name(), "why", why)
		in := opt.stdin
		if in == nil {
			in = os.Stdin
		}
		return serveMCP(ctx, cfg, fc.MCPServer, attach, in, stdout, stderr)
	default:
		if fs.NArg() != 0 {
			fmt.Fprintf(stderr, "error: %s\n%s", strayArgsError(cmd, fs.Args()), shortUsage)
			return 2
		}
		logger.Info("model", "name", model.Name(), "why", why)
		// node serve serves its agents over A2A too (node/a2a.go).
		cfg.A2A = &node.A2AConfig{}
		if fc.A2A != nil {
			cfg.A2A = fc.A2A
		}
		return serve(ctx, cfg, fc.MCPServer, attach, *addr, hup, stderr)
	}
}

// runTask runs node run's task and follows it; it asks the terminal in (terminal:
// whether it is one) to answer the task's approvals (asker).
//
// With streamText, it also prints the model's answers as they stream (Node.WatchDeltas).
func runTask(ctx context.Context, cfg node.Config, attach func(*node.Node), task node.Task, why string, in io.Reader, terminal, streamText bool, stdout, stderr io.Writer) int {
	if cfg.Bus != nil {
		// On a cluster, run submits the task and follows it: a node of the cluster runs
		// it. Joining the cluster's groups for the length of one task would move every
		// node's sessions twice.
		cfg.Roles = node.RoleClient
	}
	// run runs its own task only: the other unfinished sessions of the data directory
	// are left to node serve (resuming them here would repeat their model calls, and
	// leave them half-run when this task ends).
	cfg.Resume = node.ResumeNone
	// Nor does it take a ClickHouse log from the node serve that owns it (a
	// serving node would refuse all work from then on): it writes its task's
	// session beside it.
	cfg.ShareLog = true
	// Nobody comes to watch during a call of run's task: its calls stream only to
	// print them (--stream).
	cfg.StreamUnwatched = false
	n, err := node.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer n.Close()
	attach(n)
	// On a cluster this node runs no session, so Watch reads troupe.events: it returns
	// once each partition's end offset is fixed (kafka: FromLatest without a group);
	// the task is published only after Watch, so a task the cluster finishes at once
	// has none of its events missed.
	stopNode, err := n.Start(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer stopNode()
	id := "cli-" + actors.UUIDv7{}.NewID()
	// A feed that falls behind (a burst of events past a watcher's backlog) reads
	// what it missed from the log and goes on, rather than end run before its task.
	events, stop, lost := n.WatchResuming(ctx, id, streamText, 0)
	defer stop()
	if cfg.Bus != nil {
		fmt.Fprintf(stdout, "session %s (submitted to troupe.tasks: a node of the cluster runs it)\n", id)
	} else {
		model := cfg.Model
		for _, a := range cfg.Agents {
			if a.Name == task.Agent && a.Model != nil {
				model, why = a.Model, "agent "+a.Name+"'s own model (its agents file's \"model\")"
			}
		}
		fmt.Fprintf(stdout, "session %s (model: %s — %s)\n", id, model.Name(), why)
	}
	task.SessionID = id
	if _, err := n.Submit(ctx, task); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if cfg.Bus != nil {
		events = hintWhenSilent(ctx, events, clusterSilence, func() {
			fmt.Fprintf(stderr, "still waiting: no node has recorded the task after %s; do nodes serve this cluster, with the same --topic-prefix? (Ctrl-C leaves the task to the cluster)\n",
				clusterSilence)
		})
	}
	code, err := node.NewAsker(n, "node run", id, in, terminal, cfg.Bus != nil, stdout).Follow(ctx, events, 1)
	if why := lost(); errors.Is(err, node.ErrLostFeed) && why != nil {
		err = fmt.Errorf("%w: %w", err, why)
	}
	switch {
	case ctx.Err() != nil && cfg.Bus != nil:
		fmt.Fprintf(stderr, "interrupted; the cluster goes on with session %s\n", id)
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "interrupted; the session is recorded and resumes with: node serve --data %s\n", n.DataDir())
	case err != nil:
		fmt.Fprintln(stderr, "error:", err)
	default:
		fmt.Fprintf(stdout, "session %s\n", id)
	}
	return code
}

// clusterSilence is how long node run --kafka waits for the first event of its task
// before it says that no node may be serving the topics it submitted to.
const clusterSilence = 10 * time.Second

// hintWhenSilent passes events on, and calls hint once if none came within
// silence: a task no node ever takes would otherwise wait without a word.
func hintWhenSilent(ctx context.Context, events <-chan messages.Envelope, silence time.Duration, hint func()) <-chan messages.Envelope {
	out := make(chan messages.Envelope)
	go func() {
		defer close(out)
		t := time.NewTimer(silence)
		defer t.Stop()
		quiet := true
		for {
			select {
			case e, ok := <-events:
				if !ok {
					return
				}
				quiet = false
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			case <-t.C:
				if quiet {
					hint()
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// checkListenAddr says what is wrong with a listen address that has no port or an
// unusable one, with the forms that work: net.Listen's own "missing port in
// address" named neither the flag nor what to write.
func checkListenAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if _, perr := strconv.ParseUint(addr, 10, 16); perr == nil {
			return fmt.Errorf("%q has no host: want 127.0.0.1:%s (this host only) or :%s (every interface)", addr, addr, addr)
		}
		return fmt.Errorf("%q: want HOST:PORT, e.g. 127.0.0.1:8080 (this host only) or :8080 (every interface)", addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return fmt.Errorf("%q: the port %q is no port: want HOST:PORT, e.g. %s:8080", addr, port, cmp.Or(host, "127.0.0.1"))
	}
	return nil
}

func serve(ctx context.Context, cfg node.Config, served mcp.ServedConfig, attach func(*node.Node), addr string, hup <-chan os.Signal, stderr io.Writer) int {
	// Listen first: a node started by mistake on the address a node serves (on
	// the same ClickHouse log) fails before New takes the log from it.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	// Until New returns (it may wait up to cfg.LockWait for the data lock the node
	// before this one still holds), the port answers: /livez 200, /healthz and
	// every other route 503 with the reason (node.StartingHandler). A port bound
	// but silent would fail a liveness probe, and the orchestrator would restart
	// the node, into the same wait.
	handOver := serveStarting(ln, cfg)
	n, err := node.New(ctx, cfg)
	handOver()
	if err != nil {
		ln.Close()
		return startFailed(ctx, err, cfg.Logger, stderr)
	}
	attach(n)
	// Timeouts and a connection limit (cfg.HTTP); live streams end when shutdown begins.
	mcpSrv := mountMCP(ctx, n, cfg, served)
	srv := n.HTTPServer()
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(runCtx) }()
	httpErr := make(chan error, 1)
	go func() { httpErr <- srv.Serve(ln) }()
	cfg.Logger.Info("node serving", "http", ln.Addr().String(), "data", n.DataDir(), "model", cfg.Model.Name(), "roles", cfg.Roles.String(),
		"auth", cfg.HTTP.Auth.Enabled())
	if !cfg.HTTP.Auth.Enabled() && !loopback(ln.Addr()) {
		cfg.Logger.Warn("the HTTP API listens beyond this host without authentication: whoever reaches "+ln.Addr().String()+
			" can run tasks and read every session; give tokens with --auth-token, TROUPE_AUTH_TOKENS or the configuration's \"auth\"",
			"http", ln.Addr().String())
	}
	defer reloadOnHUP(hup, n, cfg.HTTP.Auth.TokensFile != "", cfg.Logger)()
	code := 0
	select {
	case <-ctx.Done():
		cfg.Logger.Info("shutting down")
	case err := <-runErr:
		cfg.Logger.Error("router stopped", "err", err)
		code = 1
	case err := <-httpErr:
		cfg.Logger.Error("http server stopped", "err", err)
		code = 1
	}
	shutCtx, shutCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer shutCancel()
	// The MCP clients' streams end with the node's own (Shutdown ends those).
	mcpSrv.CloseStreams()
	if err := srv.Shutdown(shutCtx); err != nil {
		cfg.Logger.Warn("http shutdown", "err", err)
	}
	// Close first: the router finishes subscribing a handler it is starting, then
	// stops them all. Canceling Run's context first would abandon that subscription,
	// and the router would wait out its close timeout for a handler that never ran.
	if err := n.Close(); err != nil {
		cfg.Logger.Error("close node", "err", err)
		code = 1
	}
	cancel()
	cfg.Logger.Info("stopped")
	return code
}

// startFailed reports that a server could not start, with err, and returns the
// process's exit code: 1, but 0 when ctx, the command's (signalContext), ended
// first. A SIGTERM or a Ctrl-C while the node waits to start (up to
// node.DataLockWait for the data lock that the node before it, still stopping,
// holds) asks it to stop, and it stops cleanly: it says so, and exits 0 rather
// than report the wait it abandoned as an error, which a supervisor would count
// as a failure and may answer by starting it again.
func startFailed(ctx context.Context, err error, logger *slog.Logger, stderr io.Writer) int {
	if ctx.Err() != nil {
		logger.Info("stopped before starting: asked to stop while the node was starting", "reason", err.Error())
		return 0
	}
	fmt.Fprintln(stderr, "error:", err)
	return 1
}

// serveStarting serves node.StartingHandler on ln, a TCP listener, until the
// function it returns is called: that one stops accepting, and leaves ln open
// and accepting again for the node's own server. The connections accepted
// until then are served on: each answers one request (they are not kept
// alive), within startingHandOver, and closes. The server is not shut down:
// Shutdown closes a connection whose request it reads meanwhile without an
// answer, and waits for those that have sent nothing yet (up to
// startingHandOver, then closes them), while the node, ready, serves nothing.
func serveStarting(ln net.Listener, cfg node.Config) func() {
	tl, ok := ln.(interface{ SetDeadline(time.Time) error })
	if !ok {
		return func() {}
	}
	srv := &http.Server{Handler: node.StartingHandler(cfg), ReadHeaderTimeout: startingHandOver, WriteTimeout: startingHandOver,
		ErrorLog: slog.NewLogLogger(cfg.Logger.With("component", "http").Handler(), slog.LevelError)}
	srv.SetKeepAlivesEnabled(false)
	pl := &pausedListener{Listener: ln, dl: tl}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(pl)
	}()
	return func() {
		pl.paused.Store(true)
		_ = tl.SetDeadline(time.Unix(1, 0)) // ends the Accept under way
		<-served
		_ = tl.SetDeadline(time.Time{})
	}
}

// startingHandOver bounds a request and an answer of node.StartingHandler.
const startingHandOver = 2 * time.Second

// pausedListener is a listener that accepts until paused, then answers Accept
// with errHandedOver, which ends the server's Serve (a timeout would have it
// retry); its Close leaves the listener open: the server that closes it
// hands the listener over to another.
type pausedListener struct {
	net.Listener
	dl     interface{ SetDeadline(time.Time) error }
	paused atomic.Bool
}

// errHandedOver ends the Serve of a server whose listener was handed over.
var errHandedOver = errors.New("the listener was handed over to the node's server")

func (l *pausedListener) Accept() (net.Conn, error) {
	if l.paused.Load() {
		return nil, errHandedOver
	}
	c, err := l.Listener.Accept()
	if err != nil && l.paused.Load() {
		return nil, errHandedOver
	}
	return c, err
}

func (l *pausedListener) Close() error { return nil }

// nonEmpty returns the items of list trimmed, without the empty ones.
func nonEmpty(list []string) []string {
	var out []string
	for _, s := range list {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// storedOutlived names a topic of the layout that carries references to stored
// messages (tasks, effect requests and replies) and keeps its records longer than
// the stored messages are kept (retention; negative: for good), or returns "".
func storedOutlived(layout map[string]kafka.TopicConfig, retention time.Duration) string {
	if retention < 0 {
		return ""
	}
	for _, topic := range []string{messages.TopicTasks, messages.TopicToolRequests, messages.TopicModelRequests, messages.TopicReplies} {
		c, ok := layout[topic]
		if !ok {
			continue
		}
		ms, err := strconv.ParseInt(c.Configs["retention.ms"], 10, 64)
		if err != nil {
			continue
		}
		if ms < 0 || time.Duration(ms)*time.Millisecond > retention {
			return fmt.Sprintf("topic %s keeps its records longer (retention_ms %d) than a message too large for a record stays stored for their references (%s): give --stored-retention a longer duration, or forever", topic, ms, retention)
		}
	}
	return ""
}
