package node_test

import (
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/node"
)

// frozenProxy forwards TCP connections to a server until frozen: then it holds
// the bytes sent either way, on the connections open and on new ones alike,
// until thawed, as with a server stopped (SIGSTOP, a long pause) that the
// kernel still accepts connections for.
type frozenProxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
}

func startFrozenProxy(t *testing.T, target string) *frozenProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &frozenProxy{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				c.Close()
				continue
			}
			go p.pipe(c, s)
			go p.pipe(s, c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

func (p *frozenProxy) pipe(from, to net.Conn) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		for p.frozen.Load() {
			time.Sleep(10 * time.Millisecond) // a test's wait, until thawed
		}
		if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Milvus stops answering (frozen) under a running node: an upload whose vectors
// wait for it does not hold up the base: searches by BM25 and hybrid answer
// meanwhile, from the fold, while the upload waits for Milvus. Before, the
// upload held the base's lock through its Milvus calls, and every search of the
// base waited as long as it did (11.8 s here; up to the 30 s request timeout a
// call).
func TestKnowledgeSearchesWhileMilvusIsFrozen(t *testing.T) {
	addr := milvusAddr(t)
	px := startFrozenProxy(t, addr)
	k := newKBNode(t, node.Config{Knowledge: &knowledge.Config{Vectors: newMilvusStore(t, px.ln.Addr().String(), milvusPrefix(t, addr))}})
	if code, b := k.postText(t, "docs", "guide/install.md", kbInstall); code != http.StatusCreated {
		t.Fatalf("adding a document with Milvus up: %d %s", code, b)
	}
	px.frozen.Store(true)
	added := make(chan int, 1)
	go func() {
		code, _ := k.postText(t, "docs", "guide/limits.md", kbLimits)
		added <- code
	}()
	time.Sleep(500 * time.Millisecond) // the upload reaches Milvus (had it not, the searches would not wait either)
	answered := make(chan string, 1)
	began := time.Now()
	go func() {
		var got []string
		for _, mode := range []string{"bm25", "hybrid"} {
			code, ans, msg := k.search(t, "docs", url.Values{"q": {"install the binary"}, "mode": {mode}, "limit": {"1"}})
			got = append(got, mode+" "+http.StatusText(code)+" "+msg)
			if code == http.StatusOK && len(ans.Results) == 1 {
				got[len(got)-1] = mode + " " + ans.Results[0].Source
			}
		}
		answered <- strings.Join(got, "; ")
	}()
	var code int
	select {
	case got := <-answered:
		if got != "bm25 guide/install.md; hybrid guide/install.md" {
			t.Errorf("searches while Milvus is frozen: %s", got)
		}
		select {
		case code = <-added:
			t.Errorf("the searches answered only once the upload was answered (%d, after %v): they waited for the frozen Milvus", code, time.Since(began).Round(time.Millisecond))
		default:
			t.Logf("the searches answered in %v, the upload still waiting for Milvus", time.Since(began).Round(time.Millisecond))
		}
	case code = <-added:
		got := <-answered
		t.Errorf("the searches (%s) answered only once the upload was answered (%d, after %v): they waited for the frozen Milvus", got, code, time.Since(began).Round(time.Millisecond))
	}
	px.frozen.Store(false)
	if code == 0 {
		code = <-added
	}
	if code != http.StatusCreated {
		t.Errorf("the upload while Milvus was frozen: %d, want 201: it is in the log", code)
	}
	lags := func(notes []string) bool {
		return slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "vector store lags") })
	}
	var ans node.KBSearchAnswer
	for try := 1; ; try++ {
		code, ans, _ = k.search(t, "docs", url.Values{"q": {"a document is at most 32 MiB"}, "mode": {"vector"}, "limit": {"1"}})
		if code == http.StatusOK && !lags(ans.Notes) || try == 60 {
			t.Logf("after %d tries: %q", try, ans.Notes)
			break
		}
		time.Sleep(time.Second)
	}
	if code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].Source != "guide/limits.md" || len(ans.Notes) != 0 {
		t.Errorf("vector search once Milvus answers: %d %+v %q; want guide/limits.md from Milvus, no note", code, ans.Results, ans.Notes)
	}
}
