package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// Change is one event that touched a memory, as History tells it.
type Change struct {
	Seq    uint64        `json:"seq"`
	At     time.Time     `json:"at"`
	Type   messages.Type `json:"type"`
	Reason string        `json:"reason"`
	// Key is the idempotency key the change was written under, as its client
	// gave it (without the digest of its request that RequestKey adds).
	Key string `json:"key,omitempty"`
	// Memory is the memory after the change; nil when the change removed it.
	Memory *Memory `json:"memory,omitempty"`
	// Related names the other memories of the change: the ones merged into it (or
	// the one it was merged into), the sources it was distilled from (or the memory
	// distilled from it), the memory that invalidated it (or the one it invalidated).
	Related []string `json:"related,omitempty"`
}

// History returns the history of memory id in namespace (see Namespace.History)
// from the log alone: it neither folds the namespace for later operations nor
// brings its vectors up to date, so a look through many namespaces (or on a node
// that does not own them) costs one read of each stream.
func (m *Memories) History(ctx context.Context, namespace, id string) ([]Change, error) {
	if err := CheckNamespace(namespace); err != nil {
		return nil, err
	}
	if m.closed.Load() {
		return nil, ErrClosed
	}
	return newNamespace(m, namespace).History(ctx, id)
}

// History returns every event that touched memory id, oldest first: where it came
// from, how it changed, what it was merged into or distilled into, why it was
// invalidated or forgotten. It folds the namespace's stream afresh; a memory no
// event touched fails with ErrNotFound.
func (ns *Namespace) History(ctx context.Context, id string) ([]Change, error) {
	events, err := ns.cfg.Log.Read(ctx, ns.stream, 1)
	if err != nil {
		return nil, fmt.Errorf("memory: reading %s: %w", ns.stream, err)
	}
	st := newState(ns.name)
	var out []Change
	for _, e := range events {
		eff, err := st.apply(e)
		if err != nil {
			return nil, err
		}
		if eff.unknown != "" {
			ns.m.skip(ns.name, e)
		}
		for _, t := range eff.touched {
			if t.id != id {
				continue
			}
			c := Change{Seq: e.Seq, At: time.UnixMicro(e.TS).UTC(), Type: e.Type, Related: slices.Clone(t.related)}
			c.Reason = eff.reason
			c.Key, _ = ClientKey(eff.key)
			if m := st.mems[id]; m != nil {
				cp := copyMemory(m)
				c.Memory = &cp
			}
			out = append(out, c)
			break
		}
	}
	if len(out) == 0 {
		return nil, ns.unknown(id)
	}
	return out, nil
}

// ChangeSession returns the session whose event made the memory change p (a
// memory event of a namespace's stream), and true: the one its key names, the
// key of a session's call ("<session>/<seq>", messages.EffectKey: the memory
// tool's) or one made from it ("<session>/<seq>/…": a consolidation the tool
// started, the write after a task, each memory of a call that added several).
// It returns false for a change under no key, or under one no session's event
// made (an HTTP request's, an import's, a background consolidation run's): a
// session ID holds no '/', and a seq is a canonical decimal, which none of
// those keys has as its second part.
func ChangeSession(p messages.Payload) (string, bool) {
	c, ok := p.(messages.MemoryChange)
	if !ok {
		return "", false
	}
	key := c.ChangeKey()
	if _, _, _, client := splitRequestKey(key); client {
		return "", false // a client's Idempotency-Key
	}
	session, rest, ok := strings.Cut(key, "/")
	if !ok {
		return "", false
	}
	seq, _, _ := strings.Cut(rest, "/")
	if k, err := messages.ParseEffectKey(session + "/" + seq); err != nil || k.SessionID != session {
		return "", false
	}
	return session, true
}
