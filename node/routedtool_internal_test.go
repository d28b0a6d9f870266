package node

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// cutTool is a tool whose call fails once its context ends (as an append to a log
// does when the node stops), and fails of itself otherwise.
type cutTool struct{ started chan struct{} }

func (cutTool) Spec() messages.ToolSpec { return messages.ToolSpec{Name: "notes_add"} }

func (t cutTool) Call(ctx context.Context, c tools.Call) (string, error) {
	if t.started == nil {
		return "", errors.New("the notes refuse it")
	}
	close(t.started)
	<-ctx.Done()
	return "", errors.New("appending to notes/default: append: context canceled (the batch may or may not have been written)")
}

// A routed notes or memory tool call cut off on the stream's owner by its stop
// (or the loss of the partition) is not answered with the tool's failure, which
// the caller would record as the call's result, a change never made: it is an
// error of the handling, which leaves the command to the stream's next owner.
// A failure of the tool itself is answered, as before.
func TestRoutedToolCutOffOnTheOwnerIsNotAnswered(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tool := cutTool{started: make(chan struct{})}
	go func() {
		<-tool.started
		cancel()
	}()
	res, err := runRoutedTool(ctx, tool, "notes_add", "s/4", `{"type":"fact","body":"x"}`)
	if !errors.Is(err, errStopping) || res != nil {
		t.Fatalf("a call cut off by the owner's stop: answer %s, err %v; want no answer and errStopping", res, err)
	}

	res, err = runRoutedTool(context.Background(), cutTool{}, "notes_add", "s/4", `{}`)
	if err != nil {
		t.Fatalf("a failing tool: %v, want its failure answered", err)
	}
	var ans memoryToolAnswer
	if err := json.Unmarshal(res, &ans); err != nil || ans.Error != "the notes refuse it" {
		t.Errorf("the answer %s (%v), want the tool's error", res, err)
	}
}
