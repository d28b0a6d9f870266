package node_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mclient "github.com/milvus-io/milvus-sdk-go/v2/client"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// milvusAddr returns the address of the Milvus server of TROUPE_TEST_MILVUS, or
// skips the test (fails it under CI=true, where the server must be there).
func milvusAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("TROUPE_TEST_MILVUS")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TROUPE_TEST_MILVUS is not set under CI: start Milvus (deploy/milvus.sh start && deploy/milvus.sh wait)")
		}
		t.Skip("TROUPE_TEST_MILVUS is not set: start Milvus (deploy/milvus.sh start && deploy/milvus.sh wait) and set TROUPE_TEST_MILVUS=127.0.0.1:19530")
	}
	return addr
}

// milvusPrefix returns a collection prefix of the test's own, whose collections
// are dropped when the test ends.
func milvusPrefix(t *testing.T, addr string) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	prefix := "troupe_nt_" + hex.EncodeToString(b) + "_"
	t.Cleanup(func() { dropMilvusPrefix(t, addr, prefix) })
	return prefix
}

func dropMilvusPrefix(t *testing.T, addr, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := mclient.NewClient(ctx, mclient.Config{Address: addr})
	if err != nil {
		t.Errorf("drop %s*: connect: %v", prefix, err)
		return
	}
	defer c.Close()
	colls, err := c.ListCollections(ctx)
	if err != nil {
		t.Errorf("drop %s*: list: %v", prefix, err)
		return
	}
	for _, coll := range colls {
		if strings.HasPrefix(coll.Name, prefix) {
			if err := c.DropCollection(ctx, coll.Name); err != nil {
				t.Errorf("drop %s: %v", coll.Name, err)
			}
		}
	}
}

// cutProxy forwards TCP connections to a server until it is cut: then it closes
// every connection and refuses new ones (the server seems down), until restored.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	cut    bool
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	return p
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *cutProxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	from.Close()
	to.Close()
	p.mu.Lock()
	delete(p.conns, from)
	delete(p.conns, to)
	p.mu.Unlock()
}

// setCut cuts (closing every connection) or restores the proxy.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

func newMilvusStore(t *testing.T, addr, prefix string) *milvus.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := milvus.New(ctx, milvus.Config{Addr: addr, Prefix: prefix, Consistency: milvus.Session})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// vectorSearch searches namespace ns by vector alone (the keyword index, kept in
// the node, cannot stand in for lost vectors) and returns the IDs found.
func (mn memoryNode) vectorSearch(t *testing.T, ns, q string) (int, []string, string) {
	t.Helper()
	code, ans := mn.search(t, url.Values{"namespace": {ns}, "q": {q}, "mode": {"vector"}, "limit": {"1"}})
	var ids []string
	for _, r := range ans.Results {
		ids = append(ids, r.ID)
	}
	return code, ids, ans.Error
}

// A Milvus that lost its data (started afresh, or its collections dropped) under a
// running node: the node makes the collections again and puts back the vectors
// of the memories it already had, which its events hold, and searches by vector
// find them all, old and new.
func TestMemoryOnMilvusStartedAfresh(t *testing.T) {
	addr := milvusAddr(t)
	prefix := milvusPrefix(t, addr)
	mn := newMemoryNode(t, node.Config{Memory: &memory.Config{Vectors: newMilvusStore(t, addr, prefix)}})
	const ns = "user:afresh"
	old := mn.mustPost(t, `[{"namespace":"user:afresh","tier":"semantic","content":"Alice likes green tea"},
		{"namespace":"user:afresh","tier":"episodic","content":"Alice flew to Oslo on Friday"}]`)
	for i, q := range []string{"Alice likes green tea", "Alice flew to Oslo on Friday"} {
		if code, ids, msg := mn.vectorSearch(t, ns, q); code != http.StatusOK || !slices.Equal(ids, old[i:i+1]) {
			t.Fatalf("search %q before the loss: %d %v %s", q, code, ids, msg)
		}
	}

	dropMilvusPrefix(t, addr, prefix) // Milvus loses every collection

	added, msg := []string(nil), ""
	code := 0
	if code, added, msg = mn.post(t, `{"namespace":"user:afresh","tier":"semantic","content":"Bob likes black coffee"}`); code != http.StatusCreated {
		t.Fatalf("POST after Milvus lost its data: %d %s", code, msg)
	}
	for q, want := range map[string]string{"Alice likes green tea": old[0], "Alice flew to Oslo on Friday": old[1], "Bob likes black coffee": added[0]} {
		if code, ids, msg := mn.vectorSearch(t, ns, q); code != http.StatusOK || !slices.Equal(ids, []string{want}) {
			t.Errorf("search %q after Milvus lost its data: %d %v %s, want [%s]", q, code, ids, msg, want)
		}
	}
}
