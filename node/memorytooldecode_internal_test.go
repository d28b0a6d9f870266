package node

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// The owner of a namespace reads a routed memory tool call (memoryToolArgs) once:
// to tell a consolidation (run beside the handler) and to run the call. It was
// read twice: on a large call (here 256 KiB of content), each reading copies its
// arguments again.
func TestRoutedMemoryToolCallIsReadOnce(t *testing.T) {
	ctx := context.Background()
	n, err := New(ctx, Config{DataDir: t.TempDir(), Memory: &memory.Config{},
		MemoryTool: &memory.ToolConfig{Namespace: "agent:default"}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const size = 256 << 10
	arguments := `{"op":"add","args":{"content":"` + strings.Repeat("x", size) + `"}}`
	// A tool the node does not have: answered at once, after the arguments are read.
	args, _ := json.Marshal(memoryToolArgs{Tool: "memory_unknown", Arguments: arguments})
	c := messages.MemoryCommand{ID: "c-1", SessionID: memory.Stream("agent:default"), Namespace: "agent:default",
		Action: memoryToolCall, Key: "k-1", Args: args, ReplyTopic: messages.TopicReplies, ReplyNode: n.cfg.NodeID}
	payload, err := messages.EncodeCommand(&c)
	if err != nil {
		t.Fatal(err)
	}
	allocated := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.TotalAlloc
	}
	handle := func(i int) {
		if err := n.handleMemoryCommand(message.NewMessage(fmt.Sprintf("m-%d", i), payload)); err != nil {
			t.Fatal(err)
		}
	}
	handle(0) // what a node loads on its first command
	const runs = 8
	before := allocated()
	for i := range runs {
		handle(i + 1)
	}
	handled := (allocated() - before) / runs
	before = allocated()
	for range runs {
		if _, err := messages.DecodeMemoryCommand(payload); err != nil {
			t.Fatal(err)
		}
	}
	decoded := (allocated() - before) / runs
	// Past decoding the command, reading the call copies its arguments twice
	// (unquoted, then as a string), and finding its op once more; each more
	// reading of the call would copy them twice again.
	if extra := int64(handled) - int64(decoded); extra >= 4*size {
		t.Fatalf("handling the call allocated %d bytes past decoding its command, %.1f times its %d bytes of arguments: want the call read once (under 4 times)",
			extra, float64(extra)/size, size)
	}
}
