package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/vectorstore"
)

// memoryMaxBody bounds a POST /v1/memories body: 10,000 memories of 3 KB.
const memoryMaxBody = 32 << 20

// memoryWriteTimeout is how long a POST /v1/memories may take to write its
// memories (embedding them, waiting for the namespace) before its response is
// written: the write deadline of the HTTP server (HTTPConfig.WriteTimeout, 30 s by
// default) is extended to it once the body is read, as for a document's ingestion.
const memoryWriteTimeout = 10 * time.Minute

// Memories returns the node's agent memory, nil when Config.Memory is not set.
func (n *Node) Memories() *memory.Memories { return n.memories }

// The memory API, in the route table (apiRoutes) when the node has memory:
//
//	POST /v1/memories                  one memory object or an array → 201 {"ids": [...]}
//	GET  /v1/memories/search           ?namespace=&q=&limit=&tier=&mode= → {"results": [...]}
//	GET  /v1/memories/{id}/history     ?namespace= (optional) → {"id", "namespace", "history": [...]}

// postMemories writes memories: each namespace's share of the body in one append
// (a batch of 1,000 memories is one request and one write, not 1,000). The
// Idempotency-Key header, when given, makes a retried request write nothing twice.
func (n *Node) postMemories(w http.ResponseWriter, r *http.Request) {
	if err := checkJSONContentType(r.Header.Get("Content-Type")); err != nil {
		writeError(w, http.StatusUnsupportedMediaType, "%v", err)
		return
	}
	if r.ContentLength > memoryMaxBody {
		writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", memoryMaxBody)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, memoryMaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooLarge):
			writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", memoryMaxBody)
		case errors.As(err, &netErr) && netErr.Timeout():
			writeError(w, http.StatusRequestTimeout, "the request body was not sent in time")
		default:
			writeError(w, http.StatusBadRequest, "reading the request body: %v", err)
		}
		return
	}
	// The body is read: embedding and appending its memories (10,000 of them with
	// a remote embedder, or behind a consolidation of the namespace) may outlast
	// the server's write timeout, which would close the connection on a write
	// that is stored, its IDs never answered.
	w = n.awaitAnswer(w, memoryWriteTimeout)
	inputs, err := memory.DecodeInputs(body)
	if err == nil {
		// Every memory is checked with the limits of the write (content size, a
		// timestamp ahead) before any namespace's share is written: a bad one in
		// the last namespace must not leave the first ones written.
		for i, in := range inputs {
			if err = n.memories.Check(in); err != nil {
				if len(inputs) > 1 {
					err = fmt.Errorf("memory %d: %w", i, err)
				}
				break
			}
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	// A client's key names one request (memorykeys.go): its digest goes with
	// the key to each namespace, and the node remembers it for namespaces the
	// key never wrote to.
	digest, release := "", func() {}
	if key == "" {
		key = randomKey()
	} else {
		digest = memoryRequestDigest(inputs)
		ok, fresh := n.memKeys.claim(key, digest, time.Now())
		if !ok {
			writeError(w, http.StatusUnprocessableEntity, "Idempotency-Key reused with a different request: the Idempotency-Key %q was sent with another request before (other memories, namespaces, metadata, tier or importance); use a new key for a new request", key)
			return
		}
		if fresh { // a request refused (4xx) wrote nothing: the key is free again
			release = func() { n.memKeys.release(key, digest) }
		}
	}
	groups := groupByNamespace(inputs)
	batches := make([][]memory.Input, len(groups))
	for gi, g := range groups {
		batches[gi] = make([]memory.Input, len(g.idx))
		for j, i := range g.idx {
			batches[gi][j] = inputs[i]
		}
	}
	if len(groups) > 1 && digest != "" {
		// The key sent again with another request is refused before any
		// namespace's share is written: a namespace new to the key, first in
		// the body, would keep the memories of a request answered 422.
		for gi, g := range groups {
			err := n.checkMemories(r.Context(), g.ns, "http/"+key+"/"+g.ns, digest, batches[gi])
			if errors.Is(err, memory.ErrKeyReused) {
				release()
				writeError(w, http.StatusUnprocessableEntity, "namespace %s: Idempotency-Key reused with a different request: %v: the Idempotency-Key %q was sent with another request before; use a new key for a new request", g.ns, err, key)
				return
			}
		}
	}
	ids := make([]string, len(inputs))
	for gi, g := range groups {
		got, err := n.addMemories(r.Context(), g.ns, "http/"+key+"/"+g.ns, digest, batches[gi])
		switch {
		case errors.Is(err, memory.ErrKeyReused):
			release()
			writeError(w, http.StatusUnprocessableEntity, "namespace %s: Idempotency-Key reused with a different request: %v: the Idempotency-Key %q was sent with another request before; use a new key for a new request", g.ns, err, key)
			return
		case errors.Is(err, memory.ErrInvalid):
			release()
			writeError(w, http.StatusBadRequest, "namespace %s: %v", g.ns, err)
			return
		case err != nil:
			// The log failed (the vector store does not fail a write: the vectors
			// follow once it answers); the key makes a retry write nothing twice.
			writeError(w, http.StatusServiceUnavailable, "namespace %s: %v (send the request again with the same Idempotency-Key to get the IDs: what was written is not written twice)", g.ns, err)
			return
		}
		for j, i := range g.idx {
			ids[i] = got[j]
		}
	}
	writeJSON(w, http.StatusCreated, map[string][]string{"ids": ids})
}

// nsGroup is the inputs of one namespace, by index, in the order of the body.
type nsGroup struct {
	ns  string
	idx []int
}

func groupByNamespace(inputs []memory.Input) []nsGroup {
	var groups []nsGroup
	at := map[string]int{}
	for i, in := range inputs {
		g, ok := at[in.Namespace]
		if !ok {
			g = len(groups)
			at[in.Namespace] = g
			groups = append(groups, nsGroup{ns: in.Namespace})
		}
		groups[g].idx = append(groups[g].idx, i)
	}
	return groups
}

// AddMemories writes inputs (checked by memory.DecodeInputs) to their namespaces:
// one Add per namespace, in the order the namespaces first appear, under key and
// the namespace. It returns the results in the order of inputs (an exact duplicate
// of a stored memory gets that memory's ID and NONE; a repeat under the key the
// earlier results, marked Repeat). Every input is checked (Memories.Check)
// before anything is written, so bad input writes nothing; a namespace's batch is
// one append, so a failure of the store leaves the namespaces before it written and
// the others untouched, and retrying with the same key writes each once.
func AddMemories(ctx context.Context, m *memory.Memories, key string, inputs []memory.Input, reason string) ([]memory.AddResult, error) {
	for i, in := range inputs {
		if err := m.Check(in); err != nil {
			return nil, fmt.Errorf("memory %d: %w", i, err)
		}
	}
	out := make([]memory.AddResult, len(inputs))
	for _, g := range groupByNamespace(inputs) {
		batch := make([]memory.Input, len(g.idx))
		for j, i := range g.idx {
			batch[j] = inputs[i]
		}
		got, err := addToNamespace(ctx, m, g.ns, key+"/"+g.ns, batch, reason)
		if err != nil {
			return nil, fmt.Errorf("namespace %s: %w", g.ns, err)
		}
		for j, i := range g.idx {
			out[i] = got[j]
		}
	}
	return out, nil
}

// checkKey tells, writing nothing, whether addToNamespace under key would be
// refused (memory.Namespace.CheckKey).
func checkKey(ctx context.Context, m *memory.Memories, name, key string, inputs []memory.Input, reason string) error {
	ns, err := m.Namespace(ctx, name)
	if err != nil {
		return err
	}
	reqs := make([]memory.AddRequest, len(inputs))
	for i, in := range inputs {
		if in.Namespace != name {
			return fmt.Errorf("%w: memory %d is for namespace %s, not %s", memory.ErrInvalid, i, in.Namespace, name)
		}
		reqs[i] = in.Request(reason)
	}
	return ns.CheckKey(key, reqs)
}

// addToNamespace writes checked inputs of one namespace in one Add.
func addToNamespace(ctx context.Context, m *memory.Memories, name, key string, inputs []memory.Input, reason string) ([]memory.AddResult, error) {
	ns, err := m.Namespace(ctx, name)
	if err != nil {
		return nil, err
	}
	reqs := make([]memory.AddRequest, len(inputs))
	for i, in := range inputs {
		if in.Namespace != name {
			return nil, fmt.Errorf("%w: memory %d is for namespace %s, not %s", memory.ErrInvalid, i, in.Namespace, name)
		}
		if err := in.Check(); err != nil {
			return nil, fmt.Errorf("memory %d: %w", i, err)
		}
		reqs[i] = in.Request(reason)
	}
	return ns.Add(ctx, key, reqs)
}

// resultIDs returns the IDs of results.
func resultIDs(results []memory.AddResult) []string {
	ids := make([]string, len(results))
	for i, r := range results {
		ids[i] = r.ID
	}
	return ids
}

// memoryWritten tells the consolidator (and Config.MemoryWritten) that a namespace
// took new memories: memory.Config.Written, so every Add on the node counts (the
// HTTP API's, the memory tool's, Remember's).
func (n *Node) memoryWritten(ns string, count int) {
	if n.consolidation != nil {
		n.consolidation.Notify(ns, count)
	}
	if n.cfg.MemoryWritten != nil {
		n.cfg.MemoryWritten(ns, count)
	}
}

// SearchAnswer is the body of GET /v1/memories/search. Note, when set, says what a
// hybrid search ranked without, the query's vector (the query embedder failed) or
// the vector store, and why (memory.Namespace.SearchNoted, VectorNote).
type SearchAnswer struct {
	Results []SearchHit `json:"results"`
	Note    string      `json:"note,omitempty"`
}

// SearchHit is one result of GET /v1/memories/search.
type SearchHit struct {
	ID        string          `json:"id"`
	Tier      memory.Tier     `json:"tier"`
	Content   string          `json:"content"`
	Score     float64         `json:"score"`
	Metadata  json.RawMessage `json:"metadata"`
	Timestamp time.Time       `json:"timestamp"`
}

// ParseMemoryQuery reads the query of GET /v1/memories/search (and node memory
// search): namespace and q are required; limit 1 to 100 (default 10); tier a
// comma-separated list of tiers (default all); mode hybrid, vector or keyword.
func ParseMemoryQuery(get func(string) string) (string, memory.Query, error) {
	ns := get("namespace")
	if ns == "" {
		return "", memory.Query{}, fmt.Errorf("%w: namespace is missing: say whose memories to search (a namespace such as user:alice)", memory.ErrInvalid)
	}
	if err := memory.CheckNamespace(ns); err != nil {
		return "", memory.Query{}, err
	}
	q := memory.Query{Text: get("q"), Mode: get("mode"), Limit: 10}
	if strings.TrimSpace(q.Text) == "" {
		return "", memory.Query{}, fmt.Errorf("%w: q is empty: say what to search for", memory.ErrInvalid)
	}
	if len(q.Text) > 8<<10 {
		return "", memory.Query{}, fmt.Errorf("%w: q is longer than 8 KiB", memory.ErrInvalid)
	}
	if !utf8.ValidString(q.Text) {
		// Embedded (JSON) or routed to the namespace's owner, each bad byte would
		// become U+FFFD: another text than the one asked for.
		return "", memory.Query{}, fmt.Errorf("%w: q is not valid UTF-8: percent-encode the query's text as UTF-8", memory.ErrInvalid)
	}
	if s := get("limit"); s != "" {
		l, err := strconv.Atoi(s)
		if err != nil || l < 1 || l > 100 {
			return "", memory.Query{}, fmt.Errorf("%w: limit %q: want 1 to 100", memory.ErrInvalid, s)
		}
		q.Limit = l
	}
	switch q.Mode {
	case "", "hybrid", "vector", "keyword":
	default:
		return "", memory.Query{}, fmt.Errorf("%w: mode %q: want hybrid, vector or keyword", memory.ErrInvalid, q.Mode)
	}
	if s := get("tier"); s != "" {
		for _, name := range strings.Split(s, ",") {
			t, err := memory.ParseTier(strings.TrimSpace(name))
			if err != nil {
				return "", memory.Query{}, err
			}
			q.Tiers = append(q.Tiers, t)
		}
	}
	return ns, q, nil
}

// SearchHits turns a namespace's results into the wire shape.
func SearchHits(results []memory.Result) []SearchHit {
	hits := make([]SearchHit, len(results))
	for i, r := range results {
		meta := r.Memory.Metadata
		if len(meta) == 0 {
			meta = json.RawMessage("{}")
		}
		ts, _ := wireTime(r.Memory.Timestamp)
		hits[i] = SearchHit{ID: r.Memory.ID, Tier: r.Memory.Tier, Content: r.Memory.Content, Score: r.Score, Metadata: meta, Timestamp: ts}
	}
	return hits
}

// wireTime is t as a search answer can write it in JSON (RFC 3339: the years 0 to
// 9999), and whether it is t: a memory dated before the year 1, stored before
// such a timestamp was refused (memory.checkTimestampYear), is dated the year 1's
// first instant; one past the year 9999, that year's last. Without, its time could
// not be written, and every search of its namespace failed.
func wireTime(t time.Time) (time.Time, bool) {
	t = t.UTC()
	switch {
	case t.Year() < 1:
		return time.Time{}, false
	case t.Year() > 9999:
		return time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), false
	}
	return t, true
}

// warnUnwritableTimes logs each result of a search of namespace ns whose time a
// search answer cannot write (wireTime: it answers with another).
func warnUnwritableTimes(logger *slog.Logger, ns string, results []memory.Result) {
	for _, r := range results {
		if ts, ok := wireTime(r.Memory.Timestamp); !ok {
			logger.Warn("memory: a stored memory's time cannot be written; it is answered as another", "namespace", ns, "memory", r.Memory.ID,
				"at_us", r.Memory.Timestamp.UnixMicro(), "answered", ts.Format(time.RFC3339))
		}
	}
}

func (n *Node) searchMemories(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()
	err := onceEach(query, "namespace", "q", "limit", "tier", "mode")
	var name string
	var q memory.Query
	if err == nil {
		name, q, err = ParseMemoryQuery(query.Get)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	w = n.awaitAnswer(w, searchTimeout)
	res, err := n.memoryExecWithin(r.Context(), name, memorySearch, "", q, searchTimeout) // the owner embeds the query
	switch {
	case errors.Is(err, memory.ErrInvalid):
		writeError(w, http.StatusBadRequest, "%v", err)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "search failed: %v", err)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(append(res, '\n'))
	}
}

// HistoryAnswer is the body of GET /v1/memories/{id}/history.
type HistoryAnswer struct {
	ID        string          `json:"id"`
	Namespace string          `json:"namespace"`
	History   []memory.Change `json:"history"`
}

// onceEach refuses a query that gives one of names more than once: url.Values.Get
// would take the first and answer, say, a search of user:alice to a request that
// named user:alice and user:bob as though it had searched both.
func onceEach(query url.Values, names ...string) error {
	for _, name := range names {
		if vs := query[name]; len(vs) > 1 {
			return fmt.Errorf("%w: %s is given %d times: give it once (one namespace a request; several tiers as one comma-separated list)",
				memory.ErrInvalid, name, len(vs))
		}
	}
	return nil
}

// MemoryHistory finds the history of memory id: in namespace when given, else in
// the namespace that holds it (memory.Memories.Locate: no read of every namespace
// per lookup). It fails with memory.ErrNotFound when no event touched id.
func MemoryHistory(ctx context.Context, m *memory.Memories, namespace, id string) (HistoryAnswer, error) {
	names := []string{namespace}
	if namespace == "" {
		var err error
		if names, err = m.Locate(ctx, id); err != nil {
			return HistoryAnswer{}, err
		}
	} else if err := memory.CheckNamespace(namespace); err != nil {
		return HistoryAnswer{}, err
	}
	for _, name := range names {
		h, err := m.History(ctx, name, id)
		if errors.Is(err, memory.ErrNotFound) {
			continue
		}
		if err != nil {
			return HistoryAnswer{}, err
		}
		return HistoryAnswer{ID: id, Namespace: name, History: h}, nil
	}
	return HistoryAnswer{}, fmt.Errorf("%w: %s", memory.ErrNotFound, id)
}

func (n *Node) memoryHistory(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "" || len(id) > 200 {
		writeError(w, http.StatusBadRequest, "bad memory id")
		return
	}
	var ans HistoryAnswer
	if err := onceEach(r.URL.Query(), "namespace"); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	var err error
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		if err = memory.CheckNamespace(ns); err == nil {
			var res json.RawMessage
			if res, err = n.memoryExec(r.Context(), ns, memoryHistory, "", map[string]string{"ID": id}); err == nil {
				err = json.Unmarshal(res, &ans)
			}
		}
	} else {
		ans, err = MemoryHistory(r.Context(), n.memories, "", id)
	}
	switch {
	case errors.Is(err, memory.ErrInvalid):
		writeError(w, http.StatusBadRequest, "%v", err)
	case errors.Is(err, memory.ErrNotFound):
		writeError(w, http.StatusNotFound, "%v", err)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "%v", err)
	default:
		writeJSON(w, http.StatusOK, ans)
	}
}

// idempotencyKey is the request's Idempotency-Key header ("" without one;
// headerIdempotencyKey): at most 200 bytes of UTF-8. The key is kept in the events of the writes it made, as JSON,
// where a byte that is not UTF-8 (a header may carry any byte from 0x80) would
// become U+FFFD: after a restart the key read back would not be the key sent, and
// a retry, or another request under it, would be taken for a new one.
func idempotencyKey(r *http.Request) (string, error) {
	key, err := headerIdempotencyKey(r)
	if err != nil {
		return "", err
	}
	if len(key) > 200 {
		return "", errors.New("Idempotency-Key is longer than 200 bytes")
	}
	if !utf8.ValidString(key) {
		at := 0
		for at < len(key) {
			c, n := utf8.DecodeRuneInString(key[at:])
			if c == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		return "", fmt.Errorf("Idempotency-Key is not UTF-8 (byte %d, 0x%02x): use ASCII letters, digits and dashes, such as a UUID", at, key[at])
	}
	return key, nil
}

func randomKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// MemoryVectorsPath is where a node keeps its memories' vectors in the embedded
// index: DATA/memory/vectors.log, or DATA/memory/NODE/vectors.log for a node of a
// cluster, whose nodes on one host may share the data directory (the vectors are
// each node's projection of the namespaces it serves, rebuilt from their events).
func MemoryVectorsPath(dataDir string, cluster bool, nodeID string) string {
	return vectorsPath(dataDir, "memory", cluster, nodeID)
}

// vectorsPath is DATA/DIR/vectors.log, or DATA/DIR/NODE/vectors.log for a node of
// a cluster: the embedded vector index of one kind of projection.
func vectorsPath(dataDir, dir string, cluster bool, nodeID string) string {
	if cluster {
		return filepath.Join(dataDir, dir, url.PathEscape(nodeID), "vectors.log")
	}
	return filepath.Join(dataDir, dir, "vectors.log")
}

// openMemory opens the agent memory of Config.Memory on the node's log, with its
// text redacted as events are and its events stamped by the node's clock.
func (n *Node) openMemory(ctx context.Context) error {
	if n.cfg.Memory == nil {
		return nil
	}
	cfg := *n.cfg.Memory
	// A node pinned to decision rules whose builds cannot fold a
	// memory.remembered writes none (as the write after task, remember).
	cfg.Unmarked = cfg.Unmarked || !actors.MarksRemembered(n.cfg.DecisionRules)
	cfg.Log = n.routedLogOf(n.log)
	if cfg.Redact == nil {
		cfg.Redact = n.redactor.String
	}
	if cfg.Now == nil {
		cfg.Now = n.cfg.Clock.Now
	}
	if cfg.Vectors == nil {
		// The vectors are a projection of the namespaces' events, rebuilt from them
		// when a namespace is first used: no fsync per write.
		v, err := vectorstore.OpenContext(ctx, vectorstore.Config{Path: MemoryVectorsPath(n.cfg.DataDir, n.cfg.Bus != nil, n.cfg.NodeID), NoSync: true, LockWait: n.cfg.LockWait, Logger: n.cfg.Logger,
			Index: vectorstore.IndexHNSW})
		if err != nil {
			return fmt.Errorf("memory: vectors: %w", err)
		}
		cfg.Vectors = v
		n.ownVectors = v
	}
	// A namespace this node uses (a write, a search, the memory tool, its
	// consolidation asked for) is consolidated on the schedule from then on, not
	// only once written to through this node: a namespace only searched since the
	// node started is maintained too, and a run that a crash cut short is taken up
	// an interval after the namespace's first use. A namespace nobody uses is not
	// loaded for it; one a sharded node opens without owning it (the core blocks an
	// ingress reads) is left to its owner.
	var scheduleOpened atomic.Pointer[consolidator.Scheduler]
	opened := cfg.Opened
	cfg.Opened = func(ns string) {
		if opened != nil {
			opened(ns)
		}
		if s := scheduleOpened.Load(); s != nil && n.ownsKey(memory.Stream(ns)) {
			s.Schedule(ns)
		}
	}
	skipped := cfg.Skipped
	cfg.Skipped = func(ns string, t messages.Type, seq uint64) {
		if skipped != nil {
			skipped(ns, t, seq)
		}
		n.cfg.Logger.Warn("memory: a namespace's stream holds events of a type this build does not know (a later build's); its fold skips them, they change no memory here (logged once per type)",
			"namespace", ns, "type", string(t), "seq", seq)
	}
	written := cfg.Written
	cfg.Written = func(ns string, added int) {
		if written != nil {
			written(ns, added)
		}
		n.memoryWritten(ns, added)
	}
	vs := n.vectorLogs(&vectorLog{kind: "memory", owner: "namespace", item: "memory",
		failed:  "memory: the vector store failed; the memories are stored in the log, their vectors follow once it takes them",
		back:    "memory: the vector store takes the namespace's vectors again",
		refused: "memory: the vector store refused a memory's vector: it is left out of the store (searches by keyword find it), and the collection's other vectors are written"})
	cfg.VectorTrouble, cfg.VectorParked = vs.trouble(cfg.VectorTrouble), vs.parked(cfg.VectorParked)
	cfg.Consolidate = func(ctx context.Context, ns *memory.Namespace, key string) (string, error) {
		// The memory tool runs on the namespace's owner (memorytool.go): a
		// command sent from its handler would wait behind itself.
		rep, err := n.consolidateLocal(ctx, ns.Name(), key)
		if err != nil {
			return "", err
		}
		return rep.String(), nil
	}
	m, err := memory.Open(cfg)
	if err != nil {
		return err
	}
	vs.waiting(m.VectorBacklog)
	n.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "memory", Name: "namespaces_loaded",
		Help: "Memory namespaces held in memory, folded (one unused for memory.idle_timeout, or past memory.max_namespaces, is released and folded again on its next use)."},
		func() float64 { return float64(m.LoadedNamespaces()) }))
	n.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "memory", Name: "vectors_parked",
		Help: "Vectors of the loaded memory namespaces that the vector store refused, waiting to be tried again (after 2 minutes, doubling at each refusal up to about an hour)."},
		func() float64 { return float64(m.ParkedVectors()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "memory", Name: "vector_retries_total",
			Help: "Tries again of vectors the vector store refused, after their wait (a refusal again also counts in troupe_vectors_parked_total)."},
			func() float64 { return float64(m.ParkedRetries()) }))
	n.memories = m
	// The namespaces as actors: a namespace's writes in order, its searches ranked
	// by its four tier actors (actors/memory.go).
	if n.memHost, err = actors.NewMemoryHost(n.system, actors.MemoryHostConfig{Memories: m, Logger: n.cfg.Logger}); err != nil {
		return err
	}
	if n.cfg.Consolidation != nil {
		sc := *n.cfg.Consolidation
		sc.System = n.system
		if sc.Logger == nil {
			sc.Logger = n.cfg.Logger
		}
		if sc.Consolidator.Model == nil {
			sc.Consolidator.Model = distiller(n.cfg.Model)
		}
		sc.Open = func(ctx context.Context, name string) (consolidator.Target, error) {
			if !n.ownsKey(memory.Stream(name)) {
				// Moved to another node in a rebalance: its consolidator runs there.
				return nil, fmt.Errorf("node %s does not own namespace %s: %w", n.cfg.NodeID, name, consolidator.ErrNotOwned)
			}
			// Held for the run: not released from memory in its middle.
			ns, release, err := n.memories.Hold(ctx, name)
			if err != nil {
				return nil, err
			}
			return heldNamespace{Namespace: ns, release: release}, nil
		}
		s, err := consolidator.NewScheduler(sc)
		if err != nil {
			return err
		}
		n.consolidation = s
		if sc.Interval >= 0 { // 0 is its default; negative, never on a schedule
			scheduleOpened.Store(s)
		}
	}
	return nil
}

// heldNamespace is a namespace a consolidation run holds in memory
// (memory.Memories.Hold) until it ends (consolidator.Releaser).
type heldNamespace struct {
	*memory.Namespace
	release func()
}

func (h heldNamespace) Release() { h.release() }

// Consolidate runs the consolidator on a namespace now, under key (a run asked
// again with the same key applies nothing twice): through the background actor of
// the namespace when Config.Consolidation is set, else directly, with the node's
// model for distillation. On a sharded node it runs on the namespace's owner, as
// the namespace's other operations do (memoryroute.go): the command travels to
// the owner of the stream's partition, in order with the namespace's other
// commands, which runs it and answers its report. Run here, it ran beside the
// owner's own consolidator, both planning from the same memories.
func (n *Node) Consolidate(ctx context.Context, namespace, key string) (consolidator.Report, error) {
	if n.memories == nil {
		return consolidator.Report{}, errors.New("node: no memory configured")
	}
	if !n.memoryRouted() {
		return n.consolidateLocal(ctx, namespace, key)
	}
	if err := memory.CheckNamespace(namespace); err != nil {
		return consolidator.Report{}, fmt.Errorf("%w: %w", memory.ErrInvalid, err)
	}
	res, err := n.memoryExecWithin(ctx, namespace, memoryConsolidate, key, struct{}{}, consolidateTimeout)
	if err != nil {
		return consolidator.Report{}, err
	}
	var ans consolidateAnswer
	if err := json.Unmarshal(res, &ans); err != nil {
		return consolidator.Report{}, fmt.Errorf("node: the answer of the consolidation of %s by its owner: %w", namespace, err)
	}
	switch {
	case ans.Error != "":
		return consolidator.Report{}, errors.New(ans.Error)
	case ans.Report == nil:
		return consolidator.Report{}, fmt.Errorf("node: the owner of %s answered its consolidation without a report", namespace)
	}
	return *ans.Report, nil
}

// consolidateTimeout bounds the wait for the owner of a namespace to answer a
// consolidation: a run asks the model to distil and to judge conflicts.
const consolidateTimeout = 5 * time.Minute

// consolidateLocal is Consolidate on this node's memories: on a sharded node, on
// the owner of the namespace's stream only (the command of Consolidate, the
// memory tool's consolidate, which runs on the owner), else refused with the
// partition and its owner's name.
func (n *Node) consolidateLocal(ctx context.Context, namespace, key string) (consolidator.Report, error) {
	if !n.ownsKey(memory.Stream(namespace)) {
		return consolidator.Report{}, n.notOwnedError(namespace)
	}
	if n.consolidation != nil {
		return n.consolidation.Consolidate(ctx, namespace, key)
	}
	c, err := consolidator.New(consolidator.Config{Model: distiller(n.cfg.Model), Logger: n.cfg.Logger})
	if err != nil {
		return consolidator.Report{}, err
	}
	ns, err := n.memories.Namespace(ctx, namespace)
	if err != nil {
		return consolidator.Report{}, err
	}
	return c.Run(ctx, ns, key)
}

// notOwnedError says that this sharded node does not own namespace: the
// partition of troupe.tasks its stream falls on, which its owner holds.
func (n *Node) notOwnedError(namespace string) error {
	n.own.mu.Lock()
	total := n.own.total
	n.own.mu.Unlock()
	where := "no partition of troupe.tasks is assigned to it yet"
	if total > 0 {
		where = fmt.Sprintf("its stream %s falls on partition %d of %d of troupe.tasks, which another node owns", memory.Stream(namespace), n.cfg.Bus.Partition(memory.Stream(namespace), total), total)
	}
	return fmt.Errorf("node %s does not own namespace %s (%s): it is consolidated by its owner: %w", n.cfg.NodeID, namespace, where, consolidator.ErrNotOwned)
}

// distiller is the model the consolidator distils and judges conflicts with: the
// node's, unless that is the offline rule-based model (llm.Offline), which is no
// language model: it would answer a summary request with its canned reply, and the
// consolidator would store that as a fact. Without a model the consolidator
// distils nothing and says so in its report.
func distiller(m llm.Model) llm.Model {
	if m == nil || m.Name() == llm.OfflineName {
		return nil
	}
	return m
}

// ownsKey reports whether this node owns the partition of key (a session or a
// memory stream): always, unless the node shards its sessions.
func (n *Node) ownsKey(key string) bool {
	if !n.sharded() {
		return true
	}
	n.own.mu.Lock()
	defer n.own.mu.Unlock()
	if n.own.total <= 0 {
		return false
	}
	return n.own.partitions[n.cfg.Bus.Partition(key, n.own.total)]
}

// addMemoryTool adds the memory tool to the agent's tools when Config.MemoryTool
// asks for it: the default agent's, and each agent's with a namespace of its own
// (NamedAgent.MemoryNamespace), which the tool of the registry calls for it
// (agentTool).
func (n *Node) addMemoryTool() error {
	if n.cfg.MemoryTool == nil {
		return nil
	}
	if n.memories == nil {
		return errors.New("node: MemoryTool needs Memory")
	}
	n.memTools = map[string]map[string]tools.Tool{}
	build := func(agent string, tc memory.ToolConfig) ([]tools.Tool, error) {
		box, err := n.memories.Toolbox(tc)
		if err != nil {
			return nil, err
		}
		ts, ops := []tools.Tool{box}, []string{""}
		if tc.Expand {
			ts, ops = box.Expand(), box.Ops()
		}
		n.memTools[agent] = map[string]tools.Tool{}
		for i, t := range ts {
			n.memTools[agent][t.Spec().Name] = t
			if n.memoryRouted() {
				// A namespace's calls run on its owner (memorytool.go).
				ts[i] = &routedMemoryTool{Tool: t, n: n, op: ops[i], namespace: tc.Namespace, agent: agent}
			}
		}
		return ts, nil
	}
	def, err := build("", *n.cfg.MemoryTool)
	if err != nil {
		return err
	}
	byAgent := map[string][]tools.Tool{}
	for agent, tc := range n.cfg.agentMemoryConfigs() {
		if byAgent[agent], err = build(agent, tc); err != nil {
			return fmt.Errorf("node: agent %q: %w", agent, err)
		}
	}
	n.cfg.Tools = append(slices.Clone(n.cfg.Tools), forAgents(def, byAgent)...)
	return nil
}

// agentMemoryConfigs returns the memory tool configuration of each agent with a
// namespace of its own (NamedAgent.MemoryNamespace), by name: Config.MemoryTool's,
// with that namespace as its default (and not among the others it may name).
func (c Config) agentMemoryConfigs() map[string]memory.ToolConfig {
	if c.MemoryTool == nil {
		return nil
	}
	out := map[string]memory.ToolConfig{}
	for _, na := range c.Agents {
		if na.MemoryNamespace == "" {
			continue
		}
		tc := *c.MemoryTool
		tc.Namespace = na.MemoryNamespace
		tc.Namespaces = slices.DeleteFunc(slices.Clone(tc.Namespaces), func(ns string) bool { return ns == na.MemoryNamespace })
		out[na.Name] = tc
	}
	return out
}

// memoryNamespace returns the namespace of the memory of agent (a task's agent: ""
// or "default" for the node's own): its own, or Config.MemoryTool's. The caller
// checked that MemoryTool is set.
func (c Config) memoryNamespace(agent string) string {
	for _, na := range c.Agents {
		if na.Name == agent && na.MemoryNamespace != "" {
			return na.MemoryNamespace
		}
	}
	return c.MemoryTool.Namespace
}
