package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/jsonesc"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/pipelines/rag"
	"github.com/troupe-run/troupe/vectorstore"
)

// Knowledge bases on a node. A knowledge base (package knowledge) is an
// event-sourced entity like a memory namespace: its stream kb/<name> is in the
// node's event log, its vectors in the node's vector store (the embedded index at
// KnowledgeVectorsPath, or Milvus), its BM25 index in memory, both rebuilt from the
// stream. On a sharded cluster its writes run on the owner of its stream's
// partition (knowledgeroute.go); its searches run on any node, which folds what
// the stream gained first.

// kbMaxBody bounds a POST /v1/kb/{name}/documents body: a document of
// knowledge.MaxDocumentBytes and the envelope around it (the multipart headers, or
// the JSON escaping of {"source","content"}, which can double the size of text
// full of quotes and newlines: such a text is at most half the limit).
const kbMaxBody = knowledge.MaxDocumentBytes + 64<<10

// kbMaxAskBody bounds a POST /v1/kb/{name}/ask body (its route's MaxBody).
const kbMaxAskBody = 64 << 10

// kbIngestTimeout is how long an upload's ingestion may take (conversion and
// embedding with a remote embedder) before its response is written: the write
// deadline of the HTTP server (HTTPConfig.WriteTimeout, 30 s by default) is
// extended to it once the body is read.
const kbIngestTimeout = 10 * time.Minute

// searchTimeout is how long a search of a knowledge base or of memories may take
// before its response is written: the query is embedded, by a remote embedder
// that may be slow or retried, after the request is read, so the server's write
// deadline (30 s by default) is extended to it as for an ingestion; past the
// deadline the results found would be dropped and the client left with a closed
// connection.
const searchTimeout = 10 * time.Minute

// Knowledge returns the node's knowledge bases, nil when Config.Knowledge is not set.
func (n *Node) Knowledge() *knowledge.Bases { return n.knowledge }

// KnowledgeVectorsPath is where a node keeps its knowledge bases' vectors in the
// embedded index: DATA/knowledge/vectors.log, or DATA/knowledge/NODE/vectors.log for
// a node of a cluster (as MemoryVectorsPath).
func KnowledgeVectorsPath(dataDir string, cluster bool, nodeID string) string {
	return vectorsPath(dataDir, "knowledge", cluster, nodeID)
}

// openKnowledge opens the knowledge bases of Config.Knowledge on the node's log,
// with its events stamped by the node's clock and, when Knowledge.Model is nil,
// the node's model for query rewriting, HyDE and answers (none when that is the
// offline rule-based model).
func (n *Node) openKnowledge(ctx context.Context) error {
	if n.cfg.Knowledge == nil {
		return nil
	}
	cfg := *n.cfg.Knowledge
	cfg.Log = n.routedLogOf(n.log)
	if cfg.KeepsRequest == nil && actors.MarksKBRequests(n.cfg.DecisionRules) {
		// A client's Idempotency-Key names one request (kbrequestkeys.go): one
		// that wrote nothing, its document stored already, is kept by a mark.
		// A node pinned to decision rules whose builds cannot fold one writes
		// none.
		cfg.KeepsRequest = func(key string) bool { return strings.HasPrefix(key, kbClientKeyPrefix) }
	}
	if cfg.Now == nil {
		cfg.Now = n.cfg.Clock.Now
	}
	if cfg.Model == nil && n.cfg.Model != nil {
		// The node's model behind its gateway: retries, fallbacks, quotas and
		// pricing apply to query rewriting, HyDE and answers as to a session's calls.
		cfg.Model = &gatewayModel{n: n, model: n.cfg.Model}
	}
	if cfg.Redact == nil {
		// No secrets in events: a document's text is redacted as session events are.
		cfg.Redact = n.redactor.String
	}
	if cfg.Vectors == nil {
		// A projection of the streams, rebuilt from them when a base is first used:
		// no fsync per write.
		v, err := vectorstore.OpenContext(ctx, vectorstore.Config{Path: KnowledgeVectorsPath(n.cfg.DataDir, n.cfg.Bus != nil, n.cfg.NodeID), NoSync: true, LockWait: n.cfg.LockWait, Logger: n.cfg.Logger,
			Index: vectorstore.IndexHNSW})
		if err != nil {
			return fmt.Errorf("knowledge: vectors: %w", err)
		}
		cfg.Vectors = v
		n.kbVectors = v
	}
	vs := n.vectorLogs(&vectorLog{kind: "knowledge", owner: "base", item: "chunk",
		failed:  "knowledge: the vector store failed; documents are stored in the log and searched in memory, their vectors follow once it takes them",
		back:    "knowledge: the vector store takes the knowledge base's vectors again",
		refused: "knowledge: the vector store refused a chunk's vector: it is left out of the store (searches score it in memory), and the base's other vectors are written"})
	cfg.VectorTrouble, cfg.VectorParked = vs.trouble(cfg.VectorTrouble), vs.parked(cfg.VectorParked)
	if cfg.CompactTrouble == nil {
		cfg.CompactTrouble = func(base string, err error) {
			n.cfg.Logger.Warn("knowledge: compacting a knowledge base's stream failed; the write is stored, a later one tries again",
				"base", base, "err", err)
		}
	}
	bs, err := knowledge.Open(cfg)
	if err != nil {
		return err
	}
	vs.waiting(bs.VectorBacklog)
	n.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "knowledge", Name: "bases_loaded",
		Help: "Knowledge bases held in memory, folded (one unused for knowledge.idle_timeout, or past knowledge.max_bases, is released and folded again on its next use)."},
		func() float64 { return float64(bs.LoadedBases()) }))
	n.knowledge = bs
	n.kbOpen = &kbOpener{bs: bs, log: n.log}
	return nil
}

// The knowledge base API, in the route table (apiRoutes) when the node has
// knowledge bases:
//
//	GET    /v1/kb                             the knowledge bases → {"bases": [Stats...]}
//	GET    /v1/kb/{name}/documents            its documents → {"name", "documents": [...]}
//	POST   /v1/kb/{name}/documents            ingest a document: multipart/form-data
//	                                          with one file part (its filename is the
//	                                          source, or a "source" field's value), or
//	                                          JSON {"source", "content"} (Markdown) →
//	                                          201 (added, replaced) or 200 (unchanged)
//	                                          with the AddResult
//	GET    /v1/kb/{name}/search               ?q=&limit=&mode=&multi_query=&hyde= →
//	                                          {"results": [{"chunk_id", "source",
//	                                          "heading_path", "content", "score"}]}
//	POST   /v1/kb/{name}/ask                  {"question", "limit", "mode"} → the Answer
//	DELETE /v1/kb/{name}/documents/{source...}  remove a document → {"removed": source}
//	DELETE /v1/kb/{name}/documents?source=S     the same, for any source name
//
// A source in the path is the rest of the path after /documents/, percent-encoded
// as a URL path (a '/' may be sent as it is or as %2F; '%', '?', '#' and spaces must
// be escaped). A source with "." or ".." segments or an empty one ("a//b") cannot
// travel in a path (HTTP clients and the server's path cleaning rewrite it): use the
// source query parameter, which takes any name.

// KBSearchHit is one result of a knowledge base search, as GET
// /v1/kb/{name}/search and node rag search --json give it.
type KBSearchHit struct {
	ChunkID string `json:"chunk_id"`
	// Source is the document's name: the file's path as given to node rag add, the
	// upload's filename, or the source of a JSON document.
	Source string `json:"source"`
	// HeadingPath is the chunk's headings, "Install > Linux" ("" above the first).
	HeadingPath string  `json:"heading_path"`
	Content     string  `json:"content"`
	Score       float64 `json:"score"`
}

// KBSearchAnswer is the body of GET /v1/kb/{name}/search.
type KBSearchAnswer struct {
	Results []KBSearchHit `json:"results"`
	// Notes say what the search could not do as asked (the vector store lagged and
	// the base's vectors were searched in memory, an expansion failed); none: left
	// out.
	Notes []string `json:"notes,omitempty"`
}

// KBSearchHits turns a search's hits into the wire shape.
func KBSearchHits(hits []knowledge.Hit) KBSearchAnswer {
	out := KBSearchAnswer{Results: make([]KBSearchHit, len(hits))}
	for i, h := range hits {
		out.Results[i] = KBSearchHit{ChunkID: h.ChunkID, Source: h.Source, HeadingPath: h.HeadingPath, Content: h.Content, Score: h.Score}
	}
	return out
}

// ParseKBQuery reads the query of GET /v1/kb/{name}/search (and node rag search): q
// is required (at most knowledge.MaxQueryBytes); limit 1 to knowledge.MaxLimit
// (default knowledge.DefaultLimit); mode hybrid (default), vector or bm25;
// multi_query 0 to knowledge.MaxMultiQuery rewrites of the query by the model;
// hyde true or false; fusion convex (default), rrf or wrrf; alpha, convex fusion's
// vector share, in (0, 1]. Errors wrap knowledge.ErrInvalid.
func ParseKBQuery(get func(string) string) (knowledge.Query, error) {
	q := knowledge.Query{Text: get("q"), Limit: knowledge.DefaultLimit}
	if strings.TrimSpace(q.Text) == "" {
		return q, fmt.Errorf("%w: q is empty: say what to search for", knowledge.ErrInvalid)
	}
	if len(q.Text) > knowledge.MaxQueryBytes {
		return q, fmt.Errorf("%w: q is %d bytes, longer than %d", knowledge.ErrInvalid, len(q.Text), knowledge.MaxQueryBytes)
	}
	if s := get("limit"); s != "" {
		l, err := strconv.Atoi(s)
		if err != nil || l < 1 || l > knowledge.MaxLimit {
			return q, fmt.Errorf("%w: limit %q: want 1 to %d", knowledge.ErrInvalid, s, knowledge.MaxLimit)
		}
		q.Limit = l
	}
	m, err := knowledge.ParseMode(get("mode"))
	if err != nil {
		return q, err
	}
	q.Mode = m
	if s := get("multi_query"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 || v > knowledge.MaxMultiQuery {
			return q, fmt.Errorf("%w: multi_query %q: want 0 to %d rewrites", knowledge.ErrInvalid, s, knowledge.MaxMultiQuery)
		}
		q.MultiQuery = v
	}
	if s := get("hyde"); s != "" {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return q, fmt.Errorf("%w: hyde %q: want true or false", knowledge.ErrInvalid, s)
		}
		q.HyDE = v
	}
	f, err := knowledge.ParseFusion(get("fusion"))
	if err != nil {
		return q, err
	}
	q.Fusion = f
	if s := get("alpha"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v > 0 && v <= 1) {
			return q, fmt.Errorf("%w: alpha %q: want the vector share of convex fusion, above 0 and at most 1", knowledge.ErrInvalid, s)
		}
		q.Alpha = v
	}
	return q, nil
}

// existingBase returns knowledge base name when its stream has events; a name
// that never had a document is errNoBase (a base is created by its first
// document). It opens the base, which stays loaded in bs until it is idle
// (knowledge.Config.IdleTimeout): kbOpener asks the log first, so that names that
// do not exist load nothing.
func existingBase(ctx context.Context, bs *knowledge.Bases, name string) (*knowledge.Base, error) {
	b, err := bs.Base(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := b.Refresh(ctx); err != nil {
		return nil, err
	}
	if b.Stats().Seq == 0 {
		return nil, fmt.Errorf("%w %q (add a document to create it)", errNoBase, name)
	}
	return b, nil
}

// kbOpener opens the knowledge bases that exist for the reads of the API and of
// the rag tool. Bases loads every base it is asked for, so a base that is not
// loaded is looked for in the log first, and a name without events is refused
// without being loaded: requests for made-up names do not make the node grow. A
// base that is loaded (Bases.Loaded) is not looked for again: the opener keeps no
// name of its own, so what it knows is bounded by the bases Bases holds
// (knowledge.Config.MaxBases), and a base released since its last use is looked
// for again, once, before it is folded again.
type kbOpener struct {
	bs  *knowledge.Bases
	log eventlog.Log
}

// existing returns knowledge base name if its stream has events, else errNoBase.
func (o *kbOpener) existing(ctx context.Context, name string) (*knowledge.Base, error) {
	if err := knowledge.CheckName(name); err != nil {
		return nil, err
	}
	if !o.bs.Loaded(name) {
		events, err := o.log.Read(ctx, knowledge.Stream(name), 1)
		if err != nil {
			return nil, fmt.Errorf("knowledge: reading %s: %w", knowledge.Stream(name), err)
		}
		if len(events) == 0 {
			return nil, fmt.Errorf("%w %q (add a document to create it)", errNoBase, name)
		}
	}
	return existingBase(ctx, o.bs, name)
}

// errNoBase is the error of an operation on a knowledge base that has no events.
var errNoBase = errors.New("knowledge: no knowledge base")

// IsUnknownBase reports whether err is about a knowledge base that does not exist
// (it never had a document).
func IsUnknownBase(err error) bool { return errors.Is(err, errNoBase) }

// kbStatus is the HTTP status of a knowledge base error.
func kbStatus(err error) int {
	switch {
	case errors.Is(err, errNoBase), errors.Is(err, knowledge.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, knowledge.ErrKeyReused):
		return http.StatusUnprocessableEntity
	case errors.Is(err, knowledge.ErrDimension):
		return http.StatusConflict
	case errors.Is(err, knowledge.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, knowledge.ErrInvalid), errors.Is(err, knowledge.ErrEmpty),
		errors.Is(err, rag.ErrUnsupported), errors.Is(err, rag.ErrMalformed):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

func (n *Node) listKnowledgeBases(w http.ResponseWriter, r *http.Request) {
	names, err := n.knowledge.List(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	out := struct {
		Bases []knowledge.Stats `json:"bases"`
	}{Bases: []knowledge.Stats{}}
	for _, name := range names {
		b, err := n.knowledge.Base(r.Context(), name)
		if err == nil {
			err = b.Refresh(r.Context())
		}
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "knowledge base %s: %v", name, err)
			return
		}
		out.Bases = append(out.Bases, b.Stats())
	}
	kbJSON(w, http.StatusOK, out)
}

func (n *Node) listKBDocuments(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := knowledge.CheckName(name); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	b, err := n.kbOpen.existing(r.Context(), name)
	if err != nil {
		writeError(w, kbStatus(err), "%v", err)
		return
	}
	docs := b.Documents()
	if docs == nil {
		docs = []knowledge.Document{}
	}
	kbJSON(w, http.StatusOK, map[string]any{"name": name, "documents": docs})
}

// postKBDocument ingests one document. The body is read whole (at most kbMaxBody)
// before anything is written, so a refused or cut body writes nothing. The
// Idempotency-Key header, when given, makes a retried upload write once, even when
// the retries race each other; it names one request (kbrequestkeys.go).
func (n *Node) postKBDocument(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := knowledge.CheckName(name); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if r.ContentLength > kbMaxBody {
		writeError(w, http.StatusRequestEntityTooLarge, "request body of %d bytes is larger than %d: a document is at most %d bytes (32 MiB)", r.ContentLength, kbMaxBody, knowledge.MaxDocumentBytes)
		return
	}
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		writeError(w, http.StatusUnsupportedMediaType, "Content-Type must be multipart/form-data (a file) or application/json ({\"source\", \"content\"}), not %q", ct)
		return
	}
	body := http.MaxBytesReader(w, r.Body, kbMaxBody)
	var doc kbAddArgs // from JSON: Text, the content is Markdown, not a file to convert
	switch mt {
	case "application/json":
		if err := checkJSONContentType(ct); err != nil {
			writeError(w, http.StatusUnsupportedMediaType, "%v", err)
			return
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			bodyError(w, err)
			return
		}
		raw = messages.TrimByteOrderMark(raw)
		if !utf8.Valid(raw) {
			writeError(w, http.StatusBadRequest, "%s; nothing was written", errJSONNotUTF8(raw))
			return
		}
		if at := jsonesc.LoneSurrogateAt(raw); at >= 0 && json.Valid(raw) { // malformed JSON: the decoder says so
			writeError(w, http.StatusBadRequest, "the JSON holds %s at byte %d, half of a UTF-16 surrogate pair, not a character: send whole characters (a text cut in the middle of one?); nothing was written", raw[at:at+6], at)
			return
		}
		var in struct {
			Source  *string `json:"source"`
			Content *string `json:"content"`
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			writeError(w, http.StatusBadRequest, "malformed JSON: %v: want {\"source\": NAME, \"content\": MARKDOWN}", err)
			return
		}
		if dec.More() {
			writeError(w, http.StatusBadRequest, "malformed JSON: more after the object")
			return
		}
		// encoding/json takes the last of a key given twice, matched without
		// regard to case: {"content": A, "Content": B} would store B.
		if err := checkKeys(raw, []string{"source", "content"}, false); err != nil {
			writeError(w, http.StatusBadRequest, "%v; want {\"source\": NAME, \"content\": MARKDOWN}; nothing was written", err)
			return
		}
		if in.Source == nil || in.Content == nil {
			writeError(w, http.StatusBadRequest, "want {\"source\": NAME, \"content\": MARKDOWN}: source and content are both required")
			return
		}
		doc = kbAddArgs{Source: *in.Source, Body: []byte(*in.Content), Text: true}
	case "multipart/form-data":
		doc, err = readUpload(body, params["boundary"])
		if err != nil {
			var tooLarge *http.MaxBytesError
			var netErr net.Error
			if errors.As(err, &tooLarge) || errors.As(err, &netErr) {
				bodyError(w, err)
			} else {
				writeError(w, http.StatusBadRequest, "%v", err)
			}
			return
		}
	default:
		writeError(w, http.StatusUnsupportedMediaType, "Content-Type must be multipart/form-data (a file) or application/json ({\"source\", \"content\"}), not %q", ct)
		return
	}
	if err := knowledge.CheckSource(doc.Source); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	// A client's key names one request (kbrequestkeys.go).
	release, ok := n.claimKBKey(w, key, kbAddDigest(name, doc))
	if !ok {
		return
	}
	if key != "" {
		key = kbClientKeyPrefix + key
	}
	// The body is read: the ingestion (conversion, embedding) may outlast the
	// server's write timeout.
	w = n.awaitAnswer(w, kbIngestTimeout)
	res, err := n.kbAdd(r.Context(), name, doc, key) // here, or on the base's owner
	switch code := kbStatus(err); {
	case errors.Is(err, knowledge.ErrKeyReused):
		release()
		writeError(w, code, "Idempotency-Key reused with a different request: %v: the Idempotency-Key %q was sent with another document before; use a new key for a new request", err, r.Header.Get("Idempotency-Key"))
	case err != nil && code == http.StatusServiceUnavailable:
		writeError(w, code, "the document was not ingested: %v (send it again, with the same Idempotency-Key: it is not written twice)", err)
	case err != nil:
		release() // refused: nothing was written
		writeError(w, code, "%v", err)
	case res.Skipped():
		kbJSON(w, http.StatusOK, res)
	default:
		kbJSON(w, http.StatusCreated, res)
	}
}

// errJSONNotUTF8 says where a JSON body that is not UTF-8 goes wrong. JSON is
// UTF-8; decoding would turn each bad byte into U+FFFD silently, storing a text
// (or naming a source) other than the one sent, where the same bytes uploaded as a
// file are refused.
func errJSONNotUTF8(raw []byte) string {
	at := 0
	for at < len(raw) {
		r, n := utf8.DecodeRune(raw[at:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		at += n
	}
	return fmt.Sprintf("the JSON body is not valid UTF-8 (byte %d, 0x%02x): send text as UTF-8, or a file as multipart/form-data", at, raw[at])
}

// kbJSON writes v as JSON without HTML escapes, so that citation labels and
// heading paths read "# Install > ## Linux", not "# Install \u003e ## Linux".
func kbJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// bodyError answers a request whose body could not be read.
func bodyError(w http.ResponseWriter, err error) {
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooLarge) && tooLarge.Limit == kbMaxAskBody:
		writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes (64 KiB): ask a shorter question", kbMaxAskBody)
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes: a document is at most %d bytes (32 MiB); nothing was written", kbMaxBody, knowledge.MaxDocumentBytes)
	case errors.As(err, &netErr) && netErr.Timeout():
		writeError(w, http.StatusRequestTimeout, "the request body was not sent in time; nothing was written")
	default:
		writeError(w, http.StatusBadRequest, "reading the request body: %v", err)
	}
}

// formFilename undoes the escapes of a multipart filename that the HTML
// standard's multipart/form-data encoding makes, as browsers, curl and Python's
// urllib3 send it: a quote is %22, a carriage return %0D and a line feed %0A
// (a name with a line break is then refused, as a source must be). A filename
// escaped as RFC 2183 has it (\", Go's mime/multipart) is unescaped by
// mime.ParseMediaType.
var formFilename = strings.NewReplacer("%22", `"`, "%0D", "\r", "%0A", "\n")

// readUpload reads a multipart body: one file part, whose filename (as sent, with
// its folders: it names the document, it is never a path on this host) is the
// source unless a "source" field names it (curl sends only the file's base name:
// -F source=docs/guide.md keeps the folder). Other fields are refused. A source
// field does not change how the file is read: the filename's extension says that
// (kbAddArgs.File), so -F file=@guide.md -F source=docs/guide is Markdown still.
func readUpload(body io.Reader, boundary string) (kbAddArgs, error) {
	if boundary == "" {
		return kbAddArgs{}, errors.New("multipart/form-data without a boundary")
	}
	mr := multipart.NewReader(body, boundary)
	var named, file string
	var doc []byte
	found := false
	for {
		p, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return kbAddArgs{}, fmt.Errorf("malformed multipart body: %w", err)
		}
		_, dp, derr := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		if derr != nil {
			return kbAddArgs{}, fmt.Errorf("a multipart part without a readable Content-Disposition: %v", derr)
		}
		field := dp["name"]
		filename, hasFile := dp["filename"]
		switch {
		case hasFile:
			if found {
				return kbAddArgs{}, errors.New("more than one file in the upload: send one document per request")
			}
			found = true
			var err error
			if doc, err = io.ReadAll(p); err != nil {
				return kbAddArgs{}, err
			}
			file = formFilename.Replace(filename)
		case field == "source":
			if named != "" {
				return kbAddArgs{}, errors.New("the source field is given twice: name the document once")
			}
			v, err := io.ReadAll(io.LimitReader(p, knowledge.MaxSourceLen+1))
			if err != nil {
				return kbAddArgs{}, err
			}
			if named = string(v); named == "" {
				return kbAddArgs{}, errors.New("the source field is empty")
			}
		default:
			return kbAddArgs{}, fmt.Errorf("unknown multipart field %q: want one file part (and optionally a source field before it)", field)
		}
	}
	if !found {
		return kbAddArgs{}, errors.New("no file in the upload: send a file part, such as curl -F file=@guide.md")
	}
	if named == "" || named == file {
		return kbAddArgs{Source: file, Body: doc}, nil
	}
	return kbAddArgs{Source: named, Body: doc, File: file}, nil
}

func (n *Node) searchKB(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := knowledge.CheckName(name); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	q, err := ParseKBQuery(r.URL.Query().Get)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	b, err := n.kbOpen.existing(r.Context(), name)
	if err != nil {
		writeError(w, kbStatus(err), "%v", err)
		return
	}
	w = n.awaitAnswer(w, searchTimeout)
	res, err := b.Search(r.Context(), q)
	if err != nil {
		writeError(w, kbStatus(err), "search failed: %v", err)
		return
	}
	out := KBSearchHits(res.Hits)
	out.Notes = res.Notes
	kbJSON(w, http.StatusOK, out)
}

// KBAskRequest is the body of POST /v1/kb/{name}/ask.
type KBAskRequest struct {
	Question   string         `json:"question"`
	Limit      int            `json:"limit,omitempty"`
	Mode       knowledge.Mode `json:"mode,omitempty"`
	MultiQuery int            `json:"multi_query,omitempty"`
	HyDE       bool           `json:"hyde,omitempty"`
	// Fusion and Alpha: how hybrid lists are fused (knowledge.Query).
	Fusion     knowledge.Fusion `json:"fusion,omitempty"`
	Alpha      float64          `json:"alpha,omitempty"`
	Extractive bool             `json:"extractive,omitempty"`
}

// askFields are the JSON names of KBAskRequest's fields.
var askFields = []string{"question", "limit", "mode", "multi_query", "hyde", "fusion", "alpha", "extractive"}

func (n *Node) askKB(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := knowledge.CheckName(name); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if err := checkJSONContentType(r.Header.Get("Content-Type")); err != nil {
		writeError(w, http.StatusUnsupportedMediaType, "%v", err)
		return
	}
	if r.ContentLength > kbMaxAskBody {
		// Refused before the body is read, as a document over its bound is.
		bodyError(w, &http.MaxBytesError{Limit: kbMaxAskBody})
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, kbMaxAskBody))
	if err != nil {
		bodyError(w, err)
		return
	}
	raw = messages.TrimByteOrderMark(raw)
	if !utf8.Valid(raw) {
		writeError(w, http.StatusBadRequest, "%s", errJSONNotUTF8(raw))
		return
	}
	var in KBAskRequest
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "malformed JSON: %v: want {\"question\": TEXT}", err)
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "malformed JSON: more after the object: want one {\"question\": TEXT}")
		return
	}
	if err := checkKeys(raw, askFields, false); err != nil {
		writeError(w, http.StatusBadRequest, "%v; want {\"question\": TEXT}", err)
		return
	}
	if strings.TrimSpace(in.Question) == "" {
		writeError(w, http.StatusBadRequest, "question is empty: say what to answer")
		return
	}
	if _, err := knowledge.ParseMode(string(in.Mode)); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if _, err := knowledge.ParseFusion(string(in.Fusion)); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if !(in.Alpha >= 0 && in.Alpha <= 1) {
		writeError(w, http.StatusBadRequest, "alpha %v: want the vector share of convex fusion, above 0 and at most 1 (0 or absent: the default)", in.Alpha)
		return
	}
	b, err := n.kbOpen.existing(r.Context(), name)
	if err != nil {
		writeError(w, kbStatus(err), "%v", err)
		return
	}
	w = n.awaitAnswer(w, searchTimeout)
	ans, err := b.Ask(r.Context(), in.Question, knowledge.AskOptions{Limit: in.Limit, Mode: in.Mode, MultiQuery: in.MultiQuery, HyDE: in.HyDE,
		Fusion: in.Fusion, Alpha: in.Alpha, Extractive: in.Extractive})
	if err != nil {
		writeError(w, kbStatus(err), "ask failed: %v", err)
		return
	}
	kbJSON(w, http.StatusOK, ans)
}

func (n *Node) deleteKBDocument(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := knowledge.CheckName(name); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	source := r.PathValue("source")
	if q, ok := r.URL.Query()["source"]; ok {
		if source != "" {
			writeError(w, http.StatusBadRequest, "the source is named twice: in the path and in ?source=; use one")
			return
		}
		if len(q) != 1 {
			writeError(w, http.StatusBadRequest, "?source= is given %d times: name one document", len(q))
			return
		}
		source = q[0]
	}
	if source == "" {
		writeError(w, http.StatusBadRequest, "no source: DELETE /v1/kb/%s/documents/SOURCE (percent-encoded) or /v1/kb/%s/documents?source=SOURCE", name, name)
		return
	}
	if len(source) > knowledge.MaxSourceLen {
		writeError(w, http.StatusBadRequest, "%v", knowledge.CheckSource(source))
		return
	}
	// The rest of CheckSource is the knowledge base's to apply: a document it
	// holds is removed whatever its name (one named before the rules tightened).
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	release, ok := n.claimKBKey(w, key, kbRemoveDigest(name, source))
	if !ok {
		return
	}
	if key != "" {
		key = kbClientKeyPrefix + key
	}
	if _, err := n.kbOpen.existing(r.Context(), name); err != nil {
		release()
		writeError(w, kbStatus(err), "%v", err)
		return
	}
	err = n.kbRemove(r.Context(), name, source, key)
	switch code := kbStatus(err); {
	case errors.Is(err, knowledge.ErrKeyReused):
		release()
		writeError(w, code, "Idempotency-Key reused with a different request: %v: the Idempotency-Key %q was sent with another request before; use a new key for a new request", err, r.Header.Get("Idempotency-Key"))
		return
	case err != nil && code == http.StatusServiceUnavailable:
		writeError(w, code, "%v", err)
		return
	case err != nil:
		release() // refused: nothing was written
		writeError(w, code, "%v", err)
		return
	}
	kbJSON(w, http.StatusOK, map[string]string{"removed": source})
}

// claimKBKey records that the client's Idempotency-Key key (none: "") came with
// the request of digest (kbrequestkeys.go). When the key came with another
// request it answers 422 and returns false. release forgets a claim this request
// made, for a request refused with nothing written: the key may come again with
// another.
func (n *Node) claimKBKey(w http.ResponseWriter, key, digest string) (release func(), ok bool) {
	release = func() {}
	if key == "" {
		return release, true
	}
	ok, fresh := n.kbKeys.claim(key, digest, time.Now())
	if !ok {
		writeError(w, http.StatusUnprocessableEntity, "Idempotency-Key reused with a different request: the Idempotency-Key %q was sent with another request before (another knowledge base, document or body); use a new key for a new request; nothing was written", key)
		return release, false
	}
	if fresh {
		release = func() { n.kbKeys.release(key, digest) }
	}
	return release, true
}

// gatewayModel is the node's model as the knowledge bases call it: through the
// node's gateway once the node has built it, the model itself before that.
type gatewayModel struct {
	n     *Node
	model llm.Model
}

// Name is the node's model's: the knowledge bases treat the offline model as none.
func (g *gatewayModel) Name() string { return g.model.Name() }

// Generate asks the node's gateway, or its model when the node has no gateway yet.
func (g *gatewayModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if gw := g.n.gw; gw != nil {
		return gw.Generate(ctx, req)
	}
	return g.model.Generate(ctx, req)
}
