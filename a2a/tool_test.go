package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// remoteAgent is an A2A peer written by hand: its card (streaming or not), and a
// JSON-RPC endpoint whose answer to each method the test gives. Each request's
// method arrives on methods.
type remoteAgent struct {
	srv     *httptest.Server
	methods chan string
}

// rpcAnswer answers one JSON-RPC request: w is the response, id the request's ID.
type rpcAnswer func(w http.ResponseWriter, r *http.Request, id json.RawMessage, params json.RawMessage)

func newRemoteAgent(t *testing.T, streaming bool, answers map[string]rpcAnswer) *remoteAgent {
	t.Helper()
	ra := &remoteAgent{methods: make(chan string, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":"fake","description":"a fake agent","version":"1","url":%q,"preferredTransport":"JSONRPC",
			"protocolVersion":"0.3.0","capabilities":{"streaming":%t},"defaultInputModes":["text"],"defaultOutputModes":["text"],"skills":[]}`,
			ra.srv.URL+"/rpc", streaming)
	})
	mux.HandleFunc("POST /rpc", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ra.methods <- req.Method
		answer, ok := answers[req.Method]
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no %s here"}}`, req.ID, req.Method)
			return
		}
		answer(w, r, req.ID, req.Params)
	})
	ra.srv = httptest.NewServer(mux)
	t.Cleanup(ra.srv.Close)
	return ra
}

func (ra *remoteAgent) tool(t *testing.T, cancelRemote func(error) bool) *a2a.Tool {
	t.Helper()
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, CancelRemote: cancelRemote})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// next returns the next method the agent was asked, within 10 s.
func (ra *remoteAgent) next(t *testing.T) string {
	t.Helper()
	select {
	case m := <-ra.methods:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("the remote agent was asked nothing within 10 s")
	}
	return ""
}

// sse writes the results as a stream of JSON-RPC responses to request id.
func sse(w http.ResponseWriter, id json.RawMessage, results ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, res := range results {
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}\n\n", id, res)
		w.(http.Flusher).Flush()
	}
}

const (
	workingTask = `{"kind":"task","id":"t-1","contextId":"c-1","status":{"state":"working"}}`
	canceled    = `{"kind":"task","id":"t-1","contextId":"c-1","status":{"state":"canceled"}}`
)

// The answer of a streaming agent is its task as its events leave it: an artifact's
// appended parts joined to it, the last status.
func TestToolAssemblesAStreamedAnswer(t *testing.T) {
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			sse(w, id, workingTask,
				`{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","artifact":{"artifactId":"a","parts":[{"kind":"text","text":"draft"}]}}`,
				`{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","artifact":{"artifactId":"a","parts":[{"kind":"text","text":"Hel"}]}}`,
				`{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","append":true,"artifact":{"artifactId":"a","parts":[{"kind":"text","text":"lo"}]}}`,
				`{"kind":"status-update","taskId":"t-1","contextId":"c-1","final":true,"status":{"state":"completed"}}`)
		},
	})
	out, err := ra.tool(t, nil).Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"hi"}`})
	if err != nil || out != "Hel\nlo\n\n(context_id: c-1)" {
		t.Fatalf("Call = %q, %v", out, err)
	}
}

// An agent whose card says it does not stream is sent message/send.
func TestToolSendsToAnAgentThatDoesNotStream(t *testing.T) {
	ra := newRemoteAgent(t, false, map[string]rpcAnswer{
		"message/send": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"kind":"task","id":"t-1","contextId":"c-1","status":{"state":"completed"},
				"artifacts":[{"artifactId":"a","parts":[{"kind":"text","text":"42"}]}]}}`, id)
		},
	})
	out, err := ra.tool(t, nil).Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"6*7?"}`})
	if err != nil || out != "42\n\n(context_id: c-1)" {
		t.Fatalf("Call = %q, %v", out, err)
	}
	if m := ra.next(t); m != "message/send" {
		t.Fatalf("the agent was asked %s", m)
	}
}

var errCancelled = errors.New("the session cancelled the call")

// A call whose context ends with a cause CancelRemote accepts sends tasks/cancel for
// the remote task, also when it ended before the agent's first event named the
// task: the call reads on until it does. A cause it refuses (the node stopping)
// leaves the remote task running.
func TestToolCancelsTheRemoteTask(t *testing.T) {
	for _, c := range []struct {
		name        string
		cause       error
		beforeFirst bool
		cancels     bool
	}{
		{"cancelled", errCancelled, false, true},
		{"cancelled before the first event", errCancelled, true, true},
		{"stopping", errors.New("the node stops"), false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			ra := newRemoteAgent(t, true, map[string]rpcAnswer{
				"message/stream": func(w http.ResponseWriter, r *http.Request, id, _ json.RawMessage) {
					if c.beforeFirst {
						<-release
					}
					sse(w, id, workingTask)
					<-r.Context().Done() // the task runs until the client goes
				},
				"tasks/cancel": func(w http.ResponseWriter, _ *http.Request, id, params json.RawMessage) {
					var p struct {
						ID string `json:"id"`
					}
					if err := json.Unmarshal(params, &p); err != nil || p.ID != "t-1" {
						t.Errorf("tasks/cancel of %s, %v; want t-1", params, err)
					}
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, canceled)
				},
			})
			tool := ra.tool(t, func(cause error) bool { return errors.Is(cause, errCancelled) })
			ctx, cancel := context.WithCancelCause(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := tool.Call(ctx, tools.Call{Key: "s/4", Arguments: `{"message":"work"}`})
				done <- err
			}()
			if m := ra.next(t); m != "message/stream" {
				t.Fatalf("the agent was asked %s", m)
			}
			cancel(c.cause)
			if c.beforeFirst {
				close(release)
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the call did not return after its context ended")
			}
			if !errors.Is(err, c.cause) {
				t.Errorf("Call's error %v does not say why it ended (%v)", err, c.cause)
			}
			select {
			case m := <-ra.methods:
				if !c.cancels || m != "tasks/cancel" {
					t.Errorf("after the call ended the agent was asked %s (cancels: %v)", m, c.cancels)
				}
			default:
				if c.cancels {
					t.Error("the remote task was not cancelled")
				}
			}
		})
	}
}

// The credentials of a remote agent's card URL (a password, ?api_key=...) are not
// the model's to read: the tool's description, which every model request carries,
// and its errors, which the session records, name the URL with them redacted,
// whatever their length.
func TestToolNamesItsCardURLWithoutCredentials(t *testing.T) {
	for _, card := range []string{
		"http://agent:pw-card-7Q3@127.0.0.1:1/.well-known/agent-card.json",
		"http://127.0.0.1:1/.well-known/agent-card.json?api_key=k9Z",
	} {
		tool, err := a2a.NewTool(a2a.ToolConfig{Name: "remote", CardURL: card, CardTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		desc := tool.Spec().Description
		_, callErr := tool.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"message":"hi"}`})
		if callErr == nil || !strings.Contains(desc, "127.0.0.1:1") || !strings.Contains(desc+callErr.Error(), "[REDACTED]") {
			t.Fatalf("%s: description %q, error %v: want the URL with its credentials redacted", card, desc, callErr)
		}
		for _, secret := range []string{"pw-card-7Q3", "k9Z"} {
			if strings.Contains(desc, secret) || strings.Contains(callErr.Error(), secret) {
				t.Errorf("%s: the description %q or the error %q holds %s", card, desc, callErr, secret)
			}
		}
	}
}

// A key in the card URL's query string (?api_key=...), or a user and password in it,
// reaches the card's fetch and the calls to the endpoint the card names on the same
// origin, as the user wrote it; an endpoint the card names elsewhere gets none of
// it. The tool's errors name neither.
func TestToolSendsTheCardURLsCredentials(t *testing.T) {
	const key = "k9Z/+secret"
	type seen struct{ path, key, user, pw string }
	got := make(chan seen, 16)
	answer := func(w http.ResponseWriter, r *http.Request) bool {
		user, pw, _ := r.BasicAuth()
		got <- seen{r.URL.Path, r.URL.Query().Get("api_key"), user, pw}
		if r.URL.Query().Get("api_key") != key && pw != "pw-7Q3" {
			http.Error(w, "no key", http.StatusUnauthorized)
			return false
		}
		return true
	}
	rpc := func(w http.ResponseWriter, r *http.Request) {
		if !answer(w, r) {
			return
		}
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"kind":"message","messageId":"m","role":"agent","contextId":"c-1","parts":[{"kind":"text","text":"in"}]}}`, req.ID)
	}
	elsewhere := httptest.NewServer(http.HandlerFunc(rpc))
	t.Cleanup(elsewhere.Close)
	var endpoint string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
		if !answer(w, r) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":"fake","description":"d","version":"1","url":%q,"preferredTransport":"JSONRPC",
			"protocolVersion":"0.3.0","capabilities":{"streaming":false},"defaultInputModes":["text"],"defaultOutputModes":["text"],"skills":[]}`, endpoint)
	})
	mux.HandleFunc("POST /rpc", rpc)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		name, card, endpoint string
		want                 seen
	}{
		{"query", srv.URL + a2a.CardPath + "?api_key=" + url.QueryEscape(key), srv.URL + "/rpc?v=1", seen{key: key}},
		{"password", "http://agent:pw-7Q3@" + host + a2a.CardPath, srv.URL + "/rpc", seen{user: "agent", pw: "pw-7Q3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			endpoint = c.endpoint
			tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: c.card})
			if err != nil {
				t.Fatal(err)
			}
			out, err := tool.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"message":"hi"}`})
			if err != nil || !strings.HasPrefix(out, "in") {
				t.Fatalf("Call = %q, %v", out, err)
			}
			for _, path := range []string{a2a.CardPath, "/rpc"} {
				s := <-got
				c.want.path = path
				if s != c.want {
					t.Errorf("the agent saw %+v, want %+v", s, c.want)
				}
			}
		})
	}
	t.Run("elsewhere", func(t *testing.T) {
		endpoint = elsewhere.URL + "/rpc"
		tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: srv.URL + a2a.CardPath + "?api_key=" + url.QueryEscape(key)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tool.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"message":"hi"}`})
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Fatalf("Call's error = %v, want a refusal without the key", err)
		}
		if s := <-got; s.key != key {
			t.Errorf("the card was fetched with %+v", s)
		}
		if s := <-got; s.key != "" || s.pw != "" {
			t.Errorf("an endpoint on another origin was sent the card's credentials: %+v", s)
		}
	})
}

// An answer larger than the SDK's 64 KiB line of a stream is read whole, as one
// event or as appended pieces; one past the tool's bound fails the call, as the
// answer of an agent that does not stream, and cancels the remote task.
func TestToolReadsLargeAnswersWithinItsBound(t *testing.T) {
	text := func(n int) string { return strings.Repeat("x", n) }
	artifact := func(s string, appended bool) string {
		return fmt.Sprintf(`{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","append":%t,"artifact":{"artifactId":"a","parts":[{"kind":"text","text":%q}]}}`, appended, s)
	}
	done := `{"kind":"status-update","taskId":"t-1","contextId":"c-1","final":true,"status":{"state":"completed"}}`
	const bound = 1 << 20
	for _, c := range []struct {
		name      string
		streaming bool
		events    []string
		want      int // the answer's bytes; 0: too large
	}{
		{"one large event", true, []string{workingTask, artifact(text(300<<10), false), done}, 300 << 10},
		{"an event past the bound", true, []string{workingTask, artifact(text(bound+1), false), done}, 0},
		{"appended pieces past the bound", true, []string{workingTask, artifact(text(bound/2), false), artifact(text(bound/2), true), artifact("x", true), done}, 0},
		{"replaced pieces", true, []string{workingTask, artifact(text(bound/2), false), artifact(text(bound/2), false), artifact(text(bound/2), false), done}, bound / 2},
		{"a response past the bound", false, []string{`{"kind":"task","id":"t-1","contextId":"c-1","status":{"state":"completed"},"artifacts":[{"artifactId":"a","parts":[{"kind":"text","text":"` + text(bound) + `"}]}]}`}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ra := newRemoteAgent(t, c.streaming, map[string]rpcAnswer{
				"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { sse(w, id, c.events...) },
				"message/send": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, c.events[0])
				},
				"tasks/cancel": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, canceled)
				},
			})
			tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, MaxAnswerBytes: bound})
			if err != nil {
				t.Fatal(err)
			}
			out, err := tool.Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"hi"}`})
			if c.want > 0 {
				if err != nil || out != text(c.want)+"\n\n(context_id: c-1)" {
					t.Fatalf("Call = %d bytes, %v; want %d x", len(out), err, c.want)
				}
				return
			}
			if !errors.Is(err, a2a.ErrAnswerTooLarge) || len(err.Error()) > 1000 {
				t.Fatalf("Call = %d bytes, %.300v; want ErrAnswerTooLarge", len(out), err)
			}
			ra.next(t) // message/send or message/stream
			if !c.streaming {
				return // the answer is the task's end
			}
			if m := ra.next(t); m != "tasks/cancel" {
				t.Errorf("after the answer was refused the agent was asked %s, want tasks/cancel", m)
			}
		})
	}
}

// A JSON-RPC error the remote agent answers reaches the model as it gave it, its
// code (one A2A does not know) and message: answered to message/send, as the one
// response to message/stream, or as an event of its stream.
func TestToolSaysTheRemoteAgentsError(t *testing.T) {
	const rpcErr = `{"code":-32050,"message":"quota exceeded: retry after 60 s","data":{"retry_after":60}}`
	asJSON := func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":%s}`, id, rpcErr)
	}
	for _, c := range []struct {
		name      string
		streaming bool
		answer    rpcAnswer
	}{
		{"message/send", false, asJSON},
		{"message/stream answered as JSON", true, asJSON},
		{"message/stream event", true, func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			sse(w, id, workingTask)
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":%s}\n\n", id, rpcErr)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ra := newRemoteAgent(t, c.streaming, map[string]rpcAnswer{"message/send": c.answer, "message/stream": c.answer})
			_, err := ra.tool(t, nil).Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"hi"}`})
			var re *a2a.RemoteError
			if !errors.As(err, &re) || re.Code != -32050 || !strings.Contains(err.Error(), "quota exceeded: retry after 60 s") || !strings.Contains(err.Error(), "retry_after") {
				t.Fatalf("Call's error = %v, want the remote's -32050 and its message", err)
			}
		})
	}
}

// A call that runs past its own timeout says so and cancels the remote task; the
// tool's limits give its performer a timeout beyond the call's, so that a remote
// agent that takes minutes is not cut at a node's default tool timeout (30 s).
func TestToolTimesOutOnItsOwn(t *testing.T) {
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, r *http.Request, id, _ json.RawMessage) {
			sse(w, id, workingTask)
			<-r.Context().Done()
		},
		"tasks/cancel": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, canceled)
		},
	})
	if lim := tools.LimitsOf(ra.tool(t, nil)).Timeout; lim <= 5*time.Minute {
		t.Errorf("the tool's timeout is %s, want more than its calls' 5 minutes", lim)
	}
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, CallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tool.Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"hi"}`})
	if err == nil || !strings.Contains(err.Error(), "did not answer within 300ms") {
		t.Fatalf("Call's error = %v, want the call's timeout", err)
	}
	ra.next(t)
	if m := ra.next(t); m != "tasks/cancel" {
		t.Errorf("after the call timed out the agent was asked %s, want tasks/cancel", m)
	}
}

// A remote task that needs more input is answered in that task: the tool's answer
// gives its task_id, and a call with it (and the context_id) sends the message in
// the task, where the agent had no way to but to start another task. The spec
// before task_id is what tools.PriorSpecs gives, for sessions recorded then.
func TestToolAnswersATaskThatNeedsInput(t *testing.T) {
	var sent []string
	ra := newRemoteAgent(t, false, map[string]rpcAnswer{
		"message/send": func(w http.ResponseWriter, _ *http.Request, id, params json.RawMessage) {
			var p struct {
				Message struct {
					TaskID    string `json:"taskId"`
					ContextID string `json:"contextId"`
				} `json:"message"`
			}
			_ = json.Unmarshal(params, &p)
			sent = append(sent, p.Message.TaskID+"|"+p.Message.ContextID)
			w.Header().Set("Content-Type", "application/json")
			if p.Message.TaskID == "" {
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"kind":"task","id":"t-7","contextId":"c-7","status":{"state":"input-required",
					"message":{"kind":"message","role":"agent","messageId":"m","parts":[{"kind":"text","text":"Which city?"}]}}}}`, id)
				return
			}
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"kind":"task","id":%q,"contextId":"c-7","status":{"state":"completed"},
				"artifacts":[{"artifactId":"a","parts":[{"kind":"text","text":"Sunny in Paris"}]}]}}`, id, p.Message.TaskID)
		},
	})
	tool := ra.tool(t, nil)
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"weather?"}`})
	if err != nil || !strings.Contains(out, "Which city?") || !strings.Contains(out, "(task_id: t-7, context_id: c-7)") {
		t.Fatalf("first answer %q, %v", out, err)
	}
	out, err = tool.Call(context.Background(), tools.Call{Key: "s/6", Arguments: `{"message":"Paris","task_id":"t-7","context_id":"c-7"}`})
	if err != nil || !strings.HasPrefix(out, "Sunny in Paris") {
		t.Fatalf("second answer %q, %v", out, err)
	}
	if strings.Join(sent, ",") != "|,t-7|c-7" {
		t.Fatalf("the agent was sent %v", sent)
	}
	if _, err := tool.Call(context.Background(), tools.Call{Key: "s/8", Arguments: `{"message":"x","task_id":"t-7"}`}); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Fatalf("a task_id without its context_id: %v", err)
	}
	spec := tool.Spec()
	prior := tools.PriorSpecs([]messages.ToolSpec{spec})
	if len(prior) != 1 || strings.Contains(string(prior[0][0].Parameters), "task_id") || strings.Contains(prior[0][0].Description, "task_id") ||
		!strings.HasSuffix(prior[0][0].Description, "Pass the context_id it returns to continue the same conversation.") || !json.Valid(prior[0][0].Parameters) {
		t.Fatalf("the spec before task_id: %+v", prior)
	}
	if !json.Valid(spec.Parameters) {
		t.Fatalf("the spec's parameters are not JSON: %s", spec.Parameters)
	}
}
