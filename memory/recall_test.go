package memory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// recorded appends a session of the given payloads to log, its events one second
// apart from start.
func recorded(t *testing.T, log eventlog.Log, id string, start time.Time, payloads ...messages.Payload) {
	t.Helper()
	var events []messages.Envelope
	for i, p := range payloads {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(i + 1)
		e.ID = fmt.Sprintf("%s/%d", id, seq)
		e.SessionID = id
		e.Seq = seq
		e.CorrelationID = id + "/1"
		e.TS = start.Add(time.Duration(i) * time.Second).UnixMicro()
		e.Actor = "session"
		events = append(events, e)
	}
	if err := log.Append(wctx(t), events); err != nil {
		t.Fatal(err)
	}
}

func answer(text string) *messages.ModelResponded {
	return &messages.ModelResponded{Key: "k", Model: "scripted", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: text}}
}

func recallLog(t *testing.T) eventlog.Log {
	t.Helper()
	log, err := sqlite.Open(wctx(t), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	return log
}

var day1 = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

// conversations records three sessions and a memory stream.
func conversations(t *testing.T) eventlog.Log {
	log := recallLog(t)
	recorded(t, log, "s-trip", day1,
		&messages.TaskSubmitted{Input: "Plan a weekend trip to Lisbon for my anniversary", Agent: "planner"},
		&messages.ModelRequested{Key: "k", Model: "scripted", Step: 1},
		&messages.ModelResponded{Key: "k", Model: "scripted", Message: messages.ChatMessage{Role: messages.RoleAssistant,
			ToolCalls: []messages.ToolCall{{ID: "c1", Name: "weather", Arguments: `{"city":"Lisbon"}`}}}},
		&messages.ToolCallRequested{Key: "k/c1", CallID: "c1", Tool: "weather", Arguments: `{"city":"Lisbon"}`},
		&messages.ToolCallCompleted{Key: "k/c1", CallID: "c1", Tool: "weather", Result: "Lisbon: sunny, 24°C"},
		answer("Lisbon will be sunny. Book the Alfama hotel for the anniversary."),
		&messages.TaskCompleted{Output: "Lisbon will be sunny. Book the Alfama hotel for the anniversary.", Steps: 2},
	)
	recorded(t, log, "s-diet", day1.Add(24*time.Hour),
		&messages.TaskSubmitted{Input: "I am vegetarian: suggest a dinner"},
		answer("A mushroom risotto."),
		&messages.TaskCompleted{Output: "Try a mushroom risotto tonight.", Steps: 1},
	)
	recorded(t, log, "s-code", day1.Add(48*time.Hour),
		&messages.TaskSubmitted{Input: "Why does my Go build fail?", Agent: "coder"},
		&messages.ToolCallCompleted{Key: "k/c1", CallID: "c1", Tool: "shell", Error: "exit status 2: undefined: Lisbon" + strings.Repeat(" x", 400)},
		&messages.TaskFailed{Reason: messages.ReasonMaxSteps, Error: "gave up"},
	)
	recorded(t, log, memory.Stream("user:alice"), day1.Add(72*time.Hour),
		&messages.MemoryAdded{Reason: "added", Memory: messages.MemoryRecord{MemoryID: "m_1", Tier: "semantic", Content: "Alice loves Lisbon"}},
	)
	return log
}

func TestRecallRanksConversationByKeywords(t *testing.T) {
	log := conversations(t)
	hits, err := memory.Recall(wctx(t), log, memory.RecallQuery{Text: "Lisbon anniversary"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hits {
		got = append(got, fmt.Sprintf("%s/%d %s", h.SessionID, h.Seq, h.Role))
		if h.Score <= 0 || h.At.IsZero() || h.Content == "" {
			t.Errorf("hit %+v", h)
		}
		if strings.HasPrefix(h.SessionID, "memory/") {
			t.Errorf("a memory stream was searched: %+v", h)
		}
	}
	// Both anniversary events first (two words each), the shorter one first; the
	// task's output repeats the last answer and is not shown twice.
	want := []string{"s-trip/1 user", "s-trip/6 assistant", "s-trip/5 tool", "s-code/2 tool"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("hits %v\nwant %v", got, want)
	}
	if hits[2].Content != "weather: Lisbon: sunny, 24°C" {
		t.Errorf("tool hit %q", hits[2].Content)
	}
	if c := hits[3].Content; len(c) > memory.RecallContentBytes || !strings.HasSuffix(c, "…") || !strings.HasPrefix(c, "shell: error: exit status 2") {
		t.Errorf("long hit not cut: %d bytes %q", len(c), c)
	}
	if hits[0].Score != 1 || hits[1].Score >= 1 {
		t.Errorf("scores %v, %v: want the best 1", hits[0].Score, hits[1].Score)
	}
	if hits[0].At != day1 {
		t.Errorf("at %v, want %v", hits[1].At, day1)
	}
}

func TestRecallFilters(t *testing.T) {
	log := conversations(t)
	ctx := wctx(t)
	ids := func(hits []memory.RecallHit) string {
		var out []string
		for _, h := range hits {
			out = append(out, fmt.Sprintf("%s/%d", h.SessionID, h.Seq))
		}
		return strings.Join(out, " ")
	}
	for name, tc := range map[string]struct {
		q    memory.RecallQuery
		want string
	}{
		"newest first without words": {memory.RecallQuery{Limit: 3}, "s-code/2 s-code/1 s-diet/3"},
		"agent":                      {memory.RecallQuery{Text: "Lisbon", Agent: "coder"}, "s-code/2"},
		"default agent":              {memory.RecallQuery{Agent: "default"}, "s-diet/3 s-diet/2 s-diet/1"},
		"since":                      {memory.RecallQuery{Text: "Lisbon", Since: day1.Add(time.Hour)}, "s-code/2"},
		"until":                      {memory.RecallQuery{Text: "Lisbon sunny", Until: day1.Add(4 * time.Second)}, "s-trip/5 s-trip/1"},
		"max sessions":               {memory.RecallQuery{Text: "dinner risotto Lisbon", MaxSessions: 2}, "s-diet/1 s-diet/2 s-diet/3 s-code/2"},
		"no match":                   {memory.RecallQuery{Text: "kubernetes"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			hits, err := memory.Recall(ctx, log, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(hits); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRecallRefusesBadQueries(t *testing.T) {
	log := recallLog(t)
	for _, q := range []memory.RecallQuery{
		{Limit: -1}, {Limit: memory.MaxRecallLimit + 1}, {MaxSessions: -5},
		{Since: day1, Until: day1.Add(-time.Second)}, {Text: strings.Repeat("a", 5000)},
	} {
		if _, err := memory.Recall(wctx(t), log, q); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", q, err)
		}
	}
}
