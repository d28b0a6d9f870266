package node

import (
	"errors"
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/pipelines/rag"
	"github.com/troupe-run/troupe/tools"
)

// The errors a rag call's arguments caused go back to the model as argument
// errors: among them a text the knowledge base refuses to take (a NUL byte in an
// add's content is rag.ErrUnsupported, as a file with one is). Other errors stay
// the tool's own.
func TestRAGToolFaultsTheArgumentsForWhatTheyCaused(t *testing.T) {
	tool := &ragTool{name: "rag"}
	for _, err := range []error{
		fmt.Errorf("knowledge: add notes.md: %w", rag.ErrUnsupported),
		fmt.Errorf("knowledge: add notes.md: %w", rag.ErrMalformed),
		fmt.Errorf("%w: no such document", knowledge.ErrNotFound),
	} {
		var ae *tools.ArgumentError
		if got := tool.fault(err); !errors.As(got, &ae) {
			t.Errorf("fault(%v) = %v (%T), want an argument error", err, got, got)
		}
	}
	other := errors.New("the log is down")
	if got := tool.fault(other); got != other {
		t.Errorf("fault(%v) = %v, want it unchanged", other, got)
	}
}
