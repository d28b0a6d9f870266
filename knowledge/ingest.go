package knowledge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/pipelines/rag"
	"golang.org/x/text/unicode/norm"
)

// The statuses of AddResult.
const (
	// StatusAdded: the source was new; its chunks were added.
	StatusAdded = "added"
	// StatusReplaced: the source changed; its new chunks replaced the old ones in
	// one event.
	StatusReplaced = "replaced"
	// StatusUnchanged: the source's hash is the stored one; nothing was written and
	// nothing embedded.
	StatusUnchanged = "unchanged"
)

// AddResult is what an ingestion did with one document.
type AddResult struct {
	Source string `json:"source"`
	// Status is StatusAdded, StatusReplaced or StatusUnchanged.
	Status string `json:"status"`
	// Hash is rag.DocumentHash of the document's bytes.
	Hash string `json:"hash"`
	// Chunks and Tokens count the document's chunks and their tokens (those stored
	// before when unchanged).
	Chunks int `json:"chunks"`
	Tokens int `json:"tokens"`
	// Bytes is the document's size, MarkdownBytes that of its Markdown.
	Bytes         int `json:"bytes"`
	MarkdownBytes int `json:"markdown_bytes"`
}

// Skipped reports whether nothing was written because the document was unchanged.
func (r AddResult) Skipped() bool { return r.Status == StatusUnchanged }

// CheckSource accepts a document's source name: 1 to MaxSourceLen bytes of valid
// UTF-8 without control characters (a newline in a name would break the citations
// "[source > heading]" and the lines of a listing) nor bidirectional controls (an
// override makes "\u202egnp.exe" read "exe.png" in a citation), not only spaces.
func CheckSource(source string) error {
	switch {
	case strings.TrimSpace(source) == "":
		return fmt.Errorf("%w: empty source name", ErrInvalid)
	case len(source) > MaxSourceLen:
		return fmt.Errorf("%w: source name of %d bytes: at most %d", ErrInvalid, len(source), MaxSourceLen)
	case !utf8.ValidString(source):
		return fmt.Errorf("%w: source name %q is not valid UTF-8", ErrInvalid, source)
	}
	for _, r := range source {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return fmt.Errorf("%w: source name %q holds a control character (%U): rename the file", ErrInvalid, source, r)
		}
	}
	return nil
}

// Add ingests a document: body is converted to Markdown by rag.Convert according
// to the source's extension (or its content), split into paragraphs under their
// headings, packed into chunks (Config.Chunk), embedded in batches of
// Config.EmbedBatch and appended in one kb.document_ingested event (or, over
// Config.MaxEventBytes, in its parts, appended together) that replaces every
// chunk an earlier version of the source had. A document whose hash is the
// stored one, read the same way (rag.Format: the bytes of guide.txt sent again as
// guide.md are converted anew) by the current conversion (rag.ConversionVersion)
// and embedded by the same embedder (Config.EmbedderName), and stored whole (all
// the parts of a split one folded), is not converted, embedded nor written:
// StatusUnchanged.
// (Chunk options are not part of that test: to cut a document anew, Remove it
// first.) A key applied
// before returns the earlier result and writes nothing (another document under the
// same key: ErrKeyReused), unless its document was split across events of which
// only some were stored: then it is written again, whole, and the earlier
// request's result returned.
//
// The document is named source in Unicode NFC, or the name a document stored
// before under another spelling of it has (storedName).
//
// A document over MaxDocumentBytes, or with a chunk over Config.MaxEventBytes in
// an event, fails with ErrTooLarge, one Convert cannot read
// with its error (rag.ErrUnsupported, rag.ErrMalformed), one without text with
// ErrEmpty, and a failing embedder with ErrEmbedder; nothing is written then.
func (b *Base) Add(ctx context.Context, source string, body []byte, key string) (AddResult, error) {
	return b.ingest(ctx, source, body, key, rag.Format(source, source, body), func() (string, error) { return rag.Convert(source, body) })
}

// AddFile is Add of a file stored under another name than its own: body is the
// content of the file named file (an upload's filename), stored as the document
// source. How it is read comes from file's extension (rag.ConvertFile), so that a
// guide.md stored as "docs/guide" is read as Markdown and a page.html stored as
// "docs/page.md" as HTML. An empty file is source.
func (b *Base) AddFile(ctx context.Context, source, file string, body []byte, key string) (AddResult, error) {
	if file == "" {
		file = source
	}
	return b.ingest(ctx, source, body, key, rag.Format(source, file, body), func() (string, error) { return rag.ConvertFile(source, file, body) })
}

// AddText ingests a text given as Markdown (plain text is Markdown too) under the
// name source, for callers that send {source, content} rather than a file: the
// content is not converted, whatever the source's extension; text that is not
// UTF-8 (rag.ErrMalformed) or holds a NUL byte (rag.ErrUnsupported) is refused, as a
// file's would be. Otherwise it is Add.
func (b *Base) AddText(ctx context.Context, source, markdown, key string) (AddResult, error) {
	body := []byte(markdown)
	return b.ingest(ctx, source, body, key, formatText, func() (string, error) {
		if !utf8.Valid(body) {
			return "", fmt.Errorf("%q: the content is not valid UTF-8: %w", source, rag.ErrMalformed)
		}
		// As a file's text (rag.Convert): a NUL is binary content, and the words
		// around it would be indexed as letters no query finds.
		if i := strings.IndexByte(markdown, 0); i >= 0 {
			return "", fmt.Errorf("%q: the content holds a NUL byte (at byte %d): send text: %w", source, i, rag.ErrUnsupported)
		}
		return strings.ReplaceAll(strings.ReplaceAll(markdown, "\r\n", "\n"), "\r", "\n"), nil
	})
}

// formatText is the format of a text sent as Markdown (AddText): it is not
// converted, where a file named .md is (its front matter dropped).
const formatText = "text/markdown"

// ingest ingests body under source, read as format says (rag.Format, or
// formatText) by convert.
func (b *Base) ingest(ctx context.Context, source string, body []byte, key, format string, convert func() (string, error)) (AddResult, error) {
	if err := CheckSource(source); err != nil {
		return AddResult{}, err
	}
	if len(body) > MaxDocumentBytes {
		return AddResult{}, fmt.Errorf("%w: %q: %d bytes, over the limit of %d (%w)", ErrTooLarge, source, len(body), MaxDocumentBytes, rag.ErrTooLarge)
	}
	defer b.bs.hold(b)() // the conversion and the embedding run without its lock
	// After the unlock (searches and writes go on meanwhile), and after the
	// vectors' sync: also when the fold decided the write, which may have
	// written a key's mark (markKey) and nothing else.
	defer b.compactIfDue(ctx)
	hash := rag.DocumentHash(body)
	// What the stream says already: an applied key or an unchanged document needs
	// no conversion and no embedding.
	b.mu.Lock()
	source, res, done, err := b.decided(ctx, source, hash, format, key)
	b.mu.Unlock()
	if err != nil || done {
		return res, err
	}
	md, err := convert()
	switch {
	case errors.Is(err, rag.ErrTooLarge):
		// A bound of the conversion (HTML nested too deep, a zip that expands too
		// far, a table of too many cells) is this package's too: callers answer
		// ErrTooLarge as the request's fault, not as a failure to try again.
		return AddResult{}, fmt.Errorf("%w: %w", ErrTooLarge, err)
	case err != nil:
		return AddResult{}, fmt.Errorf("knowledge: %w", err)
	}
	if b.cfg.Redact != nil {
		md = b.cfg.Redact(md)
	}
	// Packing stops past the limit: a document far over it costs no more than
	// one just over it.
	opts := b.cfg.Chunk
	opts.MaxChunks = b.cfg.MaxChunks
	paras := rag.Split(md)
	chunks := rag.Pack(paras, opts)
	if len(chunks) > b.cfg.MaxChunks && !opts.SpanHeadings {
		// Sections too many to make a chunk each (a changelog, a glossary):
		// chunks span them, cited by the headings they share.
		opts.SpanHeadings = true
		chunks = rag.Pack(paras, opts)
	}
	if len(chunks) == 0 {
		return AddResult{}, fmt.Errorf("%w: %q (%d bytes) gives no text to index", ErrEmpty, source, len(body))
	}
	if len(chunks) > b.cfg.MaxChunks {
		return AddResult{}, fmt.Errorf("%w: %q cuts into more than %d chunks, over the limit of %d: split the document", ErrTooLarge, source, b.cfg.MaxChunks, b.cfg.MaxChunks)
	}
	texts := make([]string, len(chunks))
	for i, c := range chunks {
		texts[i] = c.Text
	}
	vectors, err := b.embedPassages(ctx, texts)
	if err != nil {
		return AddResult{}, fmt.Errorf("knowledge: %q: %w", source, err)
	}
	ev := &messages.KBDocumentIngested{Key: key, Source: source, Hash: hash, Bytes: len(body), MarkdownBytes: len(md),
		Embedder: b.cfg.EmbedderName, Format: format, Conversion: rag.ConversionVersion, Chunks: make([]messages.KBChunk, len(chunks))}
	tokens, newDim := 0, 0
	for i, c := range chunks {
		ev.Chunks[i] = messages.KBChunk{ChunkID: chunkID(source, hash, i), Index: i, HeadingPath: c.HeadingPath, Start: c.Start, End: c.End,
			Tokens: c.Tokens, Hash: c.Hash, Text: c.Text, Vector: messages.Vector(vectors[i])}
		tokens += c.Tokens
		newDim = max(newDim, len(vectors[i]))
	}
	// The chunk set in events of at most MaxEventBytes, found before the lock.
	cuts, err := eventCuts(ev, b.cfg.MaxEventBytes)
	if err != nil {
		return AddResult{}, err
	}
	res = AddResult{Source: source, Status: StatusAdded, Hash: hash, Chunks: len(chunks), Tokens: tokens, Bytes: len(body), MarkdownBytes: len(md)}
	defer b.sync(ctx) // after the unlock, before the compaction
	b.mu.Lock()
	defer b.mu.Unlock()
	var decidedRes AddResult
	var unchanged bool
	applied, err := b.write(ctx, key, func() ([]messages.Payload, error) {
		if s := b.storedName(source); s != source {
			// Another spelling of the name was stored meanwhile: write to it.
			source, ev.Source, res.Source = s, s, s
			for i := range ev.Chunks {
				ev.Chunks[i].ChunkID = chunkID(source, hash, i)
			}
		}
		var again *AddResult // the key's write, stored in some of its parts (keyDone)
		if _, ok := b.st.keys[key]; key != "" && ok {
			r, err := b.keyResult(key, source, hash, format)
			if err != nil {
				return nil, err
			}
			again = &r
		}
		if d := b.st.docs[source]; b.unchanged(d, hash, format) {
			decidedRes, unchanged = unchangedResult(d), true
			if again == nil && b.keepsRequest(key) {
				return []messages.Payload{keyMark(d, key)}, nil // stored meanwhile by another writer (markKey)
			}
			return nil, nil
		}
		if dim, emb := b.st.dim(source); dim != 0 && newDim != 0 && dim != newDim {
			return nil, fmt.Errorf("%w: knowledge base %s holds vectors of dimension %d (embedder %s); %s gives %d: add the documents to another knowledge base, or remove every document of this one and add them again",
				ErrDimension, b.name, dim, emb, b.cfg.EmbedderName, newDim)
		}
		ev.Reason = "new document"
		res.Status = StatusAdded
		same := func(d *document) bool { return d.hash == hash && d.embedder == b.cfg.EmbedderName }
		switch d := b.st.docs[source]; {
		case d == nil:
		case same(d) && (d.format == "" || d.format == format) && d.conversion < rag.ConversionVersion:
			// A document whose event recorded no format is of conversion 0
			// (conversionOf): read by the code before version 1.
			ev.Reason, res.Status = fmt.Sprintf("read again by the current conversion (version %d; stored by version %d): replaces its chunks",
				rag.ConversionVersion, d.conversion), StatusReplaced
		case same(d) && d.format == format && !d.whole():
			ev.Reason, res.Status = fmt.Sprintf("stored in %d of its %d parts: replaces its chunks", len(d.seqs), d.parts), StatusReplaced
		default:
			ev.Reason, res.Status = "changed document: replaces its chunks", StatusReplaced
		}
		if again != nil {
			res.Status = again.Status // the answer of the request, made whole
		}
		ev.Status = res.Status
		return splitEvent(ev, cuts), nil
	})
	switch {
	case err != nil:
		return AddResult{}, err
	case applied:
		return b.keyResult(key, source, hash, format)
	case unchanged:
		return decidedRes, nil
	}
	return res, nil
}

// eventCuts returns where ev's chunks are cut into the events of a write, each
// of at most max bytes of JSON payload: the index of the first chunk of each
// event after the first; none when ev fits in one event. A document with a
// chunk that does not fit in an event alone fails with ErrTooLarge, naming it,
// the chunk and the bound.
func eventCuts(ev *messages.KBDocumentIngested, max int) ([]int, error) {
	// The fields besides the chunks, with room for a longer Reason, Part,
	// Parts and Status and another spelling of Source (storedName).
	head := *ev
	head.Chunks, head.Part, head.Parts, head.Status = nil, 1<<20, 1<<20, StatusReplaced
	hb, err := json.Marshal(&head)
	if err != nil {
		return nil, fmt.Errorf("knowledge: %q: encoding its event: %w", ev.Source, err)
	}
	headBytes := len(hb) + 256 + 2*len(ev.Source)
	// A bound over the chunks' JSON first: nearly every document is far under
	// max, and is not encoded twice. A byte takes at most 6 in a JSON string
	// ("\u003c"), a vector 4/3 of its 4 bytes a component (base64).
	bound := headBytes
	for _, c := range ev.Chunks {
		bound += chunkBytesBound(c)
		if bound > max {
			break
		}
	}
	if bound <= max {
		return nil, nil
	}
	var cuts []int
	size := headBytes
	for i, c := range ev.Chunks {
		cb, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("knowledge: %q: encoding chunk %d: %w", ev.Source, i+1, err)
		}
		n := len(cb) + 1 // and its comma
		if headBytes+n > max {
			return nil, fmt.Errorf("%w: %q: chunk %d of %d (%s) takes %d bytes in a kb.document_ingested event with the document's fields, over the bound of %d bytes of one event: cut the document into smaller chunks (chunk_tokens) or raise the bound",
				ErrTooLarge, ev.Source, i+1, len(ev.Chunks), strings.Join(c.HeadingPath, " > "), headBytes+n, max)
		}
		if size+n > max {
			cuts = append(cuts, i)
			size = headBytes
		}
		size += n
	}
	return cuts, nil
}

// chunkBytesBound bounds the bytes of c's JSON.
func chunkBytesBound(c messages.KBChunk) int {
	n := 6*(len(c.ChunkID)+len(c.Hash)+len(c.Text)) + 4*((4*len(c.Vector)+2)/3) + 160
	for _, h := range c.HeadingPath {
		n += 6*len(h) + 3
	}
	return n
}

// splitEvent returns the events of a write of ev cut where cuts says
// (eventCuts): ev alone, or its parts, each with the document's fields and a
// run of its chunks, numbered from 1.
func splitEvent(ev *messages.KBDocumentIngested, cuts []int) []messages.Payload {
	if len(cuts) == 0 {
		return []messages.Payload{ev}
	}
	out := make([]messages.Payload, 0, len(cuts)+1)
	start := 0
	for i := range len(cuts) + 1 {
		end := len(ev.Chunks)
		if i < len(cuts) {
			end = cuts[i]
		}
		part := *ev
		part.Part, part.Parts, part.Chunks = i+1, len(cuts)+1, ev.Chunks[start:end]
		out = append(out, &part)
		start = end
	}
	return out
}

// decided answers an ingestion from the fold when it can: the key was applied, or
// the document is unchanged (under a client's key, once the key's mark is
// written: markKey). It returns the name the document is stored under
// (storedName). The caller holds mu for writing.
func (b *Base) decided(ctx context.Context, source, hash, format, key string) (string, AddResult, bool, error) {
	if err := b.fold(ctx); err != nil {
		return source, AddResult{}, false, err
	}
	source = b.storedName(source)
	if _, ok := b.st.keys[key]; key != "" && ok {
		r, err := b.keyResult(key, source, hash, format)
		if err != nil || b.st.keyDone(key) {
			return source, r, true, err
		}
		// Stored in some of its parts only: written again, whole.
	}
	if d := b.st.docs[source]; b.unchanged(d, hash, format) {
		if !b.keepsRequest(key) {
			return source, unchangedResult(d), true, nil
		}
		res, err := b.markKey(ctx, source, hash, format, key)
		if errors.Is(err, errChanged) {
			return source, AddResult{}, false, nil // ingested, as any other change
		}
		return source, res, true, err
	}
	return source, AddResult{}, false, nil
}

// keyMark is the mark of key (messages.KBKeyPart), sent with the stored
// document d unchanged.
func keyMark(d *document, key string) *messages.KBDocumentIngested {
	res := unchangedResult(d)
	return &messages.KBDocumentIngested{Key: key, Reason: "unchanged: the document is stored already; the mark keeps its key's request",
		Source: d.source, Hash: d.hash, Bytes: d.bytes, MarkdownBytes: d.markdownBytes, Embedder: d.embedder, Format: d.format,
		Conversion: d.conversion, Status: StatusUnchanged, Part: messages.KBKeyPart, Parts: 2, ChunkCount: res.Chunks, Tokens: res.Tokens}
}

// keepsRequest reports whether key is a client's whose request a mark keeps
// (Config.KeepsRequest).
func (b *Base) keepsRequest(key string) bool {
	return key != "" && b.cfg.KeepsRequest != nil && b.cfg.KeepsRequest(key)
}

// errChanged says that a key's mark was not written: the document changed
// meanwhile (another writer), and is to be ingested.
var errChanged = errors.New("knowledge: the document changed meanwhile")

// markKey records that client's key key was sent with document source, of hash
// read as format, found stored already unchanged (Config.KeepsRequest): its mark
// (messages.KBKeyPart) keeps the key's request, so that the key sent again with
// another document is refused after a restart and on another node too. It
// returns the unchanged document's answer, or the key's when it was applied
// meanwhile, or errChanged, writing nothing, when the document changed
// meanwhile. The caller holds mu for writing, and folded the stream.
func (b *Base) markKey(ctx context.Context, source, hash, format, key string) (AddResult, error) {
	var res AddResult
	applied, err := b.write(ctx, key, func() ([]messages.Payload, error) {
		d := b.st.docs[source]
		if !b.unchanged(d, hash, format) {
			return nil, errChanged
		}
		res = unchangedResult(d)
		return []messages.Payload{keyMark(d, key)}, nil
	})
	switch {
	case err != nil:
		return AddResult{}, err
	case applied:
		return b.keyResult(key, source, hash, format)
	}
	return res, nil
}

// storedName is the name under which the knowledge base holds, or is to hold,
// document source. Names are kept in Unicode NFC, so that "café" written with a
// composed é (U+00E9, as most systems write it) and with e + U+0301 (as macOS
// writes file names) is one document: source itself when a document has that
// name, else the document whose name is source's in NFC (one stored before names
// were normalised, with decomposed accents, stays reachable under either
// spelling and is updated, not duplicated), else source in NFC. The caller holds
// mu (either way).
func (b *Base) storedName(source string) string {
	if b.st.docs[source] != nil {
		return source
	}
	nfc := norm.NFC.String(source)
	if b.st.docs[nfc] != nil {
		return nfc
	}
	if b.st.unnormal == 0 {
		return nfc // no name is stored decomposed: none to find
	}
	found := ""
	for s := range b.st.docs {
		if !norm.NFC.IsNormalString(s) && norm.NFC.String(s) == nfc && (found == "" || s < found) {
			found = s
		}
	}
	if found != "" {
		return found
	}
	return nfc
}

// unchanged reports whether the stored document d is the document of hash, read
// in format by the current conversion (rag.ConversionVersion) and embedded by
// the configured embedder: then an ingestion has nothing to do. The same bytes
// read another way (a file sent again under another extension, a text sent again
// as the file it is) give other chunks, and a document embedded by another model
// other vectors: they are ingested again. So is a document read by an older
// conversion, or stored before its format was recorded (read by the code before
// the table and heading fixes of version 1): sent again, it is converted and
// embedded anew, once. So is a version split across events that the fold did not
// find whole (document.whole): sent again, it is stored whole.
func (b *Base) unchanged(d *document, hash, format string) bool {
	return d != nil && d.hash == hash && d.embedder == b.cfg.EmbedderName && d.format == format && d.conversion >= rag.ConversionVersion &&
		d.whole()
}

// keyResult is the result of an ingestion whose key was applied before.
func (b *Base) keyResult(key, source, hash, format string) (AddResult, error) {
	k := b.st.keys[key]
	// The same bytes read another way are another version (unchanged); a key
	// applied before the format was recorded is taken as of this one.
	if k.removed || k.source != source || k.hash != hash || (k.format != "" && k.format != format) {
		what := fmt.Sprintf("the ingestion of %q", k.source)
		if k.removed {
			what = fmt.Sprintf("the removal of %q", k.source)
		}
		return AddResult{}, fmt.Errorf("%w: key %q was applied to %s, not to this version of %q", ErrKeyReused, key, what, source)
	}
	return k.result, nil
}

func unchangedResult(d *document) AddResult {
	desc := d.describe()
	return AddResult{Source: d.source, Status: StatusUnchanged, Hash: d.hash, Chunks: desc.Chunks, Tokens: desc.Tokens,
		Bytes: d.bytes, MarkdownBytes: d.markdownBytes}
}

// chunkID is the ID of chunk i of a version of a document: a changed document's
// chunks get new IDs, so the old ones can be deleted from the vector store while
// the new ones are upserted.
func chunkID(source, hash string, i int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d", source, hash, i)
	return "c_" + hex.EncodeToString(h.Sum(nil)[:12])
}

// Remove removes a document and its chunks in one kb.document_removed event. A
// source the knowledge base does not hold fails with ErrNotFound, or ErrInvalid when
// CheckSource refuses it (a document it holds is removed whatever its name: one
// named before CheckSource refused what it refuses now must not be stuck); a key
// applied before to the same removal returns nil and writes nothing; one applied
// to another change (an ingestion, also one stored in some of its parts only) or
// to the removal of another document fails with ErrKeyReused, writing nothing.
func (b *Base) Remove(ctx context.Context, source, key string) error {
	invalid := CheckSource(source)
	if len(source) > MaxSourceLen {
		return invalid // never stored: no fold needed to say so
	}
	defer b.compactIfDue(ctx) // after the unlock: searches and writes go on meanwhile
	defer b.sync(ctx)         // after the unlock, before the compaction
	b.mu.Lock()
	defer b.mu.Unlock()
	applied, err := b.write(ctx, key, func() ([]messages.Payload, error) {
		source = b.storedName(source)
		if k, ok := b.st.keys[key]; key != "" && ok {
			// Not done (keyDone: a removal is): an ingestion stored in some of
			// its parts, which only its own request completes.
			return nil, fmt.Errorf("%w: key %q was applied to a change of %q, not to the removal of %q", ErrKeyReused, key, k.source, source)
		}
		if b.st.docs[source] == nil {
			if invalid != nil {
				return nil, invalid
			}
			return nil, fmt.Errorf("%w: knowledge base %s has no document %q", ErrNotFound, b.name, source)
		}
		return []messages.Payload{&messages.KBDocumentRemoved{Key: key, Reason: "removed", Source: source}}, nil
	})
	if err != nil {
		return err
	}
	if k := b.st.keys[key]; applied && (!k.removed || k.source != source) {
		return fmt.Errorf("%w: key %q was applied to a change of %q, not to the removal of %q", ErrKeyReused, key, k.source, source)
	}
	return nil
}

// embedPassages embeds texts with the passage embedder, in batches of
// Config.EmbedBatch, retrying each batch on llm.ErrTransient, and checks every
// vector (finite, not zero, one dimension).
func (b *Base) embedPassages(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += b.cfg.EmbedBatch {
		batch := texts[start:min(len(texts), start+b.cfg.EmbedBatch)]
		vs, err := b.embedRetry(ctx, b.cfg.Embedder, batch)
		if err != nil {
			return nil, fmt.Errorf("chunks %d to %d of %d: %w", start+1, start+len(batch), len(texts), err)
		}
		out = append(out, vs...)
	}
	dim := 0
	for i, v := range out {
		switch {
		case len(v) == 0:
		case dim == 0:
			dim = len(v)
		case len(v) != dim:
			return nil, fmt.Errorf("%w: the embedder gave chunk %d %d dimensions and an earlier one %d", ErrEmbedder, i+1, len(v), dim)
		}
	}
	return out, nil
}

// embedRetry makes one Embed call of texts, again after a back-off while it fails
// with llm.ErrTransient, at most Config.EmbedAttempts times; it honours ctx while
// it waits.
func (b *Base) embedRetry(ctx context.Context, e llm.Embedder, texts []string) ([][]float32, error) {
	wait := b.cfg.EmbedBackoff
	var last error
	for attempt := 1; attempt <= b.cfg.EmbedAttempts; attempt++ {
		vs, err := e.Embed(ctx, texts)
		if err == nil {
			return checkVectors(vs, len(texts))
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("knowledge: embedding: %w", ctx.Err())
		}
		if !errors.Is(err, llm.ErrTransient) {
			return nil, fmt.Errorf("%w: %w", ErrEmbedder, err)
		}
		last = err
		if attempt == b.cfg.EmbedAttempts {
			break
		}
		d := wait
		if hint, ok := llm.RetryAfter(err); ok {
			d = min(hint, MaxEmbedBackoff)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("knowledge: embedding, waiting to retry after %v: %w", last, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, MaxEmbedBackoff)
	}
	return nil, fmt.Errorf("%w: %d attempts failed, the last with: %w", ErrEmbedder, b.cfg.EmbedAttempts, last)
}

// checkVectors checks that an embedder returned one vector per text, each finite;
// a zero vector becomes nil (no vector).
func checkVectors(vs [][]float32, n int) ([][]float32, error) {
	if len(vs) != n {
		return nil, fmt.Errorf("%w: the embedder returned %d vectors for %d texts", ErrEmbedder, len(vs), n)
	}
	for i, v := range vs {
		if len(v) == 0 {
			return nil, fmt.Errorf("%w: the embedder returned an empty vector for text %d", ErrEmbedder, i+1)
		}
		zero := true
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("%w: the embedder returned a non-finite component for text %d", ErrEmbedder, i+1)
			}
			zero = zero && x == 0
		}
		if zero {
			// A text the embedder finds nothing in (the hashing embedder and a chunk
			// of punctuation): it has no direction, and the chunk is found by its
			// words only.
			vs[i] = nil
		}
	}
	return vs, nil
}
