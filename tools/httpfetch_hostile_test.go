package tools_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/tools"
)

// zeros compresses n zero bytes ('a' when letter) with w.
func compressed(t *testing.T, n int, gz bool) []byte {
	var b bytes.Buffer
	var w io.WriteCloser
	if gz {
		w = gzip.NewWriter(&b)
	} else {
		w, _ = flate.NewWriter(&b, flate.BestCompression)
	}
	chunk := bytes.Repeat([]byte("a"), 1<<16)
	for i := 0; i < n; i += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A hostile server's body reaches the model only as text: the size limit holds
// after decompression (a gzip bomb), a body the transport cannot decode (deflate,
// br) is refused rather than handed over as compressed bytes, and a binary body that
// claims to be text (NUL bytes under text/plain) is refused as binary.
func TestHTTPFetchHostileBodies(t *testing.T) {
	bomb := compressed(t, 64<<20, true)
	deflated := compressed(t, 1<<20, false)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bomb":
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(bomb)
		case "/deflate":
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Encoding", "deflate")
			w.Write(deflated)
		case "/br":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "br")
			w.Write([]byte("\x1b\xff\xff\x0f\x00\x00\x00"))
		case "/lie":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Write([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00>\x00"))
		case "/endless":
			w.Header().Set("Content-Type", "text/plain")
			chunk := bytes.Repeat([]byte("b"), 4096)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}
	})
	tool, err := tools.NewHTTPFetch(tools.HTTPFetchConfig{Allow: []string{"127.0.0.0/8"}, MaxBytes: 1000, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/bomb":    "\n\n" + strings.Repeat("a", 1000) + "\n[truncated: more than 1000 bytes, showing the first 1000]",
		"/endless": "\n\n" + strings.Repeat("b", 1000) + "\n[truncated: more than 1000 bytes, showing the first 1000]",
	} {
		out, err := fetch(t, tool, srv.URL+path, "")
		if err != nil || !strings.HasSuffix(out, want) {
			t.Errorf("%s: %.300q, %v; want it to end %.80q", path, out, err, want)
		}
	}
	for path, want := range map[string]string{"/deflate": `"deflate"`, "/br": `"br"`, "/lie": "binary"} {
		out, err := fetch(t, tool, srv.URL+path, "")
		if !errors.Is(err, tools.ErrNotText) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %.200q, %v; want ErrNotText naming %s", path, out, err, want)
		}
	}
}

// A server that trickles its headers or its body is cut off at the call's timeout,
// and one whose headers are huge is refused.
func TestHTTPFetchSlowAndHugeHeaders(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trickle":
			w.Header().Set("Content-Type", "text/plain")
			for r.Context().Err() == nil {
				if _, err := w.Write([]byte("x")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-release:
					return
				case <-r.Context().Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		case "/headers":
			for i := range 2000 {
				w.Header().Set(fmt.Sprintf("X-Junk-%d", i), strings.Repeat("j", 1000))
			}
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "ok")
		}
	})
	tool, err := tools.NewHTTPFetch(tools.HTTPFetchConfig{Allow: []string{"127.0.0.0/8"}, MaxBytes: 1 << 20, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(t, tool, srv.URL+"/trickle", ""); err == nil || !strings.Contains(err.Error(), "no complete response within") {
		t.Errorf("trickle: %v", err)
	}
	if out, err := fetch(t, tool, srv.URL+"/headers", ""); err == nil {
		t.Errorf("2 MB of headers: %.200q", out)
	}
}
