package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// sess is what the driver knows of one session it submitted tasks to.
type sess struct {
	kind     string
	accepted int // tasks the cluster acknowledged
	unknown  int // tasks whose submission had no clear answer (may or may not run)
	noter    int // of the accepted, tasks that make one note each (noter's, lead's through its child)
	noterUnk int
}

type stats struct {
	mu       sync.Mutex
	sessions map[string]*sess
	refused  map[string]int // kind -> submissions refused for good
	faults   map[string]int
}

func newStats() *stats {
	return &stats{sessions: map[string]*sess{}, refused: map[string]int{}, faults: map[string]int{}}
}

func (s *stats) fault(k string) { s.mu.Lock(); s.faults[k]++; s.mu.Unlock() }

// record notes the outcome of one submission: "ok", "unknown" or "refused".
func (s *stats) record(kind, session, agent, outcome string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if outcome == "refused" {
		s.refused[kind]++
		return
	}
	x := s.sessions[session]
	if x == nil {
		x = &sess{kind: kind}
		s.sessions[session] = x
	}
	noter := agent == "noter" || agent == "lead"
	if outcome == "ok" {
		x.accepted++
		if noter {
			x.noter++
		}
	} else {
		x.unknown++
		if noter {
			x.noterUnk++
		}
	}
}

var httpc = &http.Client{Timeout: 20 * time.Second}

// pickAgent: half the tasks make a note (noter), a quarter hand that to a
// child session (lead delegates to noter), a quarter use the calculator.
func pickAgent(n int) (agent, input string) {
	switch {
	case n%2 == 0:
		return "noter", fmt.Sprintf("note %d", n)
	case n%4 == 3:
		return "lead", fmt.Sprintf("delegate note %d", n)
	}
	return "default", fmt.Sprintf("What is %d * 3?", n)
}

func (c *cluster) anyNode() string {
	l := c.live()
	if len(l) == 0 {
		return ""
	}
	return l[rand.IntN(len(l))] // math/rand/v2: safe for the load's goroutines
}

// postTask POSTs a task to a live node; with key, it retries (same key) until a 202 or 12 tries.
func (c *cluster) postTask(session, agent, input, key string) string {
	body, _ := json.Marshal(map[string]any{"input": input, "session_id": session, "agent": agent})
	tries := 1
	if key != "" {
		tries = 12
	}
	out := "refused"
	for t := 0; t < tries; t++ {
		base := c.anyNode()
		if base == "" {
			time.Sleep(time.Second)
			continue
		}
		req, _ := http.NewRequest("POST", base+"/v1/tasks", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		r, err := httpc.Do(req)
		if err != nil {
			out = "unknown" // the request may have reached the node
			time.Sleep(time.Second)
			continue
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode == 202 {
			return "ok"
		}
		if r.StatusCode >= 500 {
			if r.StatusCode != 503 {
				logf("POST /v1/tasks %s: %d %s", session, r.StatusCode, strings.TrimSpace(string(b)))
				out = "unknown"
			}
			time.Sleep(time.Second)
			continue
		}
		logf("POST /v1/tasks %s: %d %s", session, r.StatusCode, strings.TrimSpace(string(b)))
		return "refused"
	}
	return out
}

// every runs f(n) for n = 0, 1, ... every d until ctx ends; f runs on its own goroutine,
// at most `par` at a time.
func every(ctx context.Context, wg *sync.WaitGroup, d time.Duration, par int, f func(n int)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		sem := make(chan struct{}, par)
		var inner sync.WaitGroup
		defer inner.Wait()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			inner.Add(1)
			go func() { defer inner.Done(); defer func() { <-sem }(); f(n) }()
		}
	}()
}

func (c *cluster) load(ctx context.Context, st *stats, o options) *sync.WaitGroup {
	var wg sync.WaitGroup
	// HTTP with an Idempotency-Key, retried with it.
	every(ctx, &wg, o.scale(500*time.Millisecond), 4, func(n int) {
		agent, in := pickAgent(n)
		s := fmt.Sprintf("hk-%d", n)
		st.record("http-key", s, agent, c.postTask(s, agent, in, "ik-"+s))
	})
	// HTTP without a key: one try.
	every(ctx, &wg, o.scale(900*time.Millisecond), 4, func(n int) {
		agent, in := pickAgent(n)
		s := fmt.Sprintf("hn-%d", n)
		st.record("http-nokey", s, agent, c.postTask(s, agent, in, ""))
	})
	// Many tasks on one session at once, each with its own key.
	every(ctx, &wg, o.scale(6*time.Second), 2, func(n int) {
		s := fmt.Sprintf("q-%d", n)
		var w sync.WaitGroup
		for j := 0; j < 5; j++ {
			w.Add(1)
			go func() {
				defer w.Done()
				agent, in := pickAgent(n + j)
				st.record("queue", s, agent, c.postTask(s, agent, in, fmt.Sprintf("ik-%s-%d", s, j)))
			}()
		}
		w.Wait()
	})
	// kcat, librdkafka's default partitioner (CRC32), 10 tasks a batch, keyed by session.
	every(ctx, &wg, o.scale(5*time.Second), 1, func(n int) {
		var lines bytes.Buffer
		var ss, ag []string
		for j := 0; j < 10; j++ {
			agent, in := pickAgent(j)
			s := fmt.Sprintf("kc-%d-%d", n, j)
			b, _ := json.Marshal(map[string]any{"input": in, "agent": agent})
			fmt.Fprintf(&lines, "%s|%s\n", s, b)
			ss, ag = append(ss, s), append(ag, agent)
		}
		cmd := exec.Command("kcat", "-b", o.kafka, "-P", "-t", o.prefix+"troupe.tasks", "-K", "|")
		cmd.Stdin = &lines
		out := "ok"
		if b, err := cmd.CombinedOutput(); err != nil {
			logf("kcat: %v %s", err, b)
			out = "unknown"
		}
		for j := range ss {
			st.record("kcat", ss[j], ag[j], out)
		}
	})
	// MCP run_task with the official Go SDK.
	every(ctx, &wg, o.scale(3*time.Second), 2, func(n int) {
		agent, in := pickAgent(n)
		s := fmt.Sprintf("m-%d", n)
		st.record("mcp", s, agent, c.mcpRunTask(ctx, s, agent, in))
	})
	// A2A message/send with curl; sent again with the same messageId until it answers.
	every(ctx, &wg, o.scale(3*time.Second), 2, func(n int) {
		agent, in := pickAgent(n)
		s := fmt.Sprintf("a-%d", n)
		st.record("a2a", s, agent, c.a2aSend(s, agent, in))
	})
	return &wg
}

func (c *cluster) mcpRunTask(ctx context.Context, session, agent, input string) string {
	base := c.anyNode()
	if base == "" {
		return "refused"
	}
	cctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "chaos", Version: "1"}, nil).Connect(cctx, &sdk.StreamableClientTransport{Endpoint: base + "/mcp"}, nil)
	if err != nil {
		return "refused"
	}
	defer cs.Close()
	res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": input, "session_id": session, "agent": agent}})
	if err != nil {
		logf("mcp run_task %s via %s: %v", session, base, err)
		return "unknown"
	}
	if res.IsError {
		logf("mcp run_task %s via %s: error result %s", session, base, mcpText(res))
		return "unknown"
	}
	return "ok"
}

func mcpText(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func (c *cluster) a2aSend(session, agent, input string) string {
	msg := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": map[string]any{
		"message": map[string]any{"kind": "message", "role": "user", "messageId": "msg-" + session, "contextId": session,
			"parts": []any{map[string]any{"kind": "text", "text": input}}}}}
	body, _ := json.Marshal(msg)
	path := "/a2a"
	if agent != "default" {
		path += "/" + agent
	}
	out := "refused"
	for t := 0; t < 8; t++ {
		base := c.anyNode()
		if base == "" {
			time.Sleep(time.Second)
			continue
		}
		b, err := exec.Command("curl", "-s", "-m", "60", "-XPOST", base+path, "-H", "Content-Type: application/json", "-d", string(body)).Output()
		if err != nil {
			out = "unknown"
			time.Sleep(time.Second)
			continue
		}
		var r struct {
			Result *struct {
				Status struct {
					State string `json:"state"`
				} `json:"status"`
			} `json:"result"`
			Error *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &r); err != nil || r.Result == nil {
			logf("a2a %s via %s: %s", session, base, strings.TrimSpace(string(b)))
			out = "unknown"
			time.Sleep(time.Second)
			continue
		}
		if st := r.Result.Status.State; st != "completed" {
			// the check compares it with how the session ended
			logf("a2a %s via %s: message/send answered state %q", session, base, st)
		}
		return "ok"
	}
	return out
}
