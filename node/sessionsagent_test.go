package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// agentSession makes a completed session whose task names agent ("" for none),
// its events stamped from startUS on.
func agentSession(t *testing.T, session, agent string, startUS int64) []messages.Envelope {
	t.Helper()
	var events []messages.Envelope
	for _, p := range []messages.Payload{&messages.TaskSubmitted{Input: "look it up", Agent: agent}, &messages.TaskCompleted{Output: "done"}} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(events) + 1)
		e.SessionID, e.Seq, e.Actor = session, seq, "session"
		e.ID, e.TS = fmt.Sprintf("%s/%d", session, seq), startUS+int64(seq)
		events = append(events, e)
	}
	return events
}

// GET /v1/sessions?agent= lists an agent's sessions however many newer sessions
// other agents have: the limit counts the agent's sessions, not the latest of
// all, which a filter applied to the latest page (the dashboard's) found none of.
func TestSessionsListOfAnAgentOlderThanAPage(t *testing.T) {
	log := openLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := time.Now().Add(-time.Hour).UnixMicro()
	var researcher []string // the latest started first
	for i := range 3 {
		id := fmt.Sprintf("research-%d", i)
		if err := log.Append(ctx, agentSession(t, id, "researcher", base+int64(i)*1000)); err != nil {
			t.Fatal(err)
		}
		researcher = append([]string{id}, researcher...)
	}
	var others []string
	for i := range 120 {
		id := fmt.Sprintf("chat-%03d", i)
		if err := log.Append(ctx, agentSession(t, id, "", base+int64(10+i)*1000)); err != nil {
			t.Fatal(err)
		}
		others = append([]string{id}, others...)
	}
	_, addr, _ := serveHTTP(t, node.Config{Log: log})
	list := func(query string) []node.SessionRow {
		t.Helper()
		code, body := getBody(t, addr+"/v1/sessions?"+query)
		if code != 200 {
			t.Fatalf("GET /v1/sessions?%s: %d %s", query, code, body)
		}
		var rows []node.SessionRow
		if err := json.Unmarshal(body, &rows); err != nil {
			t.Fatalf("GET /v1/sessions?%s: %v: %s", query, err, body)
		}
		return rows
	}
	ids := func(rows []node.SessionRow) string {
		var out []string
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return strings.Join(out, " ")
	}
	if got := ids(list("limit=100&detail=true&sessions_only=true")); strings.Contains(got, "research-") {
		t.Fatalf("the latest 100 sessions hold the researcher's, the test shows nothing: %s", got)
	}
	rows := list("agent=researcher&detail=true&limit=100")
	if got, want := ids(rows), strings.Join(researcher, " "); got != want {
		t.Fatalf("agent=researcher lists %q, want %q", got, want)
	}
	for _, r := range rows {
		if r.Agent != "researcher" || r.Status != messages.StatusCompleted {
			t.Fatalf("row %+v, want a completed session of researcher", r)
		}
	}
	if got, want := ids(list("agent=researcher&limit=2")), strings.Join(researcher[:2], " "); got != want {
		t.Fatalf("agent=researcher&limit=2 lists %q, want %q", got, want)
	}
	if got, want := ids(list("agent=researcher&status=completed&since=2h&limit=1")), researcher[0]; got != want {
		t.Fatalf("agent=researcher&status=completed&since=2h&limit=1 lists %q, want %q", got, want)
	}
	if got, want := ids(list("agent=default&limit=100")), strings.Join(others[:100], " "); got != want {
		t.Fatalf("agent=default&limit=100 lists %q, want %q", got, want)
	}
	if got := list("agent=nobody"); len(got) != 0 {
		t.Fatalf("agent=nobody lists %q, want none", ids(got))
	}
	// A value that is no agent's name is refused, and says what an agent is.
	for _, bad := range []string{"Researcher", "researcher ", "re\x00searcher", "ré", "-x", strings.Repeat("a", 65), "researcher%"} {
		code, body := getBody(t, addr+"/v1/sessions?agent="+url.QueryEscape(bad))
		if code != 400 || !strings.Contains(string(body), "agent must be") {
			t.Errorf("agent=%q: %d %s, want 400 naming what an agent is", bad, code, body)
		}
	}
}
