package node

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
)

// An owner joins an upload's parts once it has them all, whatever their order and
// however often each comes; keeps them until the add is done; refuses a part
// whose earlier parts it lacks (the sender starts again), a part of another shape,
// and parts past its bounds; and forgets an upload left idle.
func TestKBUploadPartsJoinOnceAndBounded(t *testing.T) {
	var u kbUploads
	now := time.Unix(1_700_000_000, 0)
	p := func(upload string, i, total int, data string) kbPartArgs {
		return kbPartArgs{Upload: upload, Index: i, Total: total, Data: []byte(data)}
	}
	if _, _, err := u.part("docs", p("k#1", 1, 3, "b"), now); !errors.Is(err, errUploadIncomplete) {
		t.Fatalf("a second part without the first: %v, want errUploadIncomplete", err)
	}
	for _, a := range []kbPartArgs{p("k#1", 0, 3, "aa"), p("k#1", 0, 3, "aa"), p("k#1", 2, 3, "cc")} {
		if whole, _, err := u.part("docs", a, now); err != nil || whole != nil {
			t.Fatalf("part %d: %q %v, want it kept", a.Index, whole, err)
		}
	}
	// Another base's upload under the same name is another upload.
	if _, _, err := u.part("other", p("k#1", 1, 3, "bb"), now); !errors.Is(err, errUploadIncomplete) {
		t.Fatalf("a part for another base: %v", err)
	}
	if _, _, err := u.part("docs", p("k#1", 1, 4, "bb"), now); !errors.Is(err, knowledge.ErrInvalid) {
		t.Fatalf("a part saying another total: %v, want ErrInvalid", err)
	}
	whole, done, err := u.part("docs", p("k#1", 1, 3, "bb"), now)
	if err != nil || !bytes.Equal(whole, []byte("aabbcc")) {
		t.Fatalf("the last part: %q %v, want aabbcc", whole, err)
	}
	// The add failed (the node retries the last part): the parts are still there.
	if whole, _, err := u.part("docs", p("k#1", 1, 3, "bb"), now); err != nil || string(whole) != "aabbcc" {
		t.Fatalf("the last part again: %q %v", whole, err)
	}
	done()
	if u.held != 0 || len(u.m) != 0 {
		t.Fatalf("after the add: %d bytes in %d uploads held", u.held, len(u.m))
	}
	if _, _, err := u.part("docs", p("k#1", 2, 3, "cc"), now); !errors.Is(err, errUploadIncomplete) {
		t.Fatalf("a part delivered again after the add: %v, want errUploadIncomplete", err)
	}

	for _, bad := range []kbPartArgs{p("", 0, 1, "x"), p("k", 0, 0, "x"), p("k", 2, 2, "x"), p("k", -1, 2, "x"), p("k", 0, kbMaxParts+1, "x"),
		{Upload: "k", Index: 0, Total: 1, Data: make([]byte, kbPartMax+1)}} {
		if _, _, err := u.part("docs", bad, now); !errors.Is(err, knowledge.ErrInvalid) {
			t.Errorf("part %+v (%d bytes): %v, want ErrInvalid", bad.Upload, len(bad.Data), err)
		}
	}

	// Idle uploads are forgotten; the bytes held are bounded.
	if _, _, err := u.part("docs", p("idle", 0, 2, "x"), now); err != nil {
		t.Fatal(err)
	}
	later := now.Add(kbUploadIdle + time.Second)
	if _, _, err := u.part("docs", p("idle", 1, 2, "y"), later); !errors.Is(err, errUploadIncomplete) {
		t.Fatalf("a part after the upload idled out: %v", err)
	}
	chunk := make([]byte, kbPartMax)
	var refused error
	for n := 0; n < kbUploadsMaxHeld/kbPartMax+2 && refused == nil; n++ {
		_, _, refused = u.part("docs", kbPartArgs{Upload: "big" + strconv.Itoa(n/(kbMaxParts-1)), Index: n % (kbMaxParts - 1), Total: kbMaxParts, Data: chunk}, later)
	}
	if !errors.Is(refused, knowledge.ErrTooLarge) || u.held > kbUploadsMaxHeld {
		t.Fatalf("past %d MiB held: %v (held %d)", kbUploadsMaxHeld>>20, refused, u.held)
	}
}

// The node forgets the parts of an upload whose sender gave up on it (its client
// left mid-upload) once it has been idle for kbUploadIdle, with no other upload
// coming: the node's expiry, which runs while the node is idle, drops them.
// Before, only a part of a later upload did, so that an idle owner held up to
// kbUploadsMaxHeld of abandoned parts for as long as no upload came.
func TestIdleNodeForgetsAnAbandonedUpload(t *testing.T) {
	n, err := New(context.Background(), Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	held := func() int {
		n.kbUploads.mu.Lock()
		defer n.kbUploads.mu.Unlock()
		return n.kbUploads.held
	}
	now := time.Now()
	if _, _, err := n.kbUploads.part("docs", kbPartArgs{Upload: "left", Index: 0, Total: 3, Data: make([]byte, kbPartMax)}, now); err != nil {
		t.Fatal(err)
	}
	n.expireIdle(now.Add(kbUploadIdle / 2))
	if held := held(); held != kbPartMax {
		t.Fatalf("held %d bytes of an upload idle for half of %s, want its %d", held, kbUploadIdle, kbPartMax)
	}
	n.expireIdle(now.Add(kbUploadIdle + time.Second))
	if held := held(); held != 0 {
		t.Fatalf("held %d bytes of an upload idle for longer than %s, want none", held, kbUploadIdle)
	}
}
