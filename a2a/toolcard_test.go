package a2a_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// A card endpoint that answers without end (a broken proxy, a hostile host) is
// read within a bound: the call fails at once saying so, rather than holding all
// it sends in memory until the card's timeout.
func TestToolReadsTheCardWithinABound(t *testing.T) {
	sent := make(chan int64, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		n, _ := io.WriteString(w, `{"name":"fake","description":"`)
		chunk := strings.Repeat("a", 64<<10)
		total := int64(n)
		for total < 64<<20 { // then it hangs, as an endless answer would go on
			m, err := io.WriteString(w, chunk)
			total += int64(m)
			if err != nil {
				break
			}
		}
		sent <- total
		<-r.Context().Done()
	}))
	defer srv.Close()
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: srv.URL + a2a.CardPath, CardTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tool.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"message":"hi"}`})
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Call's error = %v, want the card's bound", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the call failed after %s: it read the card until its timeout", took)
	}
	if n := <-sent; n >= 64<<20 {
		t.Errorf("the card's whole %d bytes were read", n)
	}
}
