package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// AddRequest asks for one memory.
type AddRequest struct {
	Tier    Tier
	Content string
	// Importance is in [0, 1]; nil means 0.5.
	Importance *float64
	// Timestamp is when the remembered thing happened; zero means now. It may not
	// lie more than MaxFuture ahead, nor before the year 1 (UTC).
	Timestamp time.Time
	// Metadata is a JSON object, or empty.
	Metadata     json.RawMessage
	Participants []string
	Outcome      string
	// Modality is text (empty), or image or audio in the perceptual tier only.
	Modality Modality
	URI      string
	Sources  []messages.MemorySource
	// Reason is recorded with the event (default "added").
	Reason string
}

// AddResult is what Add did with one request: Event "ADD" with the new memory's ID,
// or "NONE" with the ID of the live memory whose content it repeats.
type AddResult struct {
	ID    string `json:"id"`
	Event string `json:"event"`
	// Repeat says that the Add was a repeat of an earlier one under its key: the
	// result is the earlier Add's (ADD for the memories it added then), and
	// nothing was written now. It is not sent on the wire: a retried call gets the
	// answer of the first.
	Repeat bool `json:"-"`
}

// The events of AddResult.
const (
	EventAdd  = "ADD"
	EventNone = "NONE"
)

// dupKey is what a memory written in a batch is the duplicate of an earlier one of
// the batch by: its content hash, and whether it is of a lasting tier (not working:
// DuplicateFor).
type dupKey struct {
	hash    string
	lasting bool
}

func dupKeyOf(m *Memory) dupKey { return dupKey{m.Hash, m.Tier != Working} }

// DefaultImportance is the importance of a memory added without one.
const DefaultImportance = 0.5

// Add adds memories: every request is checked first (an error wrapping ErrInvalid
// names the first bad one, and nothing is written); exact duplicates (same
// pmem.ContentHash as a live memory of the namespace, or an earlier request of the
// batch) are not added again and come back as NONE with the existing ID; the others
// are embedded (one Embed call per modality), their entities extracted (semantic
// tier) and added in one Append, together with the working tier's evictions
// (capacity) and expiries (TTL). A key applied before returns the earlier result
// and writes nothing.
func (ns *Namespace) Add(ctx context.Context, key string, reqs []AddRequest) ([]AddResult, error) {
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%w: no memories to add", ErrInvalid)
	}
	now := ns.cfg.Now()
	prepared := make([]*Memory, len(reqs))
	reasons := make([]string, len(reqs))
	for i, r := range reqs {
		m, err := ns.prepare(r, now)
		if err != nil {
			return nil, fmt.Errorf("memory %d of %d: %w", i, len(reqs), err)
		}
		prepared[i], reasons[i] = m, ns.why(strings.TrimSpace(r.Reason), "added")
	}
	added := 0
	if ns.cfg.Written != nil {
		defer func() { // after the write, outside the lock
			if added > 0 {
				ns.cfg.Written(ns.name, added)
			}
		}()
	}
	// The memories the namespace holds no copy of yet are embedded (and their
	// entities extracted) before the write, outside its lock; the write computes
	// what it finds missing then. While a batch holds the lock, every one is.
	var fresh []*Memory
	hashes := map[dupKey]bool{}
	if !ns.peek(func() {
		if key == "" || ns.st.keys[key] == nil {
			for _, p := range prepared {
				if _, ok := ns.st.byHash(p.Hash, p.Tier); !ok && !hashes[dupKeyOf(p)] {
					fresh, hashes[dupKeyOf(p)] = append(fresh, p), true
				}
			}
		}
	}) {
		for _, p := range prepared {
			if !hashes[dupKeyOf(p)] {
				fresh, hashes[dupKeyOf(p)] = append(fresh, p), true
			}
		}
	}
	pre := ns.precompute(ctx, fresh, func(m *Memory) bool { return m.Tier == Semantic })
	var results []AddResult
	var applied, unmarked bool
	var before []AddResult
	var beforeErr error
	err := ns.write(ctx, key, func() ([]messages.Payload, error) {
		if err := ns.st.otherRequest(key); err != nil {
			return nil, err
		}
		if client := ns.st.unmarkedKey(key); client != "" {
			// Written under the client's key before it carried its request's
			// digest: answered as that key's write.
			unmarked = true
			before, beforeErr = ns.addedBefore(client, prepared)
			return nil, nil
		}
		results = make([]AddResult, len(prepared))
		inBatch := map[dupKey]string{} // the batch's first memory of each content and lasting
		ids := map[string]bool{}
		var adds []*Memory
		var addReasons []string
		for i, p := range prepared {
			if id, ok := ns.st.byHash(p.Hash, p.Tier); ok {
				results[i] = AddResult{ID: id, Event: EventNone}
				continue
			}
			if id, ok := inBatch[dupKey{p.Hash, true}]; ok { // a lasting one is any one's
				results[i] = AddResult{ID: id, Event: EventNone}
				continue
			}
			if id, ok := inBatch[dupKeyOf(p)]; ok {
				results[i] = AddResult{ID: id, Event: EventNone}
				continue
			}
			m := copyMemory(p)
			m.ID = ns.newID(ids)
			ids[m.ID] = true
			inBatch[dupKeyOf(&m)] = m.ID
			results[i] = AddResult{ID: m.ID, Event: EventAdd}
			adds = append(adds, &m)
			addReasons = append(addReasons, reasons[i])
		}
		if len(adds) == 0 {
			if _, _, _, ok := splitRequestKey(key); ok && !ns.cfg.Unmarked && !ns.st.requestNoted(key) {
				// Every memory is stored already: nothing to add, but a
				// client's key is kept with its request's digest, so that the
				// key sent again with another request is refused
				// (otherRequest) after a restart and on another node too, as
				// when it added memories.
				return []messages.Payload{&messages.MemoryRemembered{Key: key, Reason: "added nothing: every memory of the request is stored already"}}, nil
			}
			return nil, nil
		}
		if err := pre.embed(ctx, ns, adds); err != nil {
			return nil, err
		}
		for _, m := range adds {
			if m.Tier == Semantic {
				if err := pre.extract(ctx, ns, m); err != nil {
					return nil, err
				}
			}
		}
		ps := make([]messages.Payload, 0, len(adds)+1)
		for i, m := range adds {
			ps = append(ps, &messages.MemoryAdded{Key: key, Reason: addReasons[i], Memory: toRecord(m)})
		}
		if p := ns.evict(now, adds, key); p != nil {
			ps = append(ps, p)
		}
		return ps, nil
	}, func(a bool) {
		if applied = a; a {
			before, beforeErr = ns.addedBefore(key, prepared)
		}
	})
	if err != nil {
		return nil, err
	}
	if applied || unmarked {
		for i := range before {
			before[i].Repeat = true
		}
		return before, beforeErr
	}
	for _, r := range results {
		if r.Event == EventAdd {
			added++
		}
	}
	return results, nil
}

// CheckKey tells, writing nothing, whether Add(ctx, key, reqs) would fail with
// ErrKeyReused (or ErrInvalid, for a request it would refuse): a write that spans
// namespaces asks each of them before it writes any, so a key used again for
// another request leaves no namespace's share written.
func (ns *Namespace) CheckKey(key string, reqs []AddRequest) error {
	now := ns.cfg.Now()
	prepared := make([]*Memory, len(reqs))
	for i, r := range reqs {
		m, err := ns.prepare(r, now)
		if err != nil {
			return fmt.Errorf("memory %d of %d: %w", i, len(reqs), err)
		}
		prepared[i] = m
	}
	if key == "" {
		return nil
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if client := ns.st.unmarkedKey(key); client != "" {
		key = client
	}
	if ns.st.keys[key] == nil {
		return ns.st.otherRequest(key)
	}
	_, err := ns.addedBefore(key, prepared)
	return err
}

// addedBefore rebuilds the result of an Add whose key was applied before: the
// memories the key added (forgotten or merged away since, too), in order, and for
// the requests that were duplicates then, the live memory with their content. A
// request that is neither was not part of the Add the key was applied to: the key
// is used again for another request, ErrKeyReused.
func (ns *Namespace) addedBefore(key string, prepared []*Memory) ([]AddResult, error) {
	var added map[dupKey]string
	if k := ns.st.keys[key]; k != nil {
		added = k.added
	}
	out := make([]AddResult, len(prepared))
	seen := map[dupKey]bool{}
	for i, p := range prepared {
		// As the write went: a repeat of a memory the request added (a lasting
		// one is any one's, DuplicateFor), else the memory it added, else a
		// memory stored before.
		dk, lasting := dupKeyOf(p), dupKey{p.Hash, true}
		if seen[lasting] {
			out[i] = AddResult{ID: added[lasting], Event: EventNone}
			continue
		}
		if seen[dk] {
			out[i] = AddResult{ID: added[dk], Event: EventNone}
			continue
		}
		if id, ok := added[dk]; ok {
			out[i], seen[dk] = AddResult{ID: id, Event: EventAdd}, true
			continue
		}
		if working := (dupKey{p.Hash, false}); seen[working] {
			// Written by a build before DuplicateFor, which answered a lasting
			// memory with the working one the request had added before it (this
			// build adds the lasting one: added[dk] above).
			out[i] = AddResult{ID: added[working], Event: EventNone}
			continue
		}
		id, ok := ns.st.byHash(p.Hash, p.Tier)
		if !ok {
			return nil, fmt.Errorf("%w: key %q: memory %d of %d (%q) is not among the memories it added", ErrKeyReused, key, i, len(prepared), clipText(p.Content, 60))
		}
		out[i] = AddResult{ID: id, Event: EventNone}
	}
	return out, nil
}

// newID returns an ID no memory of the namespace ever had, nor one of taken.
func (ns *Namespace) newID(taken map[string]bool) string {
	for {
		id := ns.cfg.NewID()
		if _, ok := ns.st.seen[id]; !ok && !taken[id] && id != "" {
			return id
		}
	}
}

// prepare checks a request and returns the memory it asks for, without ID, vector
// or entities.
func (ns *Namespace) prepare(r AddRequest, now time.Time) (*Memory, error) {
	tier, err := ParseTier(string(r.Tier))
	if err != nil {
		return nil, err
	}
	mod, err := ParseModality(string(r.Modality))
	if err != nil {
		return nil, err
	}
	if mod != Text && tier != Perceptual {
		return nil, fmt.Errorf("%w: modality %s is for the perceptual tier only, not %s", ErrInvalid, mod, tier)
	}
	content, err := ns.checkContent(r.Content)
	if err != nil {
		return nil, err
	}
	imp := DefaultImportance
	if r.Importance != nil {
		imp = *r.Importance
	}
	if err := CheckImportance(imp); err != nil {
		return nil, err
	}
	meta, err := checkMetadata(r.Metadata)
	if err != nil {
		return nil, err
	}
	if err := checkSizes(ns.cfg.MaxContentBytes, meta, r.Outcome, r.URI, r.Participants); err != nil {
		return nil, err
	}
	meta = ns.redactJSON(meta)
	ts := r.Timestamp
	if ts.IsZero() {
		ts = now
	}
	if ts.After(now.Add(MaxFuture)) {
		return nil, fmt.Errorf("%w: timestamp %s is more than %s in the future", ErrInvalid, ts.Format(time.RFC3339), MaxFuture)
	}
	if err := checkTimestampYear(ts); err != nil {
		return nil, err
	}
	var parts []string
	for _, p := range r.Participants {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(parts, p) {
			parts = append(parts, ns.redact(p))
		}
	}
	return &Memory{
		Namespace: ns.name, Tier: tier, Modality: mod, Content: content, URI: ns.redact(strings.TrimSpace(r.URI)),
		Importance: imp, Timestamp: ts.UTC().Truncate(time.Microsecond), Hash: pmem.ContentHash(content), Metadata: meta,
		Participants: parts, Outcome: ns.redact(strings.TrimSpace(r.Outcome)), Sources: ns.redactSources(cloneSources(r.Sources)),
	}, nil
}

// checkTimestampYear refuses a timestamp before the year 1 in UTC (RFC 3339 writes
// "0000-01-01T00:00:00+01:00", the year -1 in UTC): a search's answer, the memory
// tool's and the history's carry the memory's time as JSON, which cannot write a
// year before 0, so each search of its namespace would fail. The zero time, the
// first instant of the year 1, is a client's unset time: now.
func checkTimestampYear(ts time.Time) error {
	if ts.Before(time.Time{}) {
		return fmt.Errorf("%w: timestamp %s is before the year 1 (UTC): give when the remembered thing happened, from the year 1 on", ErrInvalid, ts.Format(time.RFC3339))
	}
	return nil
}

// checkContent checks a memory's content and returns it trimmed and redacted.
func (ns *Namespace) checkContent(s string) (string, error) {
	c := strings.TrimSpace(s)
	switch {
	case blank(c):
		return "", fmt.Errorf("%w: empty content", ErrInvalid)
	case len(c) > ns.cfg.MaxContentBytes:
		return "", fmt.Errorf("%w: content of %d bytes; the limit is %d", ErrInvalid, len(c), ns.cfg.MaxContentBytes)
	case !utf8.ValidString(c):
		return "", fmt.Errorf("%w: content is not UTF-8 text", ErrInvalid)
	}
	if err := checkNUL(c); err != nil {
		return "", err
	}
	return ns.redact(c), nil
}

// blank reports whether s shows nothing: only whitespace and the characters
// pmem.Normalize drops (a zero width space, a byte order mark, a soft hyphen), whose
// content hash is the empty text's and which no search finds.
func blank(s string) bool { return pmem.Normalize(s) == "" }

// checkSizes bounds the texts a memory carries besides its content by the
// content's limit, each: its metadata (as stored, compact JSON), outcome, URI and
// participants (together). Unbounded, one memory's metadata could fill the memory
// tool's whole answer, and every event of the memory wrote it again.
func checkSizes(limit int, meta json.RawMessage, outcome, uri string, parts []string) error {
	n := 0
	for _, p := range parts {
		n += len(strings.TrimSpace(p))
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"metadata", len(meta)}, {"outcome", len(strings.TrimSpace(outcome))}, {"uri", len(strings.TrimSpace(uri))}, {"participants", n}} {
		if f.n > limit {
			return fmt.Errorf("%w: %s of %d bytes; the limit is %d", ErrInvalid, f.name, f.n, limit)
		}
	}
	return nil
}

// checkNUL refuses content holding a NUL byte, as the knowledge base refuses such a
// document: it is binary (a piece of an executable), or UTF-16 read as bytes, and a
// memory holding it would go into every prompt and JSON answer that recalls it.
func checkNUL(c string) error {
	if i := strings.IndexByte(c, 0); i >= 0 {
		return fmt.Errorf("%w: content holds a NUL byte (at byte %d): binary content, or text in UTF-16; send the memory as UTF-8 text", ErrInvalid, i)
	}
	return nil
}

// CleanText returns s as content checkContent accepts, for the memories written
// without a caller to answer (the write after a task, a distillation): each invalid
// UTF-8 sequence becomes U+FFFD and NUL bytes are dropped (UTF-16 text of ASCII
// letters reads as its letters). A caller that can be told (the HTTP API, the memory
// tool) gets ErrInvalid instead.
func CleanText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

func (ns *Namespace) redact(s string) string {
	if ns.cfg.Redact == nil || s == "" {
		return s
	}
	return ns.cfg.Redact(s)
}

// MaxReasonBytes bounds the reason a change records: a longer one is cut (at a
// character, with "…") rather than refused, so that a model writing without end (a
// judgement's or a decision's reason) still has its change made, without growing
// every fold of the namespace and every look at the memory's history by what it
// wrote.
const MaxReasonBytes = 2 << 10

// why is the reason an event records, reason or else def, redacted, then cut to
// MaxReasonBytes (after the redaction, so that no secret escapes it by being cut):
// a reason is the caller's text (the agent's, a model's), and may quote a secret.
func (ns *Namespace) why(reason, def string) string {
	return clipText(ns.redact(cmp.Or(reason, def)), MaxReasonBytes)
}

// redactJSON is a JSON value (metadata, a source's detail) redacted. A redaction
// that leaves no valid JSON (a secret that was a bare number) leaves a string saying
// so in its place.
func (ns *Namespace) redactJSON(raw json.RawMessage) json.RawMessage {
	if ns.cfg.Redact == nil || len(raw) == 0 {
		return raw
	}
	out := ns.cfg.Redact(string(raw))
	if out == string(raw) {
		return raw
	}
	if !json.Valid([]byte(out)) {
		b, _ := json.Marshal(redactedJSON)
		return b
	}
	return json.RawMessage(out)
}

// redactedJSON stands for a JSON value whose redaction left no valid JSON.
const redactedJSON = "[REDACTED: a secret made this value unreadable]"

// redactSources redacts the caller's text in src: the IDs and details of sources.
func (ns *Namespace) redactSources(src []messages.MemorySource) []messages.MemorySource {
	for i := range src {
		src[i].ID = ns.redact(src[i].ID)
		src[i].Detail = ns.redactJSON(src[i].Detail)
	}
	return src
}

// checkMetadata accepts an empty value or a JSON object, and returns it compacted.
func checkMetadata(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: metadata must be a JSON object", ErrInvalid)
	}
	if err := checkSurrogates(raw); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	if key, ok := repeatedKey(raw); ok {
		// Decoding keeps the last value of a key given twice and drops the other
		// unsaid; another reader of the same body takes the first.
		return nil, fmt.Errorf("%w: metadata key %q is given twice in one object: give each key once", ErrInvalid, key)
	}
	if len(obj) == 0 {
		return nil, nil
	}
	return json.Marshal(obj)
}

// repeatedKey finds a key given twice in one object of the JSON value raw, at any
// depth (it returns false for malformed JSON, which the caller refuses otherwise).
func repeatedKey(raw []byte) (string, bool) {
	type frame struct {
		seen map[string]bool // nil in an array
		key  bool            // a key comes next
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	var stack []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return "", false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.seen != nil && top.key {
			if top.seen[s] {
				return s, true
			}
			top.seen[s], top.key = true, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{seen: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			if stack = stack[:len(stack)-1]; len(stack) == 0 {
				return "", false
			}
			stack[len(stack)-1].key = true
		default:
			if top == nil {
				return "", false
			}
			top.key = true
		}
	}
}

// mergeMetadata merges two metadata objects key by key. With overwrite, b's keys win
// and a key b sets to null is deleted (an update); without, a's keys win and b only
// adds the keys a lacks (a merge). conflicts reports whether a key had two values.
func mergeMetadata(a, b json.RawMessage, overwrite bool) (out json.RawMessage, conflicts bool) {
	var ma, mb map[string]json.RawMessage
	_ = json.Unmarshal(a, &ma)
	_ = json.Unmarshal(b, &mb)
	if ma == nil {
		ma = map[string]json.RawMessage{}
	}
	for k, v := range mb {
		old, ok := ma[k]
		switch {
		case overwrite && string(v) == "null":
			delete(ma, k)
		case overwrite || !ok:
			ma[k] = v
		case !bytes.Equal(old, v):
			conflicts = true
		}
	}
	if len(ma) == 0 {
		return nil, conflicts
	}
	out, _ = json.Marshal(ma)
	return out, conflicts
}

// mergeMetadataWithin is mergeMetadata(a, b, false) as long as the result holds
// at most limit bytes, the bound of a memory's metadata on every write: past it,
// b's keys that a lacks are added in key order, each only if it still fits. The
// keys left out stay in b (a merge keeps it as the source's detail), and the
// memory stays one that an update can write again.
func mergeMetadataWithin(a, b json.RawMessage, limit int) json.RawMessage {
	out, _ := mergeMetadata(a, b, false)
	if len(out) <= limit {
		return out
	}
	var ma, mb map[string]json.RawMessage
	_ = json.Unmarshal(a, &ma)
	_ = json.Unmarshal(b, &mb)
	if ma == nil {
		ma = map[string]json.RawMessage{}
	}
	for _, k := range slices.Sorted(maps.Keys(mb)) {
		if _, ok := ma[k]; ok {
			continue
		}
		ma[k] = mb[k]
		if b, _ := json.Marshal(ma); len(b) > limit {
			delete(ma, k)
		}
	}
	if len(ma) == 0 {
		return nil
	}
	out, _ = json.Marshal(ma)
	return out
}

// embedder returns the embedder of stored content of a modality, and its name.
func (ns *Namespace) embedder(mod Modality) (llm.Embedder, string) {
	if mod == Text || mod == "" {
		return ns.cfg.Embedder, ns.cfg.EmbedderName
	}
	e := ns.cfg.Encoders[mod]
	if h, ok := e.(llm.HashingEmbedder); ok {
		return e, fmt.Sprintf("hashing-%d:%s-description", max(h.Dim, 0), mod)
	}
	return e, "encoder:" + string(mod)
}

// queryEmbedder returns the embedder of queries against a modality's memories.
func (ns *Namespace) queryEmbedder(mod Modality) llm.Embedder {
	if mod == Text || mod == "" {
		return ns.cfg.QueryEmbedder
	}
	return ns.cfg.Encoders[mod]
}

// embedAll sets the vectors of ms, with one Embed call per modality for the
// contents not in cache (which it fills). An all-zero vector (a text without a word
// the offline embedder sees) is no vector: the memory is found by keyword only.
func (ns *Namespace) embedAll(ctx context.Context, ms []*Memory, cache map[string][]float32) error {
	byMod := map[Modality][]string{}
	for _, m := range ms {
		k := string(m.Modality) + "\x00" + m.Content
		if _, ok := cache[k]; !ok && !slices.Contains(byMod[m.Modality], m.Content) {
			byMod[m.Modality] = append(byMod[m.Modality], m.Content)
		}
	}
	for _, mod := range slices.Sorted(maps.Keys(byMod)) {
		texts := byMod[mod]
		e, _ := ns.embedder(mod)
		vs, err := e.Embed(ctx, texts)
		if err != nil {
			return fmt.Errorf("memory: embedding %d %s memories: %w", len(texts), mod, err)
		}
		if len(vs) != len(texts) {
			return fmt.Errorf("memory: the %s embedder returned %d vectors for %d texts", mod, len(vs), len(texts))
		}
		for i, t := range texts {
			v, err := usable(vs[i])
			if err != nil {
				return fmt.Errorf("memory: the %s embedder: %w", mod, err)
			}
			cache[string(mod)+"\x00"+t] = v
		}
	}
	for _, m := range ms {
		_, name := ns.embedder(m.Modality)
		m.Vector, m.Embedder = slices.Clone(cache[string(m.Modality)+"\x00"+m.Content]), name
	}
	return nil
}

// peek runs fn with mu held, unless a batch holds it (false): what a write
// computes before it is queued must not wait for the Append in flight.
func (ns *Namespace) peek(fn func()) bool {
	if !ns.mu.TryLock() {
		return false
	}
	defer ns.mu.Unlock()
	fn()
	return true
}

// precomputed holds what a write computed before it was queued: the vectors and
// entities of the memories it may write (embedding and extraction are slow calls,
// made outside the namespace's lock, where they would hold up every write of the
// batch), and the errors that kept them from being computed.
type precomputed struct {
	vectors              map[string][]float32 // by modality and content
	extracted            map[string]extraction
	embedErr, extractErr error
}

// precompute embeds ms (one Embed call per modality) and extracts the entities of
// those extract accepts, before the write that may store them.
func (ns *Namespace) precompute(ctx context.Context, ms []*Memory, extract func(*Memory) bool) *precomputed {
	pre := &precomputed{vectors: map[string][]float32{}, extracted: map[string]extraction{}}
	if len(ms) == 0 {
		return pre
	}
	cp := make([]*Memory, len(ms))
	for i, m := range ms {
		c := copyMemory(m)
		cp[i] = &c
	}
	pre.embedErr = ns.embedAll(ctx, cp, pre.vectors)
	for _, m := range cp {
		if extract(m) {
			if err := ns.extract(ctx, m, pre.extracted); err != nil {
				pre.extractErr = err
				break
			}
		}
	}
	return pre
}

// embed sets the vectors of ms, as embedAll, from what was computed before; the
// contents missing are embedded now, unless computing them before failed: that
// error is returned.
func (pre *precomputed) embed(ctx context.Context, ns *Namespace, ms []*Memory) error {
	if pre.embedErr != nil {
		for _, m := range ms {
			if _, ok := pre.vectors[string(m.Modality)+"\x00"+m.Content]; !ok {
				return pre.embedErr
			}
		}
	}
	return ns.embedAll(ctx, ms, pre.vectors)
}

// extract sets the entities of a semantic memory, as Namespace.extract, from what
// was computed before, or now (unless that failed before: its error).
func (pre *precomputed) extract(ctx context.Context, ns *Namespace, m *Memory) error {
	if _, ok := pre.extracted[m.Content]; !ok && pre.extractErr != nil {
		return pre.extractErr
	}
	return ns.extract(ctx, m, pre.extracted)
}

// usable returns v, or nil for a zero vector; a NaN or infinite component is an
// error, and so is an empty vector: no embedder has vectors of no dimension (the
// offline one gives a text of no word a zero vector of its own), so it is an
// embedder failing (a server or proxy answering "embedding": []), and a memory
// written with it would be without a vector for good.
func usable(v []float32) ([]float32, error) {
	if len(v) == 0 {
		return nil, errors.New("an empty vector")
	}
	zero := true
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, errors.New("a vector with a NaN or infinite component")
		}
		zero = zero && x == 0
	}
	if zero {
		return nil, nil
	}
	return v, nil
}

type extraction struct {
	entities  []string
	relations []messages.MemoryRelation
}

// extract sets the entities and relations of a semantic memory.
func (ns *Namespace) extract(ctx context.Context, m *Memory, cache map[string]extraction) error {
	x, ok := cache[m.Content]
	if !ok {
		ents, rels, err := ns.cfg.Extract(ctx, m.Content)
		if err != nil {
			return fmt.Errorf("memory: extracting entities: %w", err)
		}
		x.entities = ents
		for _, r := range rels {
			x.relations = append(x.relations, messages.MemoryRelation{From: r.From, Type: r.Type, To: r.To})
		}
		cache[m.Content] = x
	}
	m.Entities, m.Relations = slices.Clone(x.entities), slices.Clone(x.relations)
	return nil
}

// workingValue is what a working memory is worth keeping: importance × its time
// decay. Capacity evicts the least valuable first.
func workingValue(m *Memory, now time.Time) float64 {
	return m.Importance * pmem.WorkingTimeDecay(now.Sub(m.Timestamp))
}

// expired reports whether a working memory outlived the TTL since it was last
// written.
func (ns *Namespace) expired(m *Memory, now time.Time) bool {
	return m.Tier == Working && now.Sub(m.Updated) >= ns.cfg.WorkingTTL
}

// evict returns the MemoryForgotten that keeps the working tier within its capacity
// once adds are added (nil when it fits): the least valuable go first (workingValue),
// the oldest first among equals.
func (ns *Namespace) evict(now time.Time, adds []*Memory, key string) messages.Payload {
	var work []*Memory
	for id := range ns.st.working {
		work = append(work, ns.st.mems[id])
	}
	for _, m := range adds {
		if m.Tier == Working {
			work = append(work, m)
		}
	}
	over := len(work) - ns.cfg.WorkingCapacity
	if over <= 0 {
		return nil
	}
	slices.SortFunc(work, func(a, b *Memory) int {
		if c := cmp.Compare(workingValue(a, now), workingValue(b, now)); c != 0 {
			return c
		}
		if c := a.Timestamp.Compare(b.Timestamp); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	ids := make([]string, over)
	for i := range ids {
		ids[i] = work[i].ID
	}
	slices.Sort(ids)
	return &messages.MemoryForgotten{Key: key, Reason: fmt.Sprintf("capacity %d", ns.cfg.WorkingCapacity), MemoryIDs: ids}
}

// expire forgets the working memories that outlived the TTL, with the reason "ttl:
// not written for 1h0m0s" (the TTL then in force, as "capacity N" names the
// capacity). The caller holds mu and has folded the stream; it refolds on
// ErrSeqConflict.
func (ns *Namespace) expire(ctx context.Context) error {
	p := ns.expiry()
	if p == nil {
		return nil
	}
	events, err := ns.s.Events("", ns.st.seq, []messages.Payload{p})
	if err != nil {
		return err
	}
	if err := ns.cfg.Log.Append(ctx, events); err != nil {
		return err
	}
	if err := ns.apply(events[0]); err != nil {
		return err
	}
	ns.catchUpVectors(ctx)
	return nil
}

// expiry returns the MemoryForgotten of the working memories that outlived the
// TTL (nil: none did). The caller holds mu and has folded the stream.
func (ns *Namespace) expiry() messages.Payload {
	now := ns.cfg.Now()
	var ids []string
	for id := range ns.st.working {
		if ns.expired(ns.st.mems[id], now) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	reason := fmt.Sprintf("ttl: not written for %s", ns.cfg.WorkingTTL)
	return &messages.MemoryForgotten{Reason: reason, MemoryIDs: ids}
}

// UpdateRequest changes the fields of a memory that are set.
type UpdateRequest struct {
	Content    *string
	Importance *float64
	// Metadata is merged key by key into the memory's: its keys win, and a key set
	// to null is deleted.
	Metadata json.RawMessage
	Reason   string
}

// Update changes memory id and returns it: new content is embedded and (semantic
// tier) its entities extracted again.
func (ns *Namespace) Update(ctx context.Context, key, id string, u UpdateRequest) (Memory, error) {
	if u.Content == nil && u.Importance == nil && len(bytes.TrimSpace(u.Metadata)) == 0 {
		return Memory{}, fmt.Errorf("%w: nothing to update: give new content, importance or metadata", ErrInvalid)
	}
	var content string
	if u.Content != nil {
		c, err := ns.checkContent(*u.Content)
		if err != nil {
			return Memory{}, err
		}
		content = c
	}
	if u.Importance != nil {
		if err := CheckImportance(*u.Importance); err != nil {
			return Memory{}, err
		}
	}
	meta, err := checkMetadata(u.Metadata)
	if err != nil {
		return Memory{}, err
	}
	if err := checkSizes(ns.cfg.MaxContentBytes, meta, "", "", nil); err != nil {
		return Memory{}, err
	}
	meta = ns.redactJSON(meta)
	var pre *precomputed
	if u.Content != nil {
		// The new content's vector and entities, computed before the write (the
		// memory as it is now tells its modality and tier; while a batch holds
		// the lock, it is taken to be a semantic text); a change decided against
		// another computes what it lacks.
		m := Memory{ID: id, Tier: Semantic, Modality: Text}
		ns.peek(func() {
			m = Memory{}
			if old := ns.st.mems[id]; old != nil {
				m = copyMemory(old)
			}
		})
		if m.ID != "" && m.Content != content {
			m.Content, m.Hash = content, pmem.ContentHash(content)
			pre = ns.precompute(ctx, []*Memory{&m}, func(m *Memory) bool { return m.Tier == Semantic })
		}
	}
	if pre == nil {
		pre = ns.precompute(ctx, nil, nil)
	}
	var out Memory
	var outErr error
	err = ns.write(ctx, key, func() ([]messages.Payload, error) {
		old := ns.st.mems[id]
		if old == nil {
			return nil, ns.unknown(id)
		}
		m := copyMemory(old)
		if u.Content != nil && content != m.Content {
			m.Content, m.Hash = content, pmem.ContentHash(content)
			if err := pre.embed(ctx, ns, []*Memory{&m}); err != nil {
				return nil, err
			}
			if m.Tier == Semantic {
				if err := pre.extract(ctx, ns, &m); err != nil {
					return nil, err
				}
			}
		}
		if u.Importance != nil {
			m.Importance = *u.Importance
		}
		if meta != nil {
			m.Metadata, _ = mergeMetadata(m.Metadata, meta, true)
			if err := checkSizes(ns.cfg.MaxContentBytes, m.Metadata, "", "", nil); err != nil {
				return nil, err
			}
		}
		return []messages.Payload{&messages.MemoryUpdated{Key: key, Reason: ns.why(u.Reason, "updated"), Memory: toRecord(&m)}}, nil
	}, func(bool) { out, outErr = ns.current(id) })
	if err != nil {
		return Memory{}, err
	}
	return out, outErr
}

// current returns memory id as it is now. The caller holds mu.
func (ns *Namespace) current(id string) (Memory, error) {
	m := ns.st.mems[id]
	if m == nil {
		return Memory{}, ns.unknown(id)
	}
	return copyMemory(m), nil
}

func (ns *Namespace) unknown(id string) error {
	return fmt.Errorf("%w: %q in namespace %s", ErrNotFound, id, ns.name)
}

// live checks that ids name distinct live memories.
func (ns *Namespace) live(ids []string) error {
	seen := map[string]bool{}
	for _, id := range ids {
		if ns.st.mems[id] == nil {
			return ns.unknown(id)
		}
		if seen[id] {
			return fmt.Errorf("%w: memory %q named twice", ErrInvalid, id)
		}
		seen[id] = true
	}
	return nil
}

// Forget forgets memories: they leave every projection, and the event says why.
// Like Merge, Promote, Distill and Invalidate, it takes Expect among its options: a
// compare-and-set on the versions of the memories it stands on.
func (ns *Namespace) Forget(ctx context.Context, key string, ids []string, reason string, opts ...WriteOption) error {
	if len(ids) == 0 {
		return fmt.Errorf("%w: no memories to forget", ErrInvalid)
	}
	o := WriteOptionsOf(opts...)
	return ns.write(ctx, key, func() ([]messages.Payload, error) {
		if err := ns.live(ids); err != nil {
			return nil, err
		}
		if err := ns.expected(o); err != nil {
			return nil, err
		}
		sorted := slices.Sorted(slices.Values(ids))
		return []messages.Payload{&messages.MemoryForgotten{Key: key, Reason: ns.why(reason, "forgotten"), MemoryIDs: sorted}}, nil
	}, nil)
}

// Clear forgets every memory of tier (every tier, and the core blocks, when tier is
// empty) and returns how many memories went.
func (ns *Namespace) Clear(ctx context.Context, key string, tier Tier, reason string) (int, error) {
	if tier != "" {
		if _, err := ParseTier(string(tier)); err != nil {
			return 0, err
		}
	}
	n := 0
	err := ns.write(ctx, key, func() ([]messages.Payload, error) {
		n = 0
		for _, m := range ns.st.mems {
			if tier == "" || m.Tier == tier {
				n++
			}
		}
		if n == 0 && (tier != "" || len(ns.st.blocks) == 0) {
			return nil, nil
		}
		return []messages.Payload{&messages.MemoryCleared{Key: key, Reason: ns.why(reason, "cleared"), Tier: string(tier)}}, nil
	}, func(applied bool) {
		if applied {
			n = ns.st.keys[key].removed
		}
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Merge folds the memories merged into memory into and returns it: it keeps its
// content and vector, gains every source of the merged ones plus a source {kind
// "memory", id, detail: the merged one's metadata} for each, their metadata keys it
// lacks (on a conflict its own value stays; the other is in that source's detail),
// their participants and entities, and the highest importance. The merged ones
// leave every projection.
func (ns *Namespace) Merge(ctx context.Context, key, into string, merged []string, reason string, opts ...WriteOption) (Memory, error) {
	if len(merged) == 0 {
		return Memory{}, fmt.Errorf("%w: no memories to merge", ErrInvalid)
	}
	if slices.Contains(merged, into) {
		return Memory{}, fmt.Errorf("%w: memory %q cannot be merged into itself", ErrInvalid, into)
	}
	o := WriteOptionsOf(opts...)
	var out Memory
	var outErr error
	err := ns.write(ctx, key, func() ([]messages.Payload, error) {
		if err := ns.live(append([]string{into}, merged...)); err != nil {
			return nil, err
		}
		if err := ns.expected(o); err != nil {
			return nil, err
		}
		k := copyMemory(ns.st.mems[into])
		for _, id := range merged {
			o := ns.st.mems[id]
			for _, s := range o.Sources {
				k.Sources = addSource(k.Sources, s)
			}
			k.Sources = addSource(k.Sources, messages.MemorySource{Kind: "memory", ID: id, Detail: cloneRaw(o.Metadata)})
			k.Metadata = mergeMetadataWithin(k.Metadata, o.Metadata, ns.cfg.MaxContentBytes)
			k.Importance = math.Max(k.Importance, o.Importance)
			if k.Tier == Semantic {
				for _, e := range o.Entities {
					if !slices.Contains(k.Entities, e) {
						k.Entities = append(k.Entities, e)
					}
				}
				for _, r := range o.Relations {
					if !slices.Contains(k.Relations, r) {
						k.Relations = append(k.Relations, r)
					}
				}
			}
		}
		absorbed := make([]*Memory, len(merged))
		for i, id := range merged {
			absorbed[i] = ns.st.mems[id]
		}
		k.Participants = mergeParticipantsWithin(k.Participants, absorbed, ns.cfg.MaxContentBytes)
		return []messages.Payload{&messages.MemoryMerged{Key: key, Reason: ns.why(reason, "merged"), Merged: slices.Clone(merged), Memory: toRecord(&k)}}, nil
	}, func(bool) { out, outErr = ns.current(into) })
	if err != nil {
		return Memory{}, err
	}
	return out, outErr
}

// mergeParticipantsWithin returns kept (a merge's kept memory's participants) with
// the participants of the memories absorbed that it lacks, as long as they hold at
// most limit bytes, the bound a write holds participants to (checkSizes): the
// kept memory's own come first, then those of the absorbed memories, the most
// recent memory's first (a merge of merges would otherwise grow them without
// bound, and the memory could no longer be written again). A participant that
// does not fit is left out; the absorbed memory's history keeps it.
func mergeParticipantsWithin(kept []string, absorbed []*Memory, limit int) []string {
	out := slices.Clone(kept)
	n := 0
	for _, p := range out {
		n += len(strings.TrimSpace(p))
	}
	byTime := slices.Clone(absorbed)
	slices.SortStableFunc(byTime, func(a, b *Memory) int { return b.Timestamp.Compare(a.Timestamp) })
	for _, m := range byTime {
		for _, p := range m.Participants {
			if slices.Contains(out, p) {
				continue
			}
			if size := len(strings.TrimSpace(p)); n+size <= limit {
				out, n = append(out, p), n+size
			}
		}
	}
	return out
}

// addSource appends s unless an equal source is there.
func addSource(src []messages.MemorySource, s messages.MemorySource) []messages.MemorySource {
	for _, x := range src {
		if x.Kind == s.Kind && x.ID == s.ID && x.Seq == s.Seq && bytes.Equal(x.Detail, s.Detail) {
			return src
		}
	}
	return append(src, s)
}

// Promote moves memory id to tier to (working to episodic), keeping its ID, and
// returns it. A semantic memory gets its entities extracted.
func (ns *Namespace) Promote(ctx context.Context, key, id string, to Tier, reason string, opts ...WriteOption) (Memory, error) {
	o := WriteOptionsOf(opts...)
	if _, err := ParseTier(string(to)); err != nil {
		return Memory{}, err
	}
	pre := ns.precompute(ctx, nil, nil)
	if to == Semantic {
		// Its entities, extracted before the write.
		var m Memory
		ns.peek(func() {
			if old := ns.st.mems[id]; old != nil {
				m = copyMemory(old)
			}
		})
		if m.ID != "" && m.Tier != Semantic {
			pre = ns.precompute(ctx, []*Memory{&m}, func(*Memory) bool { return true })
		}
	}
	var out Memory
	var outErr error
	err := ns.write(ctx, key, func() ([]messages.Payload, error) {
		old := ns.st.mems[id]
		if old == nil {
			return nil, ns.unknown(id)
		}
		if err := ns.expected(o); err != nil {
			return nil, err
		}
		switch {
		case old.Tier == to:
			return nil, fmt.Errorf("%w: memory %q is %s already", ErrInvalid, id, to)
		case old.Modality != Text && to != Perceptual:
			return nil, fmt.Errorf("%w: a %s memory stays in the perceptual tier", ErrInvalid, old.Modality)
		}
		m := copyMemory(old)
		m.Tier = to
		if to == Semantic {
			if err := pre.extract(ctx, ns, &m); err != nil {
				return nil, err
			}
		} else {
			m.Entities, m.Relations = nil, nil
		}
		return []messages.Payload{&messages.MemoryPromoted{Key: key, Reason: ns.why(reason, "promoted"), From: string(old.Tier), Memory: toRecord(&m)}}, nil
	}, func(bool) { out, outErr = ns.current(id) })
	if err != nil {
		return Memory{}, err
	}
	return out, outErr
}

// Distill adds a semantic memory summarised from the memories sources (which stay)
// and returns it; its Sources name them.
func (ns *Namespace) Distill(ctx context.Context, key string, sources []string, content string, importance float64, reason string, opts ...WriteOption) (Memory, error) {
	if len(sources) == 0 {
		return Memory{}, fmt.Errorf("%w: no memories to distill", ErrInvalid)
	}
	c, err := ns.checkContent(content)
	if err != nil {
		return Memory{}, err
	}
	if err := CheckImportance(importance); err != nil {
		return Memory{}, err
	}
	pre := ns.precompute(ctx, []*Memory{{Tier: Semantic, Modality: Text, Content: c}}, func(*Memory) bool { return true })
	o := WriteOptionsOf(opts...)
	var id string
	var out Memory
	var outErr error
	err = ns.write(ctx, key, func() ([]messages.Payload, error) {
		if err := ns.live(sources); err != nil {
			return nil, err
		}
		if err := ns.expected(o); err != nil {
			return nil, err
		}
		m := &Memory{Namespace: ns.name, Tier: Semantic, Modality: Text, Content: c, Importance: importance,
			Timestamp: ns.cfg.Now().UTC().Truncate(time.Microsecond), Hash: pmem.ContentHash(c)}
		for _, s := range sources {
			m.Sources = append(m.Sources, messages.MemorySource{Kind: "memory", ID: s})
		}
		m.ID = ns.newID(nil)
		if err := pre.embed(ctx, ns, []*Memory{m}); err != nil {
			return nil, err
		}
		if err := pre.extract(ctx, ns, m); err != nil {
			return nil, err
		}
		id = m.ID
		return []messages.Payload{&messages.MemoryDistilled{Key: key, Reason: ns.why(reason, "distilled"), Memory: toRecord(m)}}, nil
	}, func(applied bool) {
		if applied {
			if k := ns.st.keys[key]; len(k.ids) > 0 {
				id = k.ids[0]
			}
		}
		out, outErr = ns.current(id)
	})
	if err != nil {
		return Memory{}, err
	}
	return out, outErr
}

// Invalidate marks memory id as no longer true since now, contradicted by the
// memory by (optional). It stays, with its history, but search skips it unless
// asked (Query.IncludeInvalid). A memory invalid already is left as it is.
func (ns *Namespace) Invalidate(ctx context.Context, key, id, by, reason string, opts ...WriteOption) error {
	if by == id {
		return fmt.Errorf("%w: memory %q cannot invalidate itself", ErrInvalid, id)
	}
	o := WriteOptionsOf(opts...)
	return ns.write(ctx, key, func() ([]messages.Payload, error) {
		m := ns.st.mems[id]
		if m == nil {
			return nil, ns.unknown(id)
		}
		if by != "" && ns.st.mems[by] == nil {
			return nil, ns.unknown(by)
		}
		if err := ns.expected(o); err != nil {
			return nil, err
		}
		if m.InvalidAt != nil {
			return nil, nil
		}
		return []messages.Payload{&messages.MemoryInvalidated{Key: key, Reason: ns.why(reason, "invalidated"), MemoryID: id, By: by,
			AtUS: ns.cfg.Now().UnixMicro()}}, nil
	}, nil)
}
