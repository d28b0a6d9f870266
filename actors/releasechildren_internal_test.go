package actors

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// childrenContext is an actor.Context whose Children is a given slice.
type childrenContext struct {
	actor.Context
	children []*actor.PID
}

func (c childrenContext) Children() []*actor.PID { return c.children }

// TestReleaseStoppedChildrenClearsStaleSlots checks that the slots past the
// children's length that still hold PIDs (a Remove's vacated slot, a Clear's whole
// former length) are cleared, those before the length kept.
func TestReleaseStoppedChildrenClearsStaleSlots(t *testing.T) {
	backing := make([]*actor.PID, 8)
	for i := range 5 {
		backing[i] = actor.NewPID("local", string(rune('a'+i)))
	}
	for _, length := range []int{4, 2, 0} { // a Remove, another, then a Clear
		releaseStoppedChildren(childrenContext{children: backing[:length]})
		for i, p := range backing {
			if i < length && p == nil {
				t.Fatalf("length %d: child %d was cleared", length, i)
			}
			if i >= length && p != nil {
				t.Fatalf("length %d: stale slot %d still holds %s", length, i, p.Id)
			}
		}
	}
}
