package node_test

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// An upload naming its source twice is refused and writes nothing: the last
// source field was taken silently (curl -F source=docs/a.md ... -F source=b.md
// stored b.md).
func TestKBUploadWithTwoSourcesIsRefused(t *testing.T) {
	k := newKBNode(t, node.Config{})
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("source", "docs/install.md")
	_ = mw.WriteField("source", "other.md")
	fw, _ := mw.CreateFormFile("file", "install.md")
	_, _ = fw.Write([]byte(kbInstall))
	_ = mw.Close()
	code, b := k.do(t, http.MethodPost, "/v1/kb/docs/documents", mw.FormDataContentType(), &buf)
	if code != http.StatusBadRequest {
		t.Errorf("%d %s; want 400", code, b)
	}
	if got := k.ingested(t, "docs"); len(got) != 0 {
		t.Fatalf("ingested %v; want nothing", got)
	}
}
