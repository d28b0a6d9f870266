package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
)

// startKBChild starts node serve (this test binary as a child process) on dir/data
// with the offline model, and waits for it to answer.
func startKBChild(t *testing.T, dir string) *child {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "serve", "--data", filepath.Join(dir, "data"), "--http", addr, "--model", "offline")
	cmd.Env = append(os.Environ(), "TROUPE_CRASH_CHILD=1", "TROUPE_MILVUS=")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	c := &child{cmd: cmd, addr: addr, stderr: stderr}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			if err = startingAnswer(resp); err == nil {
				return c
			}
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("node did not come up: %v\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// uploadFile posts one file to knowledge base docs under its path, with the
// Idempotency-Key "file/<path>"; it returns the status (0 when the connection
// failed, as it does when the node is killed).
func uploadFile(client *http.Client, addr, path string, content []byte) int {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", path)
	_, _ = fw.Write(content)
	_ = mw.Close()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/kb/docs/documents", &buf)
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Idempotency-Key", "file/"+path)
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// A node killed with SIGKILL while a large folder is being uploaded into a
// knowledge base loses nothing that was written and writes nothing twice: after a
// restart, uploading the whole folder again (same Idempotency-Keys) leaves every
// document in the knowledge base's stream exactly once, and every one searchable.
func TestKBKill9DuringFolderUploadThenReAdd(t *testing.T) {
	dir := t.TempDir()
	const files = 80
	paths := make([]string, files)
	contents := make([][]byte, files)
	for i := range files {
		paths[i] = fmt.Sprintf("folder/part%02d/doc%03d.md", i%7, i)
		var sb strings.Builder
		fmt.Fprintf(&sb, "# Document %d\n\n", i)
		for s := range 40 {
			fmt.Fprintf(&sb, "## Section %d\n\nDocument %d section %d mentions the marker tapir%03d and some filler text to make it longer.\n\n", s, i, s, i)
		}
		contents[i] = []byte(sb.String())
	}
	upload := func(c *child, stopAfter int, kill func()) int64 {
		var ok atomic.Int64
		client := &http.Client{Timeout: 30 * time.Second}
		next := atomic.Int64{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= files {
						return
					}
					code := uploadFile(client, c.addr, paths[i], contents[i])
					if code == http.StatusCreated || code == http.StatusOK {
						if ok.Add(1) == int64(stopAfter) && kill != nil {
							kill()
						}
					} else if kill == nil {
						t.Errorf("upload %s: status %d\n%s", paths[i], code, c.stderr)
					}
				}
			}()
		}
		wg.Wait()
		return ok.Load()
	}

	c := startKBChild(t, dir)
	var once sync.Once
	first := upload(c, files/4, func() { once.Do(func() { c.kill9(t) }) })
	if n := first; n < files/4 || n >= files {
		t.Fatalf("%d uploads succeeded before and around the kill; want the kill to land mid-folder", n)
	}

	c = startKBChild(t, dir)
	if again := upload(c, 0, nil); again != files {
		t.Fatalf("after the restart %d of %d uploads succeeded", again, files)
	}
	// Every document listed once, searchable.
	resp, err := http.Get("http://" + c.addr + "/v1/kb/docs/documents")
	if err != nil {
		t.Fatal(err)
	}
	var listed struct {
		Documents []knowledge.Document `json:"documents"`
	}
	err = json.NewDecoder(resp.Body).Decode(&listed)
	resp.Body.Close()
	if err != nil || len(listed.Documents) != files {
		t.Fatalf("listed %d documents (%v); want %d", len(listed.Documents), err, files)
	}
	for _, i := range []int{0, files / 3, files - 1} {
		resp, err := http.Get(fmt.Sprintf("http://%s/v1/kb/docs/search?q=tapir%03d&mode=bm25&limit=1", c.addr, i))
		if err != nil {
			t.Fatal(err)
		}
		var ans struct {
			Results []struct {
				Source string `json:"source"`
			} `json:"results"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		if len(ans.Results) != 1 || ans.Results[0].Source != paths[i] {
			t.Fatalf("search for tapir%03d: %+v; want %s", i, ans, paths[i])
		}
	}
	c.kill9(t)

	// The stream: one kb.document_ingested per document, none twice.
	lg := openDataReadOnly(t, dir)
	defer lg.Close()
	events, err := lg.Read(context.Background(), knowledge.Stream("docs"), 1)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := p.(*messages.KBDocumentIngested); ok {
			seen[in.Source]++
		}
	}
	if len(seen) != files {
		t.Fatalf("%d documents ingested; want %d", len(seen), files)
	}
	for src, n := range seen {
		if n != 1 {
			t.Fatalf("%s ingested %d times", src, n)
		}
	}
}
