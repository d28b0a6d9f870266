package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// Recall memory, as Letta calls it, is the raw conversation: what the user asked,
// what the agent answered and what its tools returned, as the sessions' events hold
// it. Nothing is copied into a namespace for it: Recall searches the event log.

// RecallQuery asks Recall for the conversation events that match words, in a window
// of time.
type RecallQuery struct {
	// Text is the words to look for; empty lists the window's events, newest first.
	Text string
	// Since and Until bound the events' time (zero: unbounded). Only sessions started
	// at or after Since are read, so an event after Since of a session started before
	// it is not found.
	Since, Until time.Time
	// Agent keeps sessions whose first task ran this agent ("default" for tasks that
	// named none); empty keeps every session.
	Agent string
	// Limit bounds the hits: default 10, at most MaxRecallLimit.
	Limit int
	// MaxSessions bounds the sessions read, the most recently started first: default
	// 200, at most 10,000.
	MaxSessions int
}

// RecallHit is one conversation event Recall found.
type RecallHit struct {
	SessionID string `json:"session_id"`
	Seq       uint64 `json:"seq"`
	// Role is "user" (a task's input), "assistant" (a model's answer or a task's
	// output) or "tool" (a tool's result, after the tool's name and a colon).
	Role string `json:"role"`
	// Content is the text, cut to RecallContentBytes bytes ("…" marks a cut).
	Content string    `json:"content"`
	At      time.Time `json:"at"`
	// Score is the keyword (BM25) score of the content for the query's words,
	// divided by the best hit's (which scores 1); 0 when the query has no words.
	Score float64 `json:"score"`
}

// Bounds of Recall.
const (
	MaxRecallLimit      = 100
	DefaultRecallLimit  = 10
	DefaultMaxSessions  = 200
	maxRecallSessions   = 10000
	RecallContentBytes  = 500
	maxRecallQueryBytes = 2000
)

// Recall searches the conversation recorded in log: the input of each task
// (task.submitted), the text of the model's answers (model.responded), the tools'
// results and errors (tool.completed) and each task's output (task.completed, when it
// is not the last answer repeated), in the sessions of the log only
// (eventlog.IsSession: no notes, no memory namespace). With words, the events are
// ranked by their BM25 score (pmem.KeywordIndex, built over the events read),
// keeping those that match at least one word, the newer first among equal scores;
// without, the newest come first. A malformed query (a negative or too large limit,
// Until before Since) wraps ErrInvalid.
func Recall(ctx context.Context, log eventlog.Log, q RecallQuery) ([]RecallHit, error) {
	if log == nil {
		return nil, fmt.Errorf("memory: recall: no event log")
	}
	switch {
	case q.Limit < 0 || q.Limit > MaxRecallLimit:
		return nil, fmt.Errorf("%w: recall limit %d outside [1, %d]", ErrInvalid, q.Limit, MaxRecallLimit)
	case q.MaxSessions < 0 || q.MaxSessions > maxRecallSessions:
		return nil, fmt.Errorf("%w: recall max sessions %d outside [1, %d]", ErrInvalid, q.MaxSessions, maxRecallSessions)
	case !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since):
		return nil, fmt.Errorf("%w: recall until %s is before since %s", ErrInvalid, q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	case len(q.Text) > maxRecallQueryBytes:
		return nil, fmt.Errorf("%w: recall query longer than %d bytes", ErrInvalid, maxRecallQueryBytes)
	}
	limit := cmp.Or(q.Limit, DefaultRecallLimit)
	sessions, err := recallSessions(ctx, log, q)
	if err != nil {
		return nil, err
	}
	var docs []RecallHit // Content uncut until the end
	for _, s := range sessions {
		events, err := log.Read(ctx, s.ID, 1)
		if err != nil {
			return nil, fmt.Errorf("memory: recall: %w", err)
		}
		docs = append(docs, conversation(events, q)...)
	}
	var hits []RecallHit
	if len(pmem.Tokenize(q.Text)) == 0 {
		hits = docs
		slices.SortStableFunc(hits, func(a, b RecallHit) int {
			return cmp.Or(b.At.Compare(a.At), cmp.Compare(a.SessionID, b.SessionID), cmp.Compare(a.Seq, b.Seq))
		})
	} else {
		ix := pmem.NewKeywordIndex()
		for i, d := range docs {
			ix.Put(strconv.Itoa(i), d.Content)
		}
		for _, h := range ix.Search(q.Text, len(docs), nil) {
			i, _ := strconv.Atoi(h.ID)
			d := docs[i]
			d.Score = h.Score
			hits = append(hits, d)
		}
		slices.SortStableFunc(hits, func(a, b RecallHit) int {
			return cmp.Or(cmp.Compare(b.Score, a.Score), b.At.Compare(a.At),
				cmp.Compare(a.SessionID, b.SessionID), cmp.Compare(a.Seq, b.Seq))
		})
	}
	if len(hits) > limit {
		hits = hits[:limit]
	}
	for i := range hits {
		hits[i].Content = clipText(hits[i].Content, RecallContentBytes)
	}
	return hits, nil
}

// recallSessions lists the sessions Recall reads: at most q.MaxSessions of them, the
// most recently started first, started in q's window. The log lists notes and memory
// streams among its sessions: they are skipped, and the listing asked again for more
// when they took places.
func recallSessions(ctx context.Context, log eventlog.Log, q RecallQuery) ([]eventlog.SessionInfo, error) {
	want := cmp.Or(q.MaxSessions, DefaultMaxSessions)
	f := eventlog.Filter{Limit: want}
	if !q.Since.IsZero() {
		f.SinceUS = q.Since.UnixMicro()
	}
	for {
		list, err := log.Sessions(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("memory: recall: %w", err)
		}
		var out []eventlog.SessionInfo
		for _, s := range list {
			if !eventlog.IsSession(s.ID) || (!q.Until.IsZero() && s.StartedUS > q.Until.UnixMicro()) {
				continue
			}
			if out = append(out, s); len(out) == want {
				break
			}
		}
		if len(out) == want || len(list) < f.Limit {
			return out, nil
		}
		f.Limit *= 2
	}
}

// conversation returns the conversation events of one session that fall in q's
// window, or none when the session ran another agent than q.Agent.
func conversation(events []messages.Envelope, q RecallQuery) []RecallHit {
	var out []RecallHit
	lastAnswer := ""
	agentChecked := q.Agent == ""
	for _, e := range events {
		switch e.Type {
		case messages.TypeTaskSubmitted, messages.TypeModelResponded, messages.TypeToolCallCompleted, messages.TypeTaskCompleted:
		default:
			continue
		}
		p, err := e.Decode()
		if err != nil {
			continue // an event this build cannot read holds no conversation it can show
		}
		hit := RecallHit{SessionID: e.SessionID, Seq: e.Seq, At: time.UnixMicro(e.TS).UTC()}
		switch p := p.(type) {
		case *messages.TaskSubmitted:
			if !agentChecked {
				if cmp.Or(p.Agent, "default") != q.Agent {
					return nil
				}
				agentChecked = true
			}
			hit.Role, hit.Content = string(messages.RoleUser), p.Input
		case *messages.ModelResponded:
			hit.Role, hit.Content = string(messages.RoleAssistant), p.Message.Content
			lastAnswer = strings.TrimSpace(p.Message.Content)
		case *messages.ToolCallCompleted:
			text := cmp.Or(p.Result, p.Error)
			if p.Result == "" && p.Error != "" {
				text = "error: " + p.Error
			}
			hit.Role, hit.Content = string(messages.RoleTool), p.Tool+": "+text
		case *messages.TaskCompleted:
			if strings.TrimSpace(p.Output) == lastAnswer {
				continue
			}
			hit.Role, hit.Content = string(messages.RoleAssistant), p.Output
		}
		if strings.TrimSpace(hit.Content) == "" {
			continue
		}
		if (!q.Since.IsZero() && hit.At.Before(q.Since)) || (!q.Until.IsZero() && hit.At.After(q.Until)) {
			continue
		}
		out = append(out, hit)
	}
	if !agentChecked {
		return nil // no task: the agent is unknown
	}
	return out
}
